//! The log writer of a pod, as a program of its own: the sandbox process
//! forks, leaves the pod's listening socket and a pidfd of itself (which
//! becomes the pod's nspawn) open across the exec, and execs this with
//! `listen=FD pidfd=FD` (and `--uuid=POD`, so the pod's processes are found
//! by its uuid). Static and small: each pod keeps it resident.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;

/// The program's name in /proc (`comm`).
const NAME: &std::ffi::CStr = c"rkt-logwriter";

fn main() {
    let code = match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("logwriter: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn run() -> Result<(), String> {
    let (mut listen, mut pidfd) = (None, None);
    for arg in std::env::args().skip(1) {
        if let Some(fd) = arg.strip_prefix("listen=") {
            listen = Some(fd_arg(fd, true)?);
        } else if let Some(fd) = arg.strip_prefix("pidfd=") {
            pidfd = Some(fd_arg(fd, false)?);
        } else if !arg.starts_with("--uuid=") {
            return Err(format!("unknown argument {arg:?} (usage: logwriter listen=FD pidfd=FD [--uuid=POD])"));
        }
    }
    let listen = listen.ok_or("no listen=FD")?;
    // SAFETY: PR_SET_NAME copies a NUL-terminated name of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, NAME.as_ptr()) };
    // SAFETY: fd_arg checked that the descriptor is open and a listening socket; nothing else owns it.
    let listener = UnixListener::from(unsafe { OwnedFd::from_raw_fd(listen) });
    // SAFETY: fd_arg checked that the descriptor is open; nothing else owns it.
    let pidfd = pidfd.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    logwriter::serve(listener, pidfd, &mut logwriter::NoHooks).map_err(|e| e.to_string())
}

/// A descriptor named on the command line: open, close-on-exec again from
/// here on, and a listening socket if `listening`.
fn fd_arg(text: &str, listening: bool) -> Result<RawFd, String> {
    let fd: RawFd = text.parse().map_err(|_| format!("{text:?} is not a descriptor number"))?;
    // SAFETY: F_GETFD/F_SETFD read and set the flags of a descriptor number.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(format!("descriptor {fd} is not open"));
    }
    if listening {
        let mut accepting: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: SO_ACCEPTCONN writes one int into `accepting`, whose size is `len`.
        let ok = unsafe {
            libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN, (&raw mut accepting).cast(), &mut len)
        };
        if ok != 0 || accepting == 0 {
            return Err(format!("descriptor {fd} is not a listening socket"));
        }
    }
    Ok(fd)
}
