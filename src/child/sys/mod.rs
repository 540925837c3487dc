//! The system calls behind `child/`, and the only `unsafe` code in lockrun.
//!
//! Everything that runs between `fork` and `exec` (the `pre_exec` hooks, and
//! COMMAND's process in `spawn`, which shares the guard's memory) must be
//! async-signal-safe: no allocation, no locks, no `std::io::Error` other
//! than the allocation-free OS variant. Every value such a hook needs is
//! computed before the fork and moved in.
#![allow(unsafe_code)]

pub(super) mod spawn;

use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;

use nix::fcntl::{fcntl, FcntlArg, OFlag};

use super::ChildExit;
use crate::signals::Signal;

/// How far above SIGRTMIN the guard's parent-death signal sits. A real-time
/// signal, because nobody forwards or sends it: USR1 and USR2 are forwarded,
/// so they cannot mean "lockrun is gone". We stay clear of the low real-time
/// signals that systemd (SIGRTMIN+0..+6) gives meanings to.
const DEATH_SIGNAL_ABOVE_RTMIN: i32 = 10;

/// The signal the kernel sends the guard when the thread that spawned it dies.
pub(super) fn death_signal() -> i32 {
    libc::SIGRTMIN() + DEATH_SIGNAL_ABOVE_RTMIN
}

/// The signals the guard must survive: everything lockrun forwards or may use
/// to stop the child, except SIGKILL, which nothing survives.
fn survivable() -> impl Iterator<Item = i32> {
    Signal::ALL
        .into_iter()
        .filter(|sig| *sig != Signal::Kill)
        .map(|sig| sig.number())
}

/// A signal set, built before any fork.
#[derive(Clone, Copy)]
struct SigSet(libc::sigset_t);

impl SigSet {
    fn of(signals: impl IntoIterator<Item = i32>) -> SigSet {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the whole set; sigaddset only
        // reads and writes it. Our numbers are valid signals, so neither fails.
        unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            for sig in signals {
                libc::sigaddset(set.as_mut_ptr(), sig);
            }
            SigSet(set.assume_init())
        }
    }

    fn contains(&self, sig: i32) -> bool {
        // SAFETY: the set is initialised and sigismember only reads it.
        unsafe { libc::sigismember(&self.0, sig) == 1 }
    }
}

/// Changes the calling thread's signal mask (`how` is SIG_BLOCK, SIG_UNBLOCK
/// or SIG_SETMASK). Async-signal-safe, so usable between fork and exec.
fn set_mask(how: libc::c_int, set: &SigSet) {
    // SAFETY: both pointers are valid for the call (the old mask is not
    // wanted); pthread_sigmask is async-signal-safe and cannot fail for a
    // valid `how`.
    unsafe {
        libc::pthread_sigmask(how, &set.0, std::ptr::null_mut());
    }
}

/// The go pipe (see `go`): the read end for the guard, which [`arm_guard`]
/// lets it inherit, and lockrun's write end. Both are close-on-exec, so no
/// other child of lockrun's (nor, through it, COMMAND) ever holds either; the
/// write end is non-blocking, so sending the go message cannot hang lockrun.
///
/// A guard that will be lent a descriptor gets a Unix socket instead, which
/// can carry it beside the go message (`SCM_RIGHTS`). Only then: a socket
/// charges each small write its own buffer, so it holds far fewer of the
/// deadlines that follow (see `job`) than a pipe, and an engine that lends
/// a descriptor renews nothing, so sends none.
pub(super) fn go_pipe(lends: bool) -> io::Result<(OwnedFd, File)> {
    let (read, write) = if lends {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?
    } else {
        nix::unistd::pipe2(OFlag::O_CLOEXEC)?
    };
    fcntl(&write, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok((read, File::from(write)))
}

/// The end channel (see `guard`): lockrun's end, non-blocking, and the
/// guard's, on which a guard whose COMMAND's whole tree is gone says so,
/// with the status it will exit with, before its exit: lockrun may let go
/// of the lock then rather than after the guard's own teardown and the
/// SIGCHLD that follows it. A word on it lets the lock go, so only the
/// guard may write it:
/// - a Unix socket pair, not a pipe: a pipe can be opened anew through
///   `/proc/PID/fd/N` by any process of the same user allowed to read that
///   directory, COMMAND included (attack review: a COMMAND that wrote the
///   two bytes so had the lock let go while it ran on), and a socket
///   cannot (ENXIO);
/// - both ends close-on-exec: the guard's is inherited across its own exec
///   only, and marked again before COMMAND exists.
pub(super) fn end_channel() -> io::Result<(File, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    fcntl(&ours, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok((File::from(ours), theirs))
}

/// Writes `message` on the go channel in one call, with `lent` attached if
/// given (the channel is then a socket, see [`go_pipe`]).
pub(super) fn send_go(go: &File, message: &[u8], lent: Option<&OwnedFd>) -> io::Result<usize> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let Some(lent) = lent else {
        let mut go = go;
        return go.write(message);
    };
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds = [lent.as_raw_fd()];
    let iov = [io::IoSlice::new(message)];
    let sent = sendmsg::<()>(
        go.as_raw_fd(),
        &iov,
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    Ok(sent)
}

/// In the guard: reads the start of the go message into `buf`, with the
/// descriptor lent beside it, if any (close-on-exec, so COMMAND never holds
/// it). On a pipe, a plain read. Returns how many bytes were read.
pub(super) fn receive_go(go: &File, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let mut iov = [io::IoSliceMut::new(buf)];
    let received = loop {
        match recvmsg::<()>(
            go.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::ENOTSOCK) => {
                let mut go = go;
                return Ok((go.read(buf)?, None));
            }
            other => break other?,
        }
    };
    // A descriptor the kernel could not install (our table full) is dropped
    // and flagged: a guard that was to keep the lock must not run without it.
    if received.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(io::Error::other("the descriptor lent with the go was lost"));
    }
    let mut lent = None;
    for message in received.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = message {
            for fd in fds {
                // SAFETY: the kernel just installed `fd` in our table for
                // us alone; owning it closes any we do not keep.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                lent.get_or_insert(fd);
            }
        }
    }
    Ok((received.bytes, lent))
}

