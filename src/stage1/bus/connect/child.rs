//! The two forked children of [`super::connect_private`]: copies of the
//! multi-threaded daemon without exec, so raw async-signal-safe syscalls
//! only, on what the daemon prepared before the fork.
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
        let mut status = 0;
        while libc::waitpid(grandchild, &mut status, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                libc::_exit(EXIT_ODD);
            }
        }
        libc::_exit(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { EXIT_ODD });
    }
}

/// The current errno as an exit code (errnos are below 255).
fn errno_code() -> i32 {
    // SAFETY: reading libc's thread-local errno.
    let e = unsafe { *libc::__errno_location() };
    if (1..EXIT_ODD).contains(&e) { e } else { EXIT_ODD }
}
