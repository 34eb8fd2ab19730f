//! The process-descriptor calls rktlet makes: pidfd_open(2), pidfd_getfd(2)
//! and pidfd_send_signal(2), which libc numbers but does not wrap, and
//! waitid(2) on a pidfd that leaves the child to be reaped later. A pidfd
//! names one process for good: a signal through it never reaches a process
//! that took a reused pid. Also close_range(2) for forked children. Std and
//! libc only, for every module.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Opens a pidfd for `pid` (a process that exists now).
pub(crate) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A copy of descriptor `fd` of the process behind `pidfd` (close-on-exec).
pub(crate) fn pidfd_getfd(pidfd: &OwnedFd, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd(2) takes no pointers; a new descriptor or -1.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

/// Sends `signal` to the process behind `pidfd` (a descriptor that is not
/// one is refused by the kernel, EBADF).
pub(crate) fn pidfd_send_signal(pidfd: RawFd, signal: i32) -> io::Result<()> {
    // SAFETY: pidfd_send_signal(2) with a null info: no memory is passed.
    if unsafe { libc::syscall(libc::SYS_pidfd_send_signal, pidfd, signal, std::ptr::null::<u8>(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How the child behind `pidfd` ended, leaving it a zombie to be reaped
/// later (waitid(2) with WNOWAIT); None while it runs.
pub(crate) fn exit_status_unreaped(pidfd: &OwnedFd) -> io::Result<Option<std::process::ExitStatus>> {
    use std::os::unix::process::ExitStatusExt;
    // SAFETY: an all-zero siginfo_t is a valid value (a plain C struct).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOWAIT | libc::WNOHANG;
    // SAFETY: waitid(2) on our child's pidfd, writing only into `info`.
    if unsafe { libc::waitid(libc::P_PIDFD, pidfd.as_raw_fd() as libc::id_t, &mut info, flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: waitid filled the SIGCHLD fields of `info` (a pid of 0: nothing ended).
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    // the wait(2) status word of that ending
    let raw = match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_DUMPED => status | 0x80,
        _ => status,
    };
    Ok(Some(std::process::ExitStatus::from_raw(raw)))
}

/// Closes every descriptor from 3 up but those of `keep` (ascending; those
/// below 3 are ignored), with raw `close_range(2)` calls only: safe in a
/// child forked from a threaded process, before its exec. A child that is
/// a copy of the daemon would otherwise hold its descriptors (the CRI
/// socket's lock, pod locks) for as long as it lives.
pub(crate) fn close_all_but(keep: &[RawFd]) {
    let mut from: libc::c_uint = 3;
    for fd in keep.iter().filter_map(|fd| libc::c_uint::try_from(*fd).ok()).filter(|fd| *fd >= 3) {
        if fd > from {
            // SAFETY: close_range(2) on descriptors the caller no longer needs.
            unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0) };
        }
        from = from.max(fd + 1);
    }
    // SAFETY: as above, up to the highest descriptor.
    unsafe { libc::syscall(libc::SYS_close_range, from, libc::c_uint::MAX, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_signalled_through_its_pidfd_and_its_descriptors_copied() {
        let mut child = std::process::Command::new("sleep").arg("100").spawn().expect("sleep");
        let pidfd = pidfd_open(child.id() as i32).expect("pidfd");
        // its stdin, when the caller may trace it (root, or its parent under ptrace_scope 1)
        if let Ok(fd) = pidfd_getfd(&pidfd, 0) {
            assert!(fd.as_raw_fd() >= 0);
        }
        pidfd_send_signal(pidfd.as_raw_fd(), libc::SIGKILL).expect("signal");
        let status = child.wait().expect("wait");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        assert!(pidfd_send_signal(-1, 0).is_err());
        assert!(pidfd_open(-1).is_err());
    }

    #[test]
    fn an_ended_child_is_told_without_being_reaped() {
        use std::os::unix::process::ExitStatusExt;
        for (script, code, signal) in [("exit 3", Some(3), None), ("kill -TERM $$", None, Some(libc::SIGTERM))] {
            let mut child = std::process::Command::new("sh").args(["-c", script]).spawn().expect("sh");
            let pidfd = pidfd_open(child.id() as i32).expect("pidfd");
            let status = loop {
                if let Some(s) = exit_status_unreaped(&pidfd).expect("waitid") {
                    break s;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            };
            assert_eq!((status.code(), status.signal()), (code, signal), "{script}");
            // still a zombie of ours: reaped now, with the same status
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).expect("stat");
            assert!(stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')), "{stat}");
            assert_eq!(child.wait().expect("wait"), status);
        }
        let running = std::process::Command::new("sleep").arg("100").spawn().expect("sleep");
        let pidfd = pidfd_open(running.id() as i32).expect("pidfd");
        assert!(exit_status_unreaped(&pidfd).expect("waitid").is_none());
        pidfd_send_signal(pidfd.as_raw_fd(), libc::SIGKILL).expect("kill");
        let mut running = running;
        running.wait().expect("wait");
    }
}