/// Prepares lockrun's side of the guard's spawn.
///
/// In the guard, before it executes:
/// 1. block the survivable signals, so a signal sent to the group before the
///    guard's handlers exist stays pending instead of killing it (the guard
///    relays what is pending to COMMAND once COMMAND exists);
/// 2. let the guard keep `keep`, the read end of the go pipe and its end of
///    the end channel, across `exec` (lockrun's copies stay close-on-exec;
///    the guard marks them so again before COMMAND exists);
/// 3. arm PR_SET_PDEATHSIG, then check the parent is still the lockrun that
///    spawned us: if it died before the prctl, no signal would ever come,
///    so we refuse to run at all.
///
/// The guard does not take the terminal's foreground here: a parked guard
/// must leave it to lockrun, so that Ctrl-C while waiting for the lock
/// reaches lockrun. lockrun hands it over before it sends the go message.
pub(super) fn arm_guard(cmd: &mut std::process::Command, keep: [RawFd; 2]) {
    let parent = std::process::id() as libc::pid_t;
    let death = death_signal();
    let blocked = SigSet::of(survivable());
    let hook = move || -> io::Result<()> {
        set_mask(libc::SIG_SETMASK, &blocked);
        for fd in keep {
            // SAFETY: fcntl(F_SETFD) on a descriptor number only changes
            // that descriptor's flags in this (the child's) table; it is
            // async-signal-safe. Clearing FD_CLOEXEC is all we ask of it.
            unsafe {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        arm_parent_death(death, parent)
    };
    // SAFETY: the hook only makes async-signal-safe calls, allocates
    // nothing, and owns copies of everything it uses.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Between fork and exec: arms the parent-death signal `signal`, then
/// checks that `parent` is still our parent. Had it died before the prctl,
/// no signal would ever come, so the caller must not go on (ESRCH).
/// Async-signal-safe, and its errors are the allocation-free OS kind.
fn arm_parent_death(signal: libc::c_int, parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no
    // memory of ours; getppid cannot fail. Both are async-signal-safe.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) == -1 {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// Rewrites this process's command line (`/proc/PID/cmdline`, what `ps
/// -f`, `pgrep -f` and `pkill -f` read) to `title`, padded with NULs over
/// the rest of the original arguments. The guard calls it first thing: a
/// guard forked without exec has lockrun's whole command line, an exec'd
/// one `/proc/self/exe __guard -- COMMAND...`, and either would be matched
/// by `pkill -f lockrun`, which then kills the one process that stops the
/// tree when lockrun dies. The arguments' bounds come from
/// `/proc/self/stat` (fields 48 and 49), as `setproctitle` finds them; the
/// region is this process's own (copied on write after a fork), and
/// nothing reads the old words afterwards: lockrun and the guard own
/// copies of every argument before this runs. Returns whether it was done.
pub(super) fn set_command_line(title: &[u8]) -> bool {
    let Some((start, end)) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| argument_bounds(&stat))
    else {
        return false;
    };
    let len = end - start;
    if len == 0 {
        return false;
    }
    let keep = title.len().min(len - 1);
    // SAFETY: [start, end) is this process's argument area, mapped
    // read-write on its stack by the kernel at exec and never unmapped; the
    // writes stay within it and end with a NUL, so the area still holds
    // NUL-terminated strings for anything (std's `args`) that walks it.
    unsafe {
        let area = start as *mut u8;
        std::ptr::copy_nonoverlapping(title.as_ptr(), area, keep);
        std::ptr::write_bytes(area.add(keep), 0, len - keep);
    }
    true
}

/// `arg_start` and `arg_end` from a `/proc/PID/stat` line: the 48th and
/// 49th fields, counted from the pid, after the parenthesised name (which
/// may itself contain spaces and parentheses).
fn argument_bounds(stat: &str) -> Option<(usize, usize)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state): field N is rest's (N - 3)th word.
    let mut words = rest.split_ascii_whitespace().skip(48 - 3);
    let start: usize = words.next()?.parse().ok()?;
    let end: usize = words.next()?.parse().ok()?;
    (start != 0 && end > start).then_some((start, end))
}

/// Whether this process runs a single thread, from /proc; `false` when we
/// cannot tell. Only then may lockrun fork a guard without exec'ing it
/// ([`fork_guard`]): the child of a fork holds any lock another thread held
/// at that moment, and would wait for it for ever.
pub(super) fn single_threaded() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .is_some_and(|count| count.trim() == "1")
}

