//! What lockrun keeps resident while it holds or waits.
//!
//! A holding lockrun and its guard live as long as the job does, so what
//! start-up leaves behind is paid for the whole run, and twice: the guard
//! is forked from lockrun and inherits its heap. Parsing the command line
//! builds clap's whole definition (every subcommand, flag and help text)
//! and frees it again, and glibc keeps freed pages that are not at the top
//! of the heap: when a guard is forked, most of a heap of about half a
//! megabyte is free. Giving those pages back makes each process's own
//! memory about a quarter smaller (0.2 MiB each, `cargo bench --bench
//! lockrun -- memory`).

mod sys;

/// Hands the heap's free pages back to the kernel. Called once, before the
/// guard is forked, so lockrun keeps and the guard copies only what
/// start-up still uses. A page given back costs a page fault, and comes
/// back zeroed, if the heap grows into it again; nothing else changes.
pub fn give_back_free_heap() {
    sys::trim_heap();
}
