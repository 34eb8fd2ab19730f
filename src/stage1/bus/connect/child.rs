//! The two children of [`super::connect_private`], forked (copies of the
//! multi-threaded daemon without exec) or cloned sharing its memory: raw
//! async-signal-safe syscalls only, on what the daemon prepared before.
//!
//! Runs in: the first child (enters the pod's user and PID namespaces,
//! forks again, passes the result on as its exit code) and the grandchild
//! (inside the pod's PID namespace: `connect`, `_exit`).

/// Exit code of a child meaning "failed without an errno" (never a valid errno).
pub(super) const EXIT_ODD: i32 = 255;

/// First child: enter the user namespace (`userns_fd`, when not -1) and
/// the pid namespace, fork the grandchild that connects, pass its result on
/// as the exit code.
pub(super) fn enter_and_connect(userns_fd: i32, ns_fd: i32, sock_fd: i32, addr: &libc::sockaddr_un) -> ! {
    // SAFETY: raw syscalls only; errno is read through libc's thread-local, which is async-signal-safe.
    unsafe {
        if userns_fd >= 0 {
            // joining leaves the ids the node's (unmapped there): become the namespace's root
            if libc::setns(userns_fd, libc::CLONE_NEWUSER) != 0
                || libc::setresgid(0, 0, 0) != 0
                || libc::setresuid(0, 0, 0) != 0
            {
                libc::_exit(errno_code());
            }
        }
        if libc::setns(ns_fd, libc::CLONE_NEWPID) != 0 {
            libc::_exit(errno_code());
        }
        let grandchild = libc::fork();
        if grandchild < 0 {
            libc::_exit(errno_code());
        }
        if grandchild == 0 {
            let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            let r = libc::connect(sock_fd, (addr as *const libc::sockaddr_un).cast(), len);
            libc::_exit(if r == 0 { 0 } else { errno_code() });
        }
        pass_on(grandchild);
    }
}

/// What the children of [`connect_without_fork`] read, prepared by the daemon.
struct Shared {
    keep: [i32; 3],
    ns_fd: i32,
    sock_fd: i32,
    addr: libc::sockaddr_un,
    /// The top of the grandchild's stack (16-byte aligned).
    grandchild_stack: usize,
}

/// Stack of each child: raw syscalls and a few frames.
const STACK: usize = 64 * 1024;

/// [`enter_and_connect`] for a pod without a user namespace, without a
/// copy of the daemon: the first child and the grandchild share the
/// daemon's memory on stacks of their own (`CLONE_VM | CLONE_VFORK`, the
/// calling thread suspended until the first child ended, which waits for
/// the grandchild). Returns the first child's exit code.
pub(super) fn connect_without_fork(
    keep: [i32; 3],
    ns_fd: i32,
    sock_fd: i32,
    addr: libc::sockaddr_un,
) -> std::io::Result<i32> {
    let mut stack = vec![0u8; STACK];
    let grandchild_stack = (stack.as_mut_ptr() as usize + stack.len()) & !15;
    let mut shared = Shared { keep, ns_fd, sock_fd, addr, grandchild_stack };
    // SAFETY: `shared` and `stack` outlive both children (the clone returns once
    // the first child ended, and it waits for the grandchild); both children
    // make raw syscalls only and end in _exit.
    let pid = unsafe {
        crate::stage1::vfork::clone(first_child, (&mut shared as *mut Shared).cast(), STACK, 0, std::ptr::null_mut())
    }?;
    let code = super::wait_exit_code(pid);
    drop(stack);
    code
}

/// The first child of [`connect_without_fork`]: only its own descriptors,
/// the pod's PID namespace for its children, the grandchild cloned there.
extern "C" fn first_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the daemon's `Shared`, alive while this runs; raw syscalls only.
    unsafe {
        let shared = &*(arg as *const Shared);
        crate::base::sys::close_all_but(&shared.keep);
        if libc::setns(shared.ns_fd, libc::CLONE_NEWPID) != 0 {
            libc::_exit(errno_code());
        }
        let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        let grandchild = libc::clone(grandchild, shared.grandchild_stack as *mut libc::c_void, flags, arg);
        if grandchild < 0 {
            libc::_exit(errno_code());
        }
        pass_on(grandchild)
    }
}

/// The grandchild, in the pod's PID namespace: connects, passes on how.
extern "C" fn grandchild(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the daemon's `Shared`, alive while this runs; raw syscalls only.
    unsafe {
        let shared = &*(arg as *const Shared);
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        let r = libc::connect(shared.sock_fd, (&shared.addr as *const libc::sockaddr_un).cast(), len);
        libc::_exit(if r == 0 { 0 } else { errno_code() })
    }
}

/// Waits for `grandchild` and ends with its exit code (EXIT_ODD if it did
/// not exit).
///
/// # Safety
/// Only in a first child: raw syscalls.
unsafe fn pass_on(grandchild: i32) -> ! {
    // SAFETY: waitpid(2) on our own child and _exit(2), as the caller's contract.
    unsafe {
        let mut status = 0;
        while libc::waitpid(grandchild, &mut status, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                libc::_exit(EXIT_ODD);
            }
        }
        libc::_exit(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { EXIT_ODD })
    }
}

/// The current errno as an exit code (errnos are below 255).
fn errno_code() -> i32 {
    // SAFETY: reading libc's thread-local errno.
    let e = unsafe { *libc::__errno_location() };
    if (1..EXIT_ODD).contains(&e) { e } else { EXIT_ODD }
}