/// Forks the guard without exec'ing it: the child sets itself up as
/// [`arm_guard`]'s hook sets up an exec'd guard, lets go of every
/// descriptor an exec would have closed but `keep` (the go pipe's read
/// end and the guard's end of the end channel), runs `guard`, and exits
/// with its status. Returns the child's pid, the leader of its own new
/// process group, in lockrun.
///
/// lockrun must be single-threaded ([`single_threaded`]), so that the child
/// may allocate and take locks; and the calling thread must be the one that
/// lives as long as lockrun, as for [`arm_guard`].
pub(super) fn fork_guard(keep: [RawFd; 2], guard: impl FnOnce() -> u8) -> io::Result<u32> {
    let parent = std::process::id() as libc::pid_t;
    let death = death_signal();
    let blocked = SigSet::of(survivable());
    give_back_free_heap();
    // SAFETY: lockrun has one thread (the caller checked), so the child is a
    // whole copy of it, every lock free; it runs ordinary code and leaves
    // only by `_exit`, never returning into lockrun's frames.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            set_mask(libc::SIG_SETMASK, &blocked);
            // SAFETY: setpgid takes plain values.
            let armed =
                unsafe { libc::setpgid(0, 0) == 0 } && arm_parent_death(death, parent).is_ok();
            let status = if armed && close_what_exec_would(keep).is_ok() {
                guard()
            } else {
                crate::exit::GUARD_FAILED
            };
            // SAFETY: _exit ends the process at once: no destructor, atexit
            // handler or stdio flush of lockrun's runs twice.
            unsafe { libc::_exit(i32::from(status)) }
        }
        pid => {
            // The child does the same; whichever runs first makes the group,
            // so it exists before lockrun may signal it.
            // SAFETY: setpgid takes plain values. The child, not exec'd,
            // may always be moved; a failure means it has done it itself.
            unsafe {
                libc::setpgid(pid, pid);
            }
            Ok(pid as u32)
        }
    }
}

/// Hands the heap's free pages back to the kernel before a fork copies
/// them. lockrun and its guard live as long as the job, so what start-up
/// leaves is paid for the whole run, twice: parsing the command line builds
/// clap's whole definition and frees it, and glibc keeps freed pages below
/// the top of the heap (560 KiB with 164 KiB in use at this point). Giving
/// them back saves about 0.2 MiB of each process's own memory (`cargo bench
/// --bench lockrun -- memory`); a page the heap grows into again costs a
/// fault and comes back zeroed, nothing else.
#[cfg(target_env = "gnu")]
fn give_back_free_heap() {
    // SAFETY: malloc_trim takes each arena's lock and touches only the
    // allocator's own free chunks, which no Rust object owns; we are the
    // only thread. Whether anything was released is of no use to us.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other C libraries have no such call; their heaps stay as they are.
#[cfg(not(target_env = "gnu"))]
fn give_back_free_heap() {}

/// Once per process: takes the read-only pages of the program and of its
/// libraries (their code and constants) out of this process's page tables,
/// once what only start-up needed has run: the resident set then counts
/// only the code touched from here on (issue 46).
///
/// Start-up touches code all over the program (the command line's parser
/// and help, the runtime's and the engine's set-up), and the kernel maps a
/// whole neighbourhood (64 KiB, or the page cache's whole large folio) at
/// each touch, so about two thirds of lockrun's code stays mapped for the
/// job's whole life, in lockrun and again in its guard, for nothing. The
/// pages stay in the page cache; what is touched again comes back with a
/// minor fault, and only what a hold runs does.
///
/// Safe because only segments that are not writable are dropped, whole
/// pages inside them, of objects loaded from files (the vDSO is left
/// alone): their pages are never written, so each is the file's page, and
/// `MADV_DONTNEED` on a private file mapping brings back exactly that, as
/// the kernel's own reclaim of a mapped page would. Writable segments (data,
/// and the data made read-only after relocation) are never touched:
/// dropping them would lose what was written. A failure changes nothing.
pub(super) fn forget_startup_pages_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(forget_startup_pages);
}

