//! Durable and atomic writes, as rkt's stores make them: a data dir's
//! files are replaced whole, never written in place.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// fsyncs a directory so a rename or create inside it is durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Flushes the whole filesystem that holds `path` (syncfs(2)).
pub(crate) fn syncfs(path: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = File::open(path)?;
    // SAFETY: syncfs(2) on a descriptor this function owns for the call.
    let rc = unsafe { libc::syncfs(f.as_raw_fd()) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Writes `bytes` to `path` atomically and durably: a temp file in the same
/// directory, fsync, chmod, rename over `path`, fsync of the directory. A
/// crash, even a power loss, leaves either the old or the new content, never a
/// half-written file (at worst a `.tmp-*` file that gc removes).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_replace(path, bytes, mode, true)
}

/// Like [`write_atomic`] without the fsyncs: atomic against any process
/// crash, not against a power loss. For state that does not outlive a reboot
/// (pod directories: their pods are gone after a reboot anyway), where an
/// fsync on the hot path costs milliseconds.
pub fn write_volatile(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_replace(path, bytes, mode, false)
}

fn write_replace(path: &Path, bytes: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::other("path has no parent directory"))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".tmp-{name}-{}", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        if durable {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        if durable { sync_dir(dir) } else { Ok(()) }
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Creates an empty file with `mode` if it does not exist yet.
pub(crate) fn create_empty(path: &Path, mode: u32) -> io::Result<()> {
    match OpenOptions::new().write(true).create_new(true).mode(mode).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}
