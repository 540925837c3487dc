//! How the guard starts COMMAND: `clone(CLONE_VM | CLONE_VFORK)`, as
//! `posix_spawn` does, rather than `fork`.
//!
//! The new process borrows the guard's memory until it execs, so nothing of
//! the guard's address space is copied on the handover's path, and the guard
//! sleeps meanwhile, leaving its CPU to COMMAND. `posix_spawn` itself will
//! not do: COMMAND must set its parent-death signal (killed with the guard,
//! even outside the guard's group), which only the process itself can.
//! In cgroup mode the same start is made with clone3, into the job's
//! cgroup, so that nobody moves between cgroups (see
//! [`Prepared::spawn_into`]).
//!
//! Sharing memory constrains what runs before the exec: no allocation, no
//! locks, only async-signal-safe calls on what the guard prepared. Every
//! signal stays blocked until none of the guard's handlers is left, so none
//! ever runs on the guard's memory from the new process.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};

/// The stack COMMAND's process runs on until it execs: the few calls below
/// need far less.
const STACK_SIZE: usize = 64 * 1024;

/// Where `execvp` looks when PATH is unset.
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// The stack COMMAND's process runs on until it execs, mapped for the
/// start and unmapped after it. A mapping of its own rather than a zeroed
/// buffer: the kernel gives the new process a zero page for each page it
/// touches, the few at the top, where a zeroed buffer from the heap had
/// every one of its 16 pages faulted in and cleared on the handover's path
/// before the start (`perf`: 15 of the 45 page faults between an armed
/// guard's grant and its `clone3`).
struct Stack {
    base: *mut libc::c_void,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choosing touches no memory of ours.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                STACK_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Stack { base })
    }

    /// The address just past the mapping, where the stack starts.
    fn top(&self) -> usize {
        self.base as usize + STACK_SIZE
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: `base` is our mapping of STACK_SIZE bytes, which nothing
        // uses once the new process has exec'd or exited (CLONE_VFORK).
        unsafe {
            libc::munmap(self.base, STACK_SIZE);
        }
    }
}

/// COMMAND once started: its pid until it is reaped.
pub(in crate::child) struct Spawned {
    pid: libc::pid_t,
    status: Option<ExitStatus>,
}

impl Spawned {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.wait_with(libc::WNOHANG)
    }

    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.wait_with(0)? {
                return Ok(status);
            }
        }
    }

    fn wait_with(&mut self, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        let mut raw = 0;
        loop {
            // SAFETY: waitpid writes the status it is given.
            match unsafe { libc::waitpid(self.pid, &mut raw, flags) } {
                0 => return Ok(None),
                -1 => {
                    let err = io::Error::last_os_error();
                    if err.kind() != io::ErrorKind::Interrupted {
                        return Err(err);
                    }
                }
                _ => {
                    let status = ExitStatus::from_raw(raw);
                    self.status = Some(status);
                    return Ok(Some(status));
                }
            }
        }
    }
}

/// What the new process is to exec, all prepared by the guard.
struct Exec {
    /// The paths to try in turn, as `execvp` would search them.
    candidates: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// The signals the guard survives (see `run`).
    survivable: libc::sigset_t,
    /// The guard's pid: the new process checks it is still its parent once
    /// its parent-death signal is armed.
    parent: libc::pid_t,
    /// Why the exec failed, written by the new process before it exits.
    errno: AtomicI32,
}

/// COMMAND, ready to start: its exec prepared, nothing started yet.
pub(in crate::child) struct Prepared {
    exec: Exec,
    // What `exec`'s pointers point into.
    _args: Vec<CString>,
    _vars: Vec<CString>,
}

