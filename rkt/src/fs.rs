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
/// crash, not against a power loss (after which the file may be old, new
/// or empty). For state that does not outlive a reboot (pod directories:
/// their pods are gone after a reboot anyway), where an fsync on the hot
/// path costs milliseconds. An existing file is swapped out rather than
/// renamed over ([`swap_into_place`]).
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
            fs::rename(&tmp, path)?;
            sync_dir(dir)
        } else {
            swap_into_place(&tmp, path).map(drop)
        }
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Puts `tmp` in the place of `path`: swapped with the file there
/// (renameat2's RENAME_EXCHANGE, as atomic for readers as a rename), then
/// the old file, now at `tmp`, removed; a plain rename where there is no
/// file to swap with or the file system cannot swap. On ext4 a rename over
/// an existing file starts the new file's writeback at once (its
/// `auto_da_alloc`, for files replaced without an fsync: 0.2-0.3 ms per
/// call measured here); a swap does not, and a file replaced again before
/// the flusher comes is never written at all. Whether it swapped.
fn swap_into_place(tmp: &Path, path: &Path) -> io::Result<bool> {
    match exchange(tmp, path) {
        Ok(()) => match fs::remove_file(tmp) {
            Ok(()) => Ok(true),
            // what was at `path` is no file (a directory): put it back
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
                exchange(tmp, path)?;
                Err(io::Error::new(io::ErrorKind::IsADirectory, format!("{} is a directory", path.display())))
            }
            // (a `.tmp-*` file left behind, which gc removes)
            Err(_) => Ok(true),
        },
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)) => {
            fs::rename(tmp, path).map(|()| false)
        }
        Err(e) => Err(e),
    }
}

/// renameat2(2) with RENAME_EXCHANGE: `a` and `b` trade places.
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    const RENAME_EXCHANGE: libc::c_uint = 1 << 1;
    let cstr = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (a, b) = (cstr(a)?, cstr(b)?);
    // SAFETY: renameat2(2) (the raw call: libc and nix offer it on glibc only) on two NUL-terminated paths.
    let rc = unsafe {
        libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), RENAME_EXCHANGE)
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Creates an empty file with `mode` if it does not exist yet.
pub(crate) fn create_empty(path: &Path, mode: u32) -> io::Result<()> {
    match OpenOptions::new().write(true).create_new(true).mode(mode).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_volatile_write_swaps_the_old_file_out_and_leaves_nothing_else() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("pod");
        write_volatile(&path, b"first", 0o640).expect("a new file");
        assert_eq!(fs::read(&path).expect("read"), b"first");
        // a reader of the old file keeps reading it whole
        let mut old = File::open(&path).expect("open");
        let old_ino = fs::metadata(&path).expect("stat").ino();
        write_volatile(&path, b"second, longer", 0o640).expect("over the old one");
        // (the file system of the test's temporary directory can swap: tmpfs, ext4)
        fs::write(tmp.path().join("next"), b"third").expect("write");
        assert!(swap_into_place(&tmp.path().join("next"), &path).expect("swap"), "swapped, not renamed over");
        assert_eq!(fs::read(&path).expect("read"), b"third");
        write_volatile(&path, b"second, longer", 0o640).expect("over the old one");
        assert_eq!(fs::read(&path).expect("read"), b"second, longer");
        assert_ne!(fs::metadata(&path).expect("stat").ino(), old_ino, "a new file, not the old one written in place");
        let mut was = String::new();
        old.read_to_string(&mut was).expect("read old");
        assert_eq!(was, "first");
        assert_eq!(fs::metadata(&path).expect("stat").permissions().mode() & 0o7777, 0o640);
        assert_eq!(names(tmp.path()), ["pod"], "the swapped-out file is removed");
    }

    #[test]
    fn a_volatile_write_over_a_directory_fails_and_leaves_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("pod");
        fs::create_dir(&dir).expect("mkdir");
        fs::write(dir.join("inside"), b"kept").expect("write");
        let err = write_volatile(&dir, b"x", 0o600).expect_err("a directory is in the way");
        assert!(matches!(err.kind(), io::ErrorKind::IsADirectory), "{err:?}");
        assert_eq!(fs::read(dir.join("inside")).expect("still there"), b"kept");
        assert_eq!(names(tmp.path()), ["pod"]);
    }

    #[test]
    fn a_volatile_write_into_a_missing_directory_fails_and_leaves_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let err = write_volatile(&tmp.path().join("gone/pod"), b"x", 0o600).expect_err("no directory");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(names(tmp.path()).is_empty());
    }
}
