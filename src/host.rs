//! This host's name, an I/O error as a message fragment, a small file read
//! without blocking, and a file replaced whole under a reader's nose.

pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_string())
}

pub fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().collect::<String>() + chars.as_str(),
        None => text,
    }
}

/// The most a configuration file lockrun reads whole may hold (a CA
/// bundle of every public root is about 200 KiB).
pub const SMALL_FILE_MAX: u64 = 4 << 20;

/// A file the user named (a certificate, a key, a token), read whole
/// without blocking on it: opened non-blocking, so that a FIFO there is not
/// waited on; refused unless it is a regular file (a FIFO, a device, a
/// directory), and refused past `cap` bytes (`/dev/zero` would fill
/// memory). A link is followed, as the engines' own tools follow it (a CA
/// bundle under /etc/ssl/certs, a mounted secret); the errors read as
/// `cannot read X (REASON)`.
pub fn read_small(path: &std::path::Path, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    if meta.len() > cap {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("larger than {} KiB", cap >> 10),
        ));
    }
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("larger than {} KiB", cap >> 10),
        ));
    }
    Ok(bytes)
}

/// Swaps the names `a` and `b` at once (`renameat2` with
/// `RENAME_EXCHANGE`), or, where the filesystem cannot swap or `b` is
/// missing, renames `a` over `b`: either way `b` then leads to what `a`
/// held, and a reader of `b` never finds it missing or half written. A swap
/// leaves the old file at `a`, to be written over next time, where a rename
/// makes a new inode and frees one at every call.
pub fn swap_names(a: &std::path::Path, b: &std::path::Path) -> std::io::Result<()> {
    swap_names_at(nix::fcntl::AT_FDCWD, a, b)
}

/// [`swap_names`] with `a` and `b` relative to the directory `dir`, so
/// that nothing renamed above it can redirect the swap.
pub fn swap_names_at(
    dir: std::os::fd::BorrowedFd<'_>,
    a: &std::path::Path,
    b: &std::path::Path,
) -> std::io::Result<()> {
    // nix offers the call on glibc only; elsewhere we rename.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::fcntl::{renameat2, RenameFlags};
        if renameat2(dir, a, dir, b, RenameFlags::RENAME_EXCHANGE).is_ok() {
            return Ok(());
        }
    }
    nix::fcntl::renameat(dir, a, dir, b).map_err(std::io::Error::from)
}