/// Prepares `argv` to run with exactly `env` as its environment, searching
/// PATH (as it is in `env`) for a program named without a slash.
pub(in crate::child) fn prepare(
    argv: &[OsString],
    env: &[(OsString, OsString)],
) -> io::Result<Prepared> {
    let c = |s: &OsStr| {
        CString::new(s.as_bytes()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a NUL byte in the command or its environment",
            )
        })
    };
    let program = argv
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command to run"))?;
    let args: Vec<CString> = argv.iter().map(|a| c(a)).collect::<io::Result<_>>()?;
    let vars: Vec<CString> = env
        .iter()
        .map(|(key, value)| {
            let mut pair = key.clone().into_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            c(OsStr::from_bytes(&pair))
        })
        .collect::<io::Result<_>>()?;
    let path = env.iter().find(|(key, _)| key == "PATH").map(|(_, v)| v);
    let candidates = candidates(program, path.map(|p| p.as_bytes()))
        .iter()
        .map(|p| c(p))
        .collect::<io::Result<Vec<_>>>()?;
    let nul_terminated = |strings: &[CString]| {
        strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(ptr::null()))
            .collect::<Vec<_>>()
    };
    // The pointers point into the strings' heap buffers, which stay where
    // they are when the vectors move into `Prepared`.
    let exec = Exec {
        candidates,
        argv: nul_terminated(&args),
        envp: nul_terminated(&vars),
        survivable: super::survivable_set(),
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        errno: AtomicI32::new(0),
    };
    Ok(Prepared {
        exec,
        _args: args,
        _vars: vars,
    })
}

impl Prepared {
    /// Starts COMMAND where we are, in our own cgroup.
    pub fn spawn(&self) -> io::Result<Spawned> {
        self.start(None)
            .unwrap_or_else(|_| unreachable!("clone does not refuse a cgroup it is not given"))
    }

    /// Starts COMMAND straight into the cgroup open as `cgroup`
    /// (`clone3(CLONE_INTO_CGROUP)`), so that neither we nor it ever move
    /// between cgroups: a move waits for an RCU grace period in the kernel
    /// (5–12 ms here), a start into a cgroup does not. `Err` when the kernel
    /// refuses that way of starting (before Linux 5.7, or a seccomp filter
    /// that hides clone3), with nothing started: the caller moves itself
    /// instead and calls [`Prepared::spawn`].
    pub fn spawn_into(&self, cgroup: BorrowedFd<'_>) -> Result<io::Result<Spawned>, io::Error> {
        self.start(Some(cgroup))
    }

    fn start(&self, cgroup: Option<BorrowedFd<'_>>) -> Result<io::Result<Spawned>, io::Error> {
        let exec = &self.exec;
        exec.errno.store(0, Ordering::Relaxed);
        let stack = match Stack::new() {
            Ok(stack) => stack,
            Err(err) => return Ok(Err(err)),
        };
        // The stack grows down, from its 16-byte aligned top.
        let top = stack.top() & !15;

        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: the sets are initialised by sigfillset and pthread_sigmask
        // before use; clone gets a stack that outlives the new process's use
        // of it (CLONE_VFORK: we resume only once it has exec'd or exited)
        // and an argument that lives as long; `run` keeps to what that
        // sharing allows.
        let started = unsafe {
            libc::sigfillset(all.as_mut_ptr());
            libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr());
            let pid = match cgroup {
                None => libc::clone(
                    run,
                    top as *mut libc::c_void,
                    libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                    (exec as *const Exec).cast_mut().cast(),
                ),
                Some(fd) => clone3_into(fd, top, exec),
            };
            let err = io::Error::last_os_error();
            if pid != -1 {
                pass_on_stops(pid);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), ptr::null_mut());
            if pid == -1 {
                Err(err)
            } else {
                Ok(pid)
            }
        };
        drop(stack);
        let pid = match started {
            Ok(pid) => pid,
            Err(err) if cgroup.is_some() && refuses_into_cgroup(&err) => return Err(err),
            Err(err) => return Ok(Err(err)),
        };
        let mut spawned = Spawned { pid, status: None };
        Ok(match exec.errno.load(Ordering::Acquire) {
            0 => Ok(spawned),
            errno => spawned
                .wait()
                .and_then(|_| Err(io::Error::from_raw_os_error(errno))),
        })
    }
}

/// Whether clone3's error says it cannot start a process into a cgroup
/// here, rather than that no process could start (EAGAIN, ENOMEM).
fn refuses_into_cgroup(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(
            libc::ENOSYS
                | libc::EINVAL
                | libc::EPERM
                | libc::EACCES
                | libc::E2BIG
                | libc::EBUSY
                | libc::EOPNOTSUPP
                | libc::ENODEV
                | libc::EBADF
        )
    )
}

/// Whether this kernel lets us call clone3 at all: asked with no
/// arguments, it says EINVAL where it exists and ENOSYS where it does not
/// (before Linux 5.3, or under a seccomp filter that hides it, as
/// container runtimes' default filters do).
pub(in crate::child) fn clone3_available() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    // SAFETY: with size 0 the kernel reads nothing at the pointer.
    let ret = unsafe { libc::syscall(libc::SYS_clone3, ptr::null::<u8>(), 0usize) };
    ret == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
}

