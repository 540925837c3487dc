//! The allocator call behind `memory`.
#![allow(unsafe_code)]

/// glibc's malloc_trim(3) with no padding: every arena's free pages are
/// returned with `MADV_DONTNEED`, the top of the heap with `sbrk`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(super) fn trim_heap() {
    // SAFETY: malloc_trim takes each arena's lock and touches only the
    // allocator's own free chunks; no Rust object owns or refers to them.
    // Its return value (whether anything was released) is of no use to us.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other C libraries have no such call; their heaps stay as they are.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn trim_heap() {}
