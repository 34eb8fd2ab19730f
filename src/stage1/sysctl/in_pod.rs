//! The thread of [`super::apply`] that joins a pod's net, IPC and UTS
//! namespaces and writes its sysctls there.
//!
//! Runs in: a thread of the daemon's of its own, which ends right after
//! (`setns` and `unshare` change only the calling thread: no other thread
//! ever sees the pod's namespaces).

use super::{Namespace, Sysctl, SysctlError};
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Joins the namespaces `fds` (opened by the daemon) and writes `sysctls`
/// through /proc/sys, which shows the namespaces of the task that uses it.
pub(super) fn join_and_write(fds: &[(Namespace, std::fs::File)], sysctls: &[Sysctl]) -> Result<(), SysctlError> {
    for (n, f) in fds {
        // SAFETY: setns(2) on an open namespace fd; it changes only this thread, which exits next.
        if unsafe { libc::setns(f.as_raw_fd(), n.clone_flag()) } < 0 {
            return Err(SysctlError::Join { namespace: n.proc_name(), source: io::Error::last_os_error() });
        }
    }
    // /proc/sys shows the net, IPC and UTS sysctls of the namespaces of the task that uses it
    let mut proc_of_own = false;
    for s in sysctls {
        let path = PathBuf::from("/proc/sys").join(&s.path);
        let mut opened = std::fs::OpenOptions::new().write(true).open(&path);
        if !proc_of_own && opened.as_ref().is_err_and(|e| e.raw_os_error() == Some(libc::EROFS)) {
            // the node's /proc/sys is read-only (a node in a container):
            // these sysctls are the pod's namespaces', written through a
            // procfs of this thread's own
            own_proc().map_err(|source| SysctlError::Write {
                name: s.name.clone(),
                value: s.value.clone(),
                source: io::Error::new(source.kind(), format!("the node's /proc/sys is read-only: {source}")),
            })?;
            proc_of_own = true;
            opened = std::fs::OpenOptions::new().write(true).open(&path);
        }
        let file = opened.map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                SysctlError::Missing { name: s.name.clone() }
            } else {
                SysctlError::Write { name: s.name.clone(), value: s.value.clone(), source }
            }
        })?;
        io::Write::write_all(&mut &file, s.value.as_bytes()).map_err(|source| SysctlError::Write {
            name: s.name.clone(),
            value: s.value.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Gives the calling thread a mount namespace of its own (and its own
/// file-system context, which that needs) with a fresh procfs on /proc: its
/// /proc/sys is writable where the node's is mounted read-only. Only for a
/// thread that ends after its writes.
fn own_proc() -> io::Result<()> {
    // SAFETY: unshare(2) of this thread's fs context and mount namespace; other threads keep theirs.
    if unsafe { libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // nothing mounted here reaches the node's namespace
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(io::Error::from)?;
    let flags = nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV | nix::mount::MsFlags::MS_NOEXEC;
    nix::mount::mount(Some("proc"), "/proc", Some("proc"), flags, None::<&str>).map_err(io::Error::from)
}