/// The kernel's `struct clone_args` as of Linux 5.7 (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Linux's CLONE_INTO_CGROUP (5.7), not in every libc crate yet.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `clone(run, top, CLONE_VM | CLONE_VFORK | SIGCHLD, exec)` made with
/// clone3, into the cgroup `fd`: the new process's pid, or -1 with errno
/// set. glibc has no wrapper for clone3, and a process that shares our
/// memory must start on its own stack before it runs any code of ours, so
/// the system call and the child's first steps are ours, in assembly, as in
/// glibc's `clone`.
///
/// # Safety
/// As `libc::clone`: `top` is the top of a stack the new process may use
/// until it execs, and `exec` outlives that.
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_into(fd: BorrowedFd<'_>, top: usize, exec: &Exec) -> libc::pid_t {
    let bottom = top - (STACK_SIZE - 16);
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | CLONE_INTO_CGROUP,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: bottom as u64,
        stack_size: (top - bottom) as u64,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: fd.as_raw_fd() as u64,
    };
    let arg = (exec as *const Exec).cast_mut().cast::<libc::c_void>();
    let entry: extern "C" fn(*mut libc::c_void) -> libc::c_int = run;
    let ret: i64;
    // The new process starts after the syscall with rax 0 and its stack
    // pointer at `top` (16-byte aligned, as a call wants), on our memory:
    // it calls `run`, which execs or _exits, and never comes back here. We
    // (rax the pid, or -errno) jump past its part. r12 and r13 are kept
    // across the syscall, so the new process finds `run` and its argument
    // there. rcx and r11 are the syscall's own.
    std::arch::asm!(
        "syscall",
        "test rax, rax",
        "jnz 2f",
        "xor ebp, ebp",
        "mov rdi, r12",
        "call r13",
        "mov edi, eax",
        "mov eax, {exit}",
        "syscall",
        "ud2",
        "2:",
        exit = const libc::SYS_exit,
        inlateout("rax") libc::SYS_clone3 => ret,
        in("rdi") &args as *const CloneArgs,
        in("rsi") std::mem::size_of::<CloneArgs>(),
        in("r12") arg,
        in("r13") entry,
        lateout("rcx") _,
        lateout("r11") _,
    );
    if ret < 0 {
        *libc::__errno_location() = (-ret) as libc::c_int;
        return -1;
    }
    ret as libc::pid_t
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn clone3_into(_: BorrowedFd<'_>, _: usize, _: &Exec) -> libc::pid_t {
    *libc::__errno_location() = libc::ENOSYS;
    -1
}

/// The paths `execvp` would try for `program`, in order.
fn candidates(program: &OsStr, path: Option<&[u8]>) -> Vec<OsString> {
    let name = program.as_bytes();
    if name.contains(&b'/') {
        return vec![program.to_owned()];
    }
    if name.is_empty() {
        // execvp fails an empty name with ENOENT; so does exec of "".
        return vec![OsString::new()];
    }
    path.unwrap_or(DEFAULT_PATH)
        .split(|b| *b == b':')
        .map(|dir| {
            // An empty entry is the current directory.
            let mut full = if dir.is_empty() {
                b".".to_vec()
            } else {
                dir.to_vec()
            };
            full.push(b'/');
            full.extend_from_slice(name);
            OsString::from_vec(full)
        })
        .collect()
}

