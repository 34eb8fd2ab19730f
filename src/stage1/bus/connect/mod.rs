//! Connecting to a pod systemd's private socket from inside the pod's PID
//! namespace, without exec: the pod's systemd refuses peers whose pid it
//! cannot see (SO_PEERCRED pid 0 → "unprivileged client").
//!
//! Runs in three processes:
//! - the daemon: makes the socket and everything the children need, forks
//!   (for a pod without a user namespace: clones the child onto a stack of
//!   its own, sharing the daemon's memory, as `stage1::vfork` does, so the
//!   daemon's page tables are not copied), waits, keeps the (now connected)
//!   socket;
//! - the first child: `setns(pid ns)`, forks again (a pid namespace applies to
//!   children only), waits, `_exit`s with the grandchild's status;
//! - the grandchild, inside the pod's PID namespace: `connect`, `_exit`.
//!
//! The daemon is multi-threaded, so after `fork` the children only make raw
//! async-signal-safe syscalls on data prepared before the fork: no
//! allocation, no locks, no Rust std I/O. This file is the daemon's part;
//! the children's is [`child`].

mod child;

use child::EXIT_ODD;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Path of systemd's private socket, relative to a process root.
pub(super) const PRIVATE_SOCKET: &str = "run/systemd/private";

/// Opens a unix stream socket connected to the private socket of the
/// systemd whose host pid is `pid1`, from inside its PID namespace.
pub(super) fn connect_private(pid1: i32) -> io::Result<OwnedFd> {
    let addr = sockaddr(&format!("/proc/{pid1}/root/{PRIVATE_SOCKET}"))?;
    let ns = std::fs::File::open(format!("/proc/{pid1}/ns/pid"))?;
    // a pod in a user namespace: the connection is made from inside it, so
    // the pod's systemd sees its peer as its root (the node's root is no id there)
    let userns = crate::stage1::userns::foreign_userns(pid1)?;
    let userns_fd = userns.as_ref().map_or(-1, |fd| fd.as_raw_fd());
    // SAFETY: socket(2) with constant arguments; returns a new fd or -1.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket(2) just returned this fd; nothing else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let (sock_fd, ns_fd) = (sock.as_raw_fd(), ns.as_raw_fd());
    // the descriptors the children keep, ascending (-1: none), prepared before the fork
    let mut keep = [sock_fd, ns_fd, userns_fd];
    keep.sort_unstable();
    let code = if userns.is_none() {
        child::connect_without_fork(keep, ns_fd, sock_fd, addr)?
    } else {
        // a child that shares the daemon's memory cannot enter a user namespace
        // (the kernel refuses a process whose memory another uses): a fork.
        // SAFETY: fork(2); the child below only calls async-signal-safe functions on prepared data.
        let child = unsafe { libc::fork() };
        if child < 0 {
            return Err(io::Error::last_os_error());
        }
        if child == 0 {
            // first child: never returns. A copy of the daemon without exec, it
            // would hold every descriptor of the daemon's (the CRI socket and its
            // lock among them) for as long as it lives: a daemon killed meanwhile
            // could not be restarted on its socket until it ended
            crate::base::sys::close_all_but(&keep);
            child::enter_and_connect(userns_fd, ns_fd, sock_fd, &addr);
        }
        wait_exit_code(child)?
    };
    match code {
        0 => Ok(sock),
        EXIT_ODD => Err(io::Error::other("namespace helper failed")),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Waits for `pid` (our child) and returns its exit code.
pub(super) fn wait_exit_code(pid: i32) -> io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid(2) on our own child with an out-parameter we own.
        if unsafe { libc::waitpid(pid, &mut status, 0) } >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Err(io::Error::other(format!("namespace helper died (wait status {status:#x})")))
    }
}

fn sockaddr(path: &str) -> io::Result<libc::sockaddr_un> {
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("socket path too long: {path}")));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_fits_and_rejects_long_paths() {
        let a = sockaddr("/proc/4194304/root/run/systemd/private").expect("fits");
        assert_eq!(a.sun_path[0], b'/' as libc::c_char);
        assert!(sockaddr(&"x".repeat(200)).is_err());
    }

    #[test]
    fn the_forked_helper_keeps_only_its_own_descriptors() {
        let files: Vec<std::fs::File> = (0..4).map(|_| tempfile::tempfile().expect("tempfile")).collect();
        let fds: Vec<i32> = files.iter().map(|f| f.as_raw_fd()).collect();
        let keep = [-1, fds[0], fds[2]];
        // SAFETY: fcntl(F_GETFD) only reads a descriptor's flags.
        let open = |fd: i32| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
        // SAFETY: fork(2); the child makes raw syscalls only, then _exits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            crate::base::sys::close_all_but(&keep);
            let ok = open(fds[0]) && !open(fds[1]) && open(fds[2]) && !open(fds[3]) && open(2);
            // SAFETY: _exit(2) in the forked child.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        assert_eq!(
            wait_exit_code(child).expect("wait"),
            0,
            "the child kept {keep:?} and stderr, closed {fds:?}'s others"
        );
        assert!(fds.iter().all(|fd| open(*fd)), "the parent's descriptors stay open");
    }

    #[test]
    fn missing_pod_is_an_error_not_a_hang() {
        // a pid that cannot exist (above pid_max's ceiling)
        let e = connect_private(i32::MAX).expect_err("no such process");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_process_without_the_socket_reports_enoent() {
        // a process rooted in an empty directory (but for a static busybox),
        // whatever the host's PID 1 is
        let root = tempfile::tempdir().expect("root");
        std::fs::copy("/bin/busybox", root.path().join("busybox")).expect("busybox-static (install-deps.sh)");
        let mut child = std::process::Command::new("unshare")
            .arg(format!("--root={}", root.path().display()))
            .args(["/busybox", "sleep", "30"])
            .spawn()
            .expect("unshare");
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        // until unshare has exec'd busybox inside its new root
        while std::fs::read_link(format!("/proc/{pid}/root")).ok() != Some(root.path().to_path_buf()) {
            assert!(std::time::Instant::now() < deadline, "the child never entered its root");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let e = connect_private(pid).expect_err("no socket");
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }
}