/// In a guard forked from lockrun (not exec'd: its pages are its own
/// already), parked: makes the pages of the heap and
/// the stack that it shares with lockrun its own now, while it waits,
/// rather than one copy-on-write fault at a time after the grant, on the
/// handover's path (`perf`: a dozen of the faults between an armed guard's
/// grant and its `clone3`). Only the pages present are copied, found with
/// `mincore`: the holes `malloc_trim` left stay holes, so the resident set
/// is what it would be after the grant. Best effort: a kernel without
/// `MADV_POPULATE_WRITE` (before 5.14) leaves the faults where they were.
pub(super) fn own_shared_pages() {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    // SAFETY: sysconf takes a plain value.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        size if size > 0 => size as usize,
        _ => return,
    };
    for line in maps.lines() {
        if !(line.ends_with("[heap]") || line.ends_with("[stack]")) {
            continue;
        }
        let Some((start, end)) = line
            .split_whitespace()
            .next()
            .and_then(|range| range.split_once('-'))
            .and_then(|(a, b)| {
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            })
        else {
            continue;
        };
        let pages = (end.saturating_sub(start)) / page;
        let mut present = vec![0u8; pages];
        // SAFETY: the range is one of our mappings, as /proc said a moment
        // ago, and `present` has one byte per page of it.
        if unsafe {
            libc::mincore(
                start as *mut libc::c_void,
                pages * page,
                present.as_mut_ptr(),
            )
        } != 0
        {
            continue;
        }
        let mut i = 0;
        while i < pages {
            if present[i] & 1 == 0 {
                i += 1;
                continue;
            }
            let run = present[i..].iter().take_while(|p| *p & 1 == 1).count();
            // SAFETY: populating pages that are mapped and present writes
            // nothing to them: each is copied as a write to it would copy
            // it, with its contents.
            unsafe {
                libc::madvise(
                    (start + i * page) as *mut libc::c_void,
                    run * page,
                    libc::MADV_POPULATE_WRITE,
                );
            }
            i += run;
        }
    }
}

/// As [`forget_startup_pages_once`], every time it is called.
pub(super) fn forget_startup_pages() {
    /// The loader's callback, once per loaded object, the program first.
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        first: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `first` is the flag `forget_startup_pages` passes, alive
        // for the whole walk, which runs on this thread.
        let first = unsafe { &mut *first.cast::<bool>() };
        let program = std::mem::replace(first, false);
        // SAFETY: the loader passes a record valid for this call, whose
        // name is a C string or null and whose program headers are
        // `dlpi_phnum` entries at `dlpi_phdr`.
        let info = unsafe { &*info };
        let from_file = program
            || (!info.dlpi_name.is_null() && unsafe { *info.dlpi_name } == b'/' as libc::c_char);
        if !from_file || info.dlpi_phdr.is_null() {
            return 0;
        }
        let headers =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        // SAFETY: sysconf takes a plain value.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            size if size > 0 => size as usize,
            _ => return 1,
        };
        for header in headers {
            if header.p_type != libc::PT_LOAD || header.p_flags & libc::PF_W != 0 {
                continue;
            }
            let from = info.dlpi_addr as usize + header.p_vaddr as usize;
            // Whole pages of the segment only: a page it shares with a
            // writable neighbour is kept.
            let start = from.next_multiple_of(page);
            let end = (from + header.p_memsz as usize) / page * page;
            if end > start {
                // SAFETY: the range lies inside a read-only segment mapped
                // from a file, whose pages are never written; dropping them
                // only makes the next touch fault the file's page back in.
                unsafe {
                    libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
                }
            }
        }
        0
    }
    let mut first = true;
    // SAFETY: dl_iterate_phdr calls `each` with the loader's records, under
    // its lock; `each` only reads them, and `first` outlives the walk.
    unsafe {
        libc::dl_iterate_phdr(Some(each), (&raw mut first).cast());
    }
}

/// In a guard forked without exec: closes every descriptor marked
/// close-on-exec but `keep`, so that the guard holds what an exec'd guard
/// would (lockrun's runtime and connections stay lockrun's alone).
fn close_what_exec_would(keep: [RawFd; 2]) -> io::Result<()> {
    let open: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open {
        if keep.contains(&fd) {
            continue;
        }
        // SAFETY: F_GETFD only reads flags, and closing a descriptor of
        // lockrun's copy is what we are here for: nothing in the guard uses
        // any of them. The listing's own descriptor is gone (EBADF).
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags != -1 && flags & libc::FD_CLOEXEC != 0 {
                libc::close(fd);
            }
        }
    }
    Ok(())
}