/// The new process, on the guard's memory, until it execs.
extern "C" fn run(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the guard's `Exec`, alive and untouched by the guard
    // (suspended by CLONE_VFORK) until we exec or exit. Only
    // async-signal-safe calls on prepared values follow; errno is the
    // guard's thread's slot, which the guard does not read after clone.
    unsafe {
        let exec = &*(arg as *const Exec);
        // Every signal is blocked (the guard blocked them all for clone),
        // and none of the guard's handlers may run here, on its memory.
        // What the guard survives meets a no-op until exec resets it, as it
        // met the guard's own no-op under fork: the guard has it pending
        // too and relays it to COMMAND. Every other handled signal, and
        // SIGPIPE, which Rust ignores, goes back to its default; what the
        // guard's own caller ignored stays ignored, as exec keeps it.
        for sig in 1..=64 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut current = MaybeUninit::<libc::sigaction>::zeroed();
            // glibc refuses its own internal signals: skipped.
            if libc::sigaction(sig, ptr::null(), current.as_mut_ptr()) != 0 {
                continue;
            }
            let mut action = MaybeUninit::<libc::sigaction>::zeroed().assume_init();
            let ignored = current.assume_init().sa_sigaction == libc::SIG_IGN;
            if libc::sigismember(&exec.survivable, sig) == 1 || (is_stop(sig) && !ignored) {
                action.sa_sigaction = ignore_until_exec as *const () as libc::sighandler_t;
            } else if current.assume_init().sa_sigaction != libc::SIG_IGN || sig == libc::SIGPIPE {
                action.sa_sigaction = libc::SIG_DFL;
            } else {
                continue;
            }
            libc::sigaction(sig, &action, ptr::null_mut());
        }
        // Killed with the guard, wherever COMMAND takes itself.
        if let Err(err) = super::arm_parent_death(libc::SIGKILL, exec.parent) {
            return fail(exec, err.raw_os_error().unwrap_or(libc::ESRCH));
        }
        let mut none = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(none.as_mut_ptr());
        libc::sigprocmask(libc::SIG_SETMASK, none.as_ptr(), ptr::null_mut());

        // As execvp: the first candidate that execs wins, and a permission
        // refused is remembered while the search goes on. A file not in an
        // executable format is refused, not run by /bin/sh: lockrun's own
        // check of COMMAND refuses it before anything is written.
        let mut refused = false;
        let mut last = libc::ENOENT;
        for candidate in &exec.candidates {
            libc::execve(candidate.as_ptr(), exec.argv.as_ptr(), exec.envp.as_ptr());
            last = errno();
            match last {
                libc::EACCES => refused = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => break,
            }
        }
        if refused && matches!(last, libc::ENOENT | libc::ENOTDIR) {
            last = libc::EACCES;
        }
        fail(exec, last)
    }
}

/// The stop signals a terminal sends (Ctrl-Z, a background read or write).
/// Until it execs, the new process only notes them (see `run`): stopped
/// there, it would hold the guard in its vfork wait, unable to stop or to
/// see the job stop, and the job would be stopped in part.
fn is_stop(sig: libc::c_int) -> bool {
    matches!(sig, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU)
}

/// In the guard, right after the clone, its signals still blocked: a stop
/// sent to the group while the new process could not stop is pending on
/// us too; it goes to COMMAND, which has exec'd, so that the whole job
/// stops. We stop ourselves once our mask is restored.
///
/// # Safety
/// Plain system calls on values; `pid` is our unreaped child.
unsafe fn pass_on_stops(pid: libc::pid_t) {
    let mut pending = MaybeUninit::<libc::sigset_t>::uninit();
    libc::sigemptyset(pending.as_mut_ptr());
    if libc::sigpending(pending.as_mut_ptr()) != 0 {
        return;
    }
    for sig in [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
        if libc::sigismember(pending.as_ptr(), sig) == 1 {
            libc::kill(pid, sig);
        }
    }
}

/// A survivable signal's handler in the new process until it execs: it
/// touches nothing, so nothing of the guard's.
extern "C" fn ignore_until_exec(_: libc::c_int) {}

/// The errno of the call just made; reading it allocates nothing.
fn errno() -> libc::c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::ENOENT)
}

/// Leaves the new process with `errno` for the guard to report.
fn fail(exec: &Exec, errno: libc::c_int) -> libc::c_int {
    exec.errno.store(errno.max(1), Ordering::Release);
    // SAFETY: _exit skips every handler and flush, which would run on the
    // guard's memory.
    unsafe { libc::_exit(127) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(paths: Vec<OsString>) -> Vec<String> {
        paths
            .into_iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_name_with_a_slash_is_not_searched() {
        assert_eq!(
            strings(candidates(OsStr::new("./run"), Some(b"/bin"))),
            ["./run"]
        );
        assert_eq!(
            strings(candidates(OsStr::new("/usr/bin/env"), None)),
            ["/usr/bin/env"]
        );
    }

    #[test]
    fn a_bare_name_is_searched_along_path_as_execvp_does() {
        assert_eq!(
            strings(candidates(OsStr::new("true"), Some(b"/a::/b/"))),
            ["/a/true", "./true", "/b//true"]
        );
        assert_eq!(
            strings(candidates(OsStr::new("true"), None)),
            ["/bin/true", "/usr/bin/true"]
        );
    }
}
