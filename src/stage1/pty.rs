//! Terminals for containers created with `tty`: a pty of the pod's own
//! devpts instance (nspawn mounts one per pod), allocated from the host
//! through the pod's root, so `/dev/pts/N` names it inside the pod and the
//! pod's systemd can make it the app's controlling terminal (`TTYPath=`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

/// The master side, held on the host; the slave as the pod names it.
#[derive(Debug)]
pub(crate) struct PodPty {
    pub master: OwnedFd,
    pub path_in_pod: String,
}

impl PodPty {
    /// A pty of the devpts that process `pid` sees at `/dev/pts` (any
    /// process of a pod: its apps see the pod's `/dev`).
    pub(crate) fn open_as_seen_by(pid: i32) -> io::Result<PodPty> {
        let ptmx = format!("/proc/{pid}/root/dev/pts/ptmx");
        let master: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&ptmx)
            .map_err(|e| io::Error::new(e.kind(), format!("{ptmx}: {e}")))?
            .into();
        let unlock: libc::c_int = 0;
        let mut n: libc::c_uint = 0;
        // a size until a client sends its own
        let size = libc::winsize { ws_row: 24, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: pty ioctls on the master we just opened, with valid argument pointers.
        let ok = unsafe {
            libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) == 0
                && libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut n) == 0
                && libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) == 0
        };
        if !ok {
            return Err(io::Error::last_os_error());
        }
        Ok(PodPty { master, path_in_pod: format!("/dev/pts/{n}") })
    }

    /// The slave side, opened from the host through the same root.
    pub(crate) fn open_slave(&self, pid: i32) -> io::Result<OwnedFd> {
        let path = format!("/proc/{pid}/root{}", self.path_in_pod);
        Ok(std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOCTTY).open(path)?.into())
    }
}