/// In the guard: takes ownership of descriptor `fd` (the go pipe's read
/// end), which lockrun let us inherit. Fails if no such
/// descriptor is open.
pub(super) fn take_inherited(fd: RawFd) -> io::Result<File> {
    // SAFETY: fcntl(F_GETFD) only reads the descriptor's flags.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is open (checked above), and lockrun handed it to us for
    // this use alone: nothing else in the guard refers to it, so the `File`
    // may own it and close it.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// In the guard: the signals its poll loop takes on a signalfd: SIGCHLD, and
/// the parent-death signal if `orderly` (a real-time signal, which nix's
/// `Signal` cannot name).
pub(super) fn guard_watched_signals(orderly: bool) -> nix::sys::signal::SigSet {
    let mut signals = vec![libc::SIGCHLD];
    if orderly {
        signals.push(death_signal());
    }
    let set = SigSet::of(signals);
    // SAFETY: `SigSet::of` initialised the set with sigemptyset/sigaddset.
    unsafe { nix::sys::signal::SigSet::from_sigset_t_unchecked(set.0) }
}

/// Makes `fd` close-on-exec: in the guard, the go pipe it inherited, so
/// that COMMAND does not. (A lent descriptor arrives close-on-exec.)
pub(super) fn close_on_exec(fd: impl std::os::fd::AsFd) -> io::Result<()> {
    fcntl(fd, FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
    Ok(())
}

/// The signals the guard survives, as a set: until COMMAND execs, they meet
/// a no-op handler there (see `spawn`), and the guard relays them.
pub(super) fn survivable_set() -> libc::sigset_t {
    SigSet::of(survivable()).0
}

/// The signals the guard has survived, one bit per number: the guard's
/// deadline ladder skips a kill signal lockrun has already sent the group.
static SURVIVED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The signals the guard has survived and not yet relayed to the processes
/// of COMMAND's tree outside its group.
static RELAY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn survive(sig: libc::c_int) {
    // A lock-free atomic store is async-signal-safe.
    if (1..64).contains(&sig) {
        SURVIVED.fetch_or(1 << sig, std::sync::atomic::Ordering::Relaxed);
        RELAY.fetch_or(1 << sig, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Has the running guard `pid` kill COMMAND's whole tree and exit: its
/// parent-death signal, which nobody else sends, and SIGCONT in case the job
/// is stopped.
pub(super) fn ask_guard_to_end(pid: u32) {
    // SAFETY: kill takes plain values; ESRCH (the guard already gone) is fine.
    unsafe {
        libc::kill(pid as libc::pid_t, death_signal());
        libc::kill(pid as libc::pid_t, libc::SIGCONT);
    }
}

/// In the guard: the signals survived since the last call, to relay.
pub(super) fn guard_take_relayed() -> Vec<i32> {
    let bits = RELAY.swap(0, std::sync::atomic::Ordering::Relaxed);
    (1..64).filter(|sig| bits & (1 << sig) != 0).collect()
}

/// `/proc/PID/stat`, read in one read(2) into a buffer the line fits in
/// (the name is at most 64 bytes, the 50 numbers at most 21 characters
/// each): the walks of /proc below read one per process, and the guard's
/// check for stale job cgroups one per job on each grant, on the
/// handover's path, where `read_to_string` took five reads and a statx.
/// `None` when the process is gone (or the line is not text).
pub(super) fn proc_stat(pid: u32) -> Option<String> {
    use std::io::Read;
    let mut file = File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut buf = [0u8; 1600];
    let len = loop {
        match file.read(&mut buf) {
            Ok(len) => break len,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    };
    String::from_utf8(buf[..len].to_vec()).ok()
}

/// The live processes of the tree below `root` (a subreaper, so every
/// descendant's parent chain leads to it), plus the live members of group
/// `pgid`, `root` itself excepted, from /proc.
pub(super) fn live_tree(root: u32, pgid: u32) -> io::Result<Vec<u32>> {
    let mut table = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(stat) = proc_stat(pid) else {
            continue;
        };
        if let Some((state, ppid, pgrp)) = parse_stat_parent(&stat) {
            table.push((pid, state, ppid, pgrp));
        }
    }
    let parent: std::collections::HashMap<u32, u32> = table
        .iter()
        .map(|(pid, _, ppid, _)| (*pid, *ppid))
        .collect();
    let below = |mut pid: u32| {
        // Bounded: a parent chain has no cycles, but a table read while
        // processes come and go might.
        for _ in 0..table.len() {
            match parent.get(&pid) {
                Some(&up) if up == root => return true,
                Some(&up) if up > 1 => pid = up,
                _ => return false,
            }
        }
        false
    };
    Ok(table
        .iter()
        .filter(|(pid, state, _, pgrp)| {
            *pid != root && !matches!(state, 'Z' | 'X' | 'x') && (*pgrp == pgid || below(*pid))
        })
        .map(|(pid, ..)| *pid)
        .collect())
}

/// The children of `parent`, zombies included, from a walk of /proc.
pub(super) fn children_by_walk(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            proc_stat(*pid)
                .and_then(|stat| parse_stat_parent(&stat))
                .is_some_and(|(_, ppid, _)| ppid == parent)
        })
        .collect()
}

/// The process group of `pid`, from /proc, if it is alive.
pub(super) fn process_group_of(pid: u32) -> Option<u32> {
    let stat = proc_stat(pid)?;
    parse_stat_parent(&stat).map(|(_, _, pgrp)| pgrp)
}

/// State, parent and process group from a /proc/PID/stat line.
fn parse_stat_parent(stat: &str) -> Option<(char, u32, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// How far above SIGRTMIN the signal sits that asks an armed guard (see
/// `go`) to stop waiting for its lock: real-time and never forwarded, as the
/// death signal is. Its handler interrupts the guard's blocking `flock`.
const DISARM_SIGNAL_ABOVE_RTMIN: i32 = 11;

/// The signal lockrun sends an armed guard to take back its wait.
pub(super) fn disarm_signal() -> i32 {
    libc::SIGRTMIN() + DISARM_SIGNAL_ABOVE_RTMIN
}

/// Set by the disarm signal's handler, read by [`guard_wait_lock`].
static DISARMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_disarm(_: libc::c_int) {
    DISARMED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// In the guard: waits for an exclusive `flock` on `fd`, as `flock(1)`
/// does. `Ok(true)` once granted; `Ok(false)` when lockrun took the wait
/// back (the disarm signal, which lockrun repeats until it has our answer,
/// since one that lands between our look at the flag and the `flock` call
/// cannot interrupt it).
pub(super) fn guard_wait_lock(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering;
    let disarm = SigSet::of([disarm_signal()]);
    // Blocked outside a wait (see `guard_install_handlers`): one still
    // pending from an earlier wait is not about this one. Should it be
    // about this one after all, lockrun sends it again.
    loop {
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: the set is initialised; a null siginfo is allowed.
        let got = unsafe { libc::sigtimedwait(&disarm.0, std::ptr::null_mut(), &zero) };
        if got == -1 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    DISARMED.store(false, Ordering::SeqCst);
    set_mask(libc::SIG_UNBLOCK, &disarm);
    let granted = loop {
        if DISARMED.swap(false, Ordering::SeqCst) {
            break Ok(false);
        }
        // SAFETY: flock only reads the descriptor number, which `fd`
        // guarantees is open for the call.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } == 0 {
            break Ok(true);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            break Err(e);
        }
    };
    // A late one must not interrupt what follows (the spawn, our poll).
    set_mask(libc::SIG_BLOCK, &disarm);
    granted
}

/// lockrun's end of the end channel, registered with the reactor; `None`
/// if it cannot be, and the guard's exit is then the only word of its end.
pub(super) fn register_end(end: File) -> Option<tokio::io::unix::AsyncFd<File>> {
    // SAFETY: the `File` owns its descriptor, which nothing else can
    // reach, so it stays the same open descriptor for as long as the
    // `AsyncFd` holds it.
    unsafe { tokio::io::unix::AsyncFd::register(end) }.ok()
}

/// lockrun's end of an armed guard's channel, for its answer, registered
/// with the reactor through a duplicate of its own.
pub(super) fn register_channel(go: &File) -> io::Result<tokio::io::unix::AsyncFd<File>> {
    // SAFETY: the `File` owns its duplicate of the channel, which nothing
    // else can reach, so it stays the same open descriptor for as long as
    // the `AsyncFd` holds it.
    unsafe { tokio::io::unix::AsyncFd::register(go.try_clone()?) }.map_err(io::Error::from)
}

/// Asks armed guard `pid` to stop waiting for its lock.
pub(super) fn ask_guard_to_disarm(pid: u32) {
    // SAFETY: kill takes plain values; the guard is ours and unreaped.
    unsafe {
        libc::kill(pid as libc::pid_t, disarm_signal());
    }
}

/// In the guard: forgets the signals survived so far, when a new deadline
/// arrives, so that only a kill signal sent since counts as lockrun's.
pub(super) fn guard_forget_survived() {
    SURVIVED.store(0, std::sync::atomic::Ordering::Relaxed);
}

/// In the guard: whether signal `sig` has reached us since we started, or
/// since [`guard_forget_survived`].
pub(super) fn guard_survived(sig: i32) -> bool {
    (1..64).contains(&sig) && SURVIVED.load(std::sync::atomic::Ordering::Relaxed) & (1 << sig) != 0
}

extern "C" fn on_parent_death(_: libc::c_int) {
    // SAFETY: kill is async-signal-safe. Pid 0 is our own process group,
    // ourselves included: lockrun is gone, so nobody else will stop COMMAND
    // and its descendants.
    unsafe {
        libc::kill(0, libc::SIGKILL);
    }
}

fn install(sig: i32, handler: extern "C" fn(libc::c_int)) {
    install_with(sig, handler, libc::SA_RESTART);
}

fn install_with(sig: i32, handler: extern "C" fn(libc::c_int), flags: libc::c_int) {
    // SAFETY: the sigaction struct is fully initialised (zeroed, then an
    // empty mask and a handler that is a plain `extern "C" fn` doing only
    // async-signal-safe work). SA_RESTART keeps the guard's waitpid going.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as usize;
        action.sa_flags = flags;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(sig, &action, std::ptr::null_mut());
    }
}

/// In the guard: handlers, never SIG_IGN (COMMAND would inherit an ignored
/// disposition, whereas exec resets handlers to the default).
pub(super) fn guard_install_handlers() {
    for sig in survivable() {
        install(sig, survive);
    }
    install(death_signal(), on_parent_death);
    // Blocked but while an armed guard waits (`guard_wait_lock`), and
    // without SA_RESTART: it is to interrupt a blocking `flock`.
    install_with(disarm_signal(), on_disarm, 0);
    set_mask(libc::SIG_BLOCK, &SigSet::of([disarm_signal()]));
}

/// In the guard, once COMMAND exists: signals sent to the group while COMMAND
/// did not exist yet are pending on the guard; hand them to COMMAND, then let
/// the guard's own handlers swallow them. A signal sent in the microseconds
/// between COMMAND's fork and this call reaches COMMAND twice, which we prefer
/// to losing a stop request.
pub(super) fn guard_relay_pending_and_unblock(command_pid: u32) {
    let mut pending = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigpending initialises the set it is given.
    let pending = unsafe {
        libc::sigemptyset(pending.as_mut_ptr());
        libc::sigpending(pending.as_mut_ptr());
        SigSet(pending.assume_init())
    };
    for sig in survivable().filter(|sig| pending.contains(*sig)) {
        // SAFETY: kill takes plain values; ESRCH (COMMAND already gone) is fine.
        unsafe {
            libc::kill(command_pid as libc::pid_t, sig);
        }
    }
    set_mask(libc::SIG_UNBLOCK, &SigSet::of(survivable()));
}

/// Sends `sig` to every process in group `pgid`. A group that no longer
/// exists is not an error.
pub(super) fn kill_group(pgid: u32, sig: i32) -> io::Result<()> {
    // SAFETY: kill takes plain values. The caller guarantees the group is
    // ours: its leader (the guard) is not reaped yet, so the id is pinned.
    let rc = unsafe { libc::kill(-(pgid as libc::pid_t), sig) };
    if rc == -1 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            return Err(err);
        }
    }
    Ok(())
}

/// Whether process group `pgid` has any member at all, zombies included.
/// Unlike [`kill_group`], callable once the leader is reaped: a group that
/// still has members keeps its id, so the answer is about our group.
pub(super) fn group_exists(pgid: u32) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only checks existence.
    let rc = unsafe { libc::kill(-(pgid as libc::pid_t), 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// waitid on one pid for its exit: with `WNOHANG` and perhaps `WNOWAIT`
/// among `flags`, or blocking without them.
fn waitid(pid: u32, flags: libc::c_int) -> io::Result<Option<ChildExit>> {
    let flags = libc::WEXITED | flags;
    loop {
        // SAFETY: a zeroed siginfo_t is valid (and is what tells "nothing
        // yet" apart, as si_pid stays 0); waitid writes only into it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) };
        if rc == -1 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        // SAFETY: waitid succeeded, so the SIGCHLD fields are the valid ones.
        let (child, status) = unsafe { (info.si_pid(), info.si_status()) };
        if child == 0 {
            return Ok(None);
        }
        return Ok(match info.si_code {
            libc::CLD_EXITED => Some(ChildExit::Code(status)),
            // A guard that met our request to end (`ask_guard_to_end`)
            // before it could handle it was killed as SIGKILL would have.
            libc::CLD_KILLED if status == death_signal() => Some(ChildExit::Signal(libc::SIGKILL)),
            libc::CLD_KILLED | libc::CLD_DUMPED => Some(ChildExit::Signal(status)),
            // Only WEXITED was asked for; anything else is not an exit.
            _ => None,
        });
    }
}

/// How the child exited, if it has, leaving it a zombie: until it is reaped
/// its pid, and so our process group id, cannot be reused.
pub(super) fn peek_exit(pid: u32) -> io::Result<Option<ChildExit>> {
    waitid(pid, libc::WNOHANG | libc::WNOWAIT)
}

/// Whether the child has stopped since we last asked, and by which signal.
/// Takes the stop's report, never its exit's, and never blocks.
pub(super) fn take_stop(pid: u32) -> Option<i32> {
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG;
    match waitid(Id::Pid(nix::unistd::Pid::from_raw(pid as i32)), flags) {
        Ok(WaitStatus::Stopped(_, signal)) => Some(signal as i32),
        _ => None,
    }
}

/// Reaps the child if it has exited, never blocking; tells how it exited.
pub(super) fn try_reap(pid: u32) -> io::Result<Option<ChildExit>> {
    waitid(pid, libc::WNOHANG)
}

/// Reaps a child that `peek_exit` saw exit.
pub(super) fn reap(pid: u32) -> io::Result<()> {
    try_reap(pid).map(drop)
}

/// Waits for the child to exit, however long it takes, and reaps it.
pub(super) fn reap_blocking(pid: u32) -> io::Result<()> {
    waitid(pid, 0).map(drop)
}

/// The live members of process group `pgid`, from /proc.
///
/// `kill(-pgid, 0)` cannot answer this: it succeeds as long as any member is
/// a zombie, and our own guard is one until we reap it, as is any orphaned
/// grandchild whose reaper (init, or a container's pid 1) has not got to it,
/// or never will. Zombies run no code, so we count only the living.
pub(super) fn live_group_members(pgid: u32) -> io::Result<Vec<u32>> {
    Ok(live_group_states(pgid)?
        .into_iter()
        .map(|(pid, _)| pid)
        .collect())
}

/// Whether every live member of process group `pgid` is stopped, from
/// /proc. A stop signal reaches each member when the kernel next runs it,
/// so on a busy host the group stops member by member.
pub(super) fn group_stopped(pgid: u32) -> io::Result<bool> {
    Ok(live_group_states(pgid)?
        .into_iter()
        .all(|(_, state)| matches!(state, 'T' | 't')))
}

/// The live members of process group `pgid` and their states, from /proc.
fn live_group_states(pgid: u32) -> io::Result<Vec<(u32, char)>> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // A process that exits while we look is simply not a member.
        let Some(stat) = proc_stat(pid) else {
            continue;
        };
        if let Some((state, pgrp)) = parse_stat(&stat) {
            if pgrp == pgid && !matches!(state, 'Z' | 'X' | 'x') {
                members.push((pid, state));
            }
        }
    }
    Ok(members)
}

/// State and process group from a /proc/PID/stat line. The command name is
/// in parentheses and may itself contain spaces and parentheses, so we
/// split after the *last* `)`.
fn parse_stat(stat: &str) -> Option<(char, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// The value of extended attribute `name` of `path`, up to 64 bytes; None
/// when it has none, or it cannot be read.
pub(super) fn xattr(path: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let name = std::ffi::CString::new(name).ok()?;
    let mut value = [0u8; 64];
    // SAFETY: both strings are NUL-terminated and outlive the call; the
    // buffer's length is the one given, and getxattr writes no more.
    let len = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    usize::try_from(len).ok().map(|len| value[..len].to_vec())
}

/// Gives the CPU to whatever else is ready on it, if anything.
pub(super) fn yield_now() {
    // SAFETY: sched_yield has no preconditions.
    unsafe {
        libc::sched_yield();
    }
}

/// In the guard: lets go of the `flock` held through `fd`'s open file
/// description, and so through every duplicate of it (lockrun's too).
pub(super) fn unlock(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock only reads the descriptor number, which `fd`
        // guarantees is open for the call.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_UN) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_lines_with_awkward_names() {
        let line = "1234 (a) b (c)) S 1 777 777 0 -1 4194560 97 0 0 0";
        assert_eq!(parse_stat(line), Some(('S', 777)));
        assert_eq!(parse_stat("42 (zombie) Z 1 42 42"), Some(('Z', 42)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn finds_argument_bounds_after_awkward_names() {
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        fields[48 - 3] = "1000".into();
        fields[49 - 3] = "1016".into();
        let line = format!("77 (a) (b ) {}", fields.join(" "));
        assert_eq!(argument_bounds(&line), Some((1000, 1016)));
        assert_eq!(argument_bounds("77 (x) S 1 2"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(argument_bounds(&own).is_some(), "{own}");
    }

    /// The program's own file pages resident in this process, in KiB.
    fn program_pages_kib() -> u64 {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_string_lossy().into_owned();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let (mut ours, mut kib) = (false, 0);
        for line in smaps.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() >= 5 && !words[0].ends_with(':') {
                // Read-only mappings only: the written data is not dropped.
                ours = words.get(5) == Some(&exe.as_str()) && !words[1].contains('w');
            } else if let (true, Some(rss)) = (ours, line.strip_prefix("Rss:")) {
                kib += rss
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap();
            }
        }
        kib
    }

    #[test]
    fn forgotten_startup_pages_leave_the_program_working() {
        let before = program_pages_kib();
        forget_startup_pages();
        // Reading smaps and counting runs code, which comes back: less
        // than before all the same (a test binary maps megabytes of code).
        let after = program_pages_kib();
        assert!(
            after < before,
            "{after} KiB of the program's pages mapped, {before} before"
        );
        // Code and constants are the file's, as before.
        assert_eq!(
            format!("{:?}", parse_stat("42 (zombie) Z 1 42 42")),
            "Some(('Z', 42))"
        );
    }

    #[test]
    fn death_signal_is_real_time_and_never_forwarded() {
        let death = death_signal();
        assert!(death > libc::SIGRTMIN() && death <= libc::SIGRTMAX());
        assert!(Signal::ALL.iter().all(|s| s.number() != death));
    }

    #[test]
    fn finds_own_group_alive() {
        let own = nix::unistd::getpgrp().as_raw() as u32;
        let members = live_group_members(own).unwrap();
        assert!(members.contains(&std::process::id()), "{members:?}");
    }
}
