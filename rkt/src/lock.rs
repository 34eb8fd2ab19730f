//! Advisory `flock(2)` locks as rkt uses them: on a pod directory (its state),
//! on `pod.lck` (manifest mutation) and on key-lock files.
//!
//! flock locks belong to an open file description, so a lock taken here is
//! kept by a child that inherits the descriptor across `exec`, which is how a
//! pod's lock passes to its long-lived sandbox process.

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A held flock. Dropping it closes this descriptor without `LOCK_UN`, so a
/// child that inherited the same open file description keeps the lock; the
/// lock ends when the last descriptor of that description is closed.
#[derive(Debug)]
pub struct HeldLock {
    file: File,
}

impl HeldLock {
    /// The locked descriptor's number.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Clears `FD_CLOEXEC` on `fd` so the program about to be exec'd keeps the lock.
/// Meant for a forked child (`Command::pre_exec`): doing it in the daemon would
/// leak the lock into every program any thread spawns meanwhile.
pub fn keep_across_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: the caller passes a descriptor it owns; fcntl on it is async-signal-safe.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()))?;
    Ok(())
}

fn open_dir(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).custom_flags((OFlag::O_DIRECTORY | OFlag::O_CLOEXEC).bits()).open(path)
}

fn open_file(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .mode(0o600)
        .custom_flags(OFlag::O_CLOEXEC.bits())
        .open(path)
}

fn lock(file: File, op: libc::c_int) -> io::Result<Option<HeldLock>> {
    loop {
        // SAFETY: flock(2) on a descriptor we own; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
        if rc == 0 {
            return Ok(Some(HeldLock { file }));
        }
        match Errno::last() {
            Errno::EINTR => continue,
            Errno::EWOULDBLOCK => return Ok(None),
            e => return Err(e.into()),
        }
    }
}

const EXCLUSIVE: libc::c_int = libc::LOCK_EX;
const EXCLUSIVE_NB: libc::c_int = libc::LOCK_EX | libc::LOCK_NB;
const SHARED_NB: libc::c_int = libc::LOCK_SH | libc::LOCK_NB;

/// Takes an exclusive lock on a directory without waiting; `None` if held elsewhere.
pub fn try_exclusive_dir(path: &Path) -> io::Result<Option<HeldLock>> {
    lock(open_dir(path)?, EXCLUSIVE_NB)
}

/// Takes an exclusive lock on a directory, waiting for other holders.
pub fn exclusive_dir(path: &Path) -> io::Result<HeldLock> {
    lock(open_dir(path)?, EXCLUSIVE)?.ok_or_else(|| io::Error::from(Errno::EWOULDBLOCK))
}

/// Takes a shared lock on a directory, waiting for an exclusive holder.
pub(crate) fn shared_dir(path: &Path) -> io::Result<HeldLock> {
    lock(open_dir(path)?, libc::LOCK_SH)?.ok_or_else(|| io::Error::from(Errno::EWOULDBLOCK))
}

/// Whether some other open description holds an exclusive lock on `path`
/// (rkt's state probe: a non-blocking shared lock that fails).
pub fn is_held(path: &Path) -> io::Result<bool> {
    Ok(lock(open_dir(path)?, SHARED_NB)?.is_none())
}

/// Takes an exclusive lock on a regular file, creating it (0600) if missing.
pub fn exclusive_file(path: &Path) -> io::Result<HeldLock> {
    lock(open_file(path, true)?, EXCLUSIVE)?.ok_or_else(|| io::Error::from(Errno::EWOULDBLOCK))
}

/// Like [`exclusive_file`] without waiting; `None` if held elsewhere.
pub fn try_exclusive_file(path: &Path) -> io::Result<Option<HeldLock>> {
    lock(open_file(path, true)?, EXCLUSIVE_NB)
}
