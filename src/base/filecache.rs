//! Parsed copies of files kept between calls (pod manifests, the image
//! index, image manifests). The file stays the truth: every read checks the
//! file's identity (inode, size, mtime, ctime) with one `stat` and parses
//! again when it changed.
//!
//! Why an unchanged identity means unchanged bytes: these files are replaced
//! by rename, so a new version is a new file whose mtime is the time it was
//! written, at the kernel's timestamp granularity (a clock tick at worst). A
//! cached copy is trusted only once it was read [`SETTLED`] after the file's
//! mtime: any file written after that read then has a later mtime than the
//! cached one, even if it reuses the inode number and has the same size.
//! Until then (a file written moments ago) the file is read on every call and
//! parsed again only if its bytes differ from the kept ones; the process's
//! own writes ([`FileCache::keep`]) keep what they wrote, so a file changing
//! every few milliseconds is not parsed for each read.
//! (A wall clock set back by more than that window could defeat the check;
//! owners drop entries of files that are gone.)

use std::collections::HashMap;
use std::hash::Hash;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long after a file's mtime a read must be for the copy to be trusted
/// (well above any timestamp granularity).
pub(crate) const SETTLED: Duration = Duration::from_millis(50);

/// What identifies one version of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

/// A stamp no file has: the next read compares the bytes.
const UNKNOWN: Stamp = Stamp { ino: 0, size: u64::MAX, mtime_ns: 0, ctime_ns: 0 };

#[derive(Debug)]
struct Entry<T> {
    stamp: Stamp,
    /// Taken before the file was read: a lower bound of the read's time.
    read_at_ns: i128,
    /// The file's bytes the value was parsed from.
    bytes: Vec<u8>,
    value: Arc<T>,
}

/// Why a read failed: the file could not be read, or not parsed.
#[derive(Debug)]
pub(crate) enum ReadError<E> {
    Io(io::Error),
    Parse(E),
}

/// Parsed files by key (a pod, an image id...).
#[derive(Debug)]
pub(crate) struct FileCache<K, T> {
    entries: Mutex<HashMap<K, Entry<T>>>,
}

impl<K, T> Default for FileCache<K, T> {
    fn default() -> Self {
        FileCache { entries: Mutex::new(HashMap::new()) }
    }
}

fn now_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128)
}

impl<K: Hash + Eq + Clone, T> FileCache<K, T> {
    /// The parsed file `path` (kept under `key`), parsed only if the file
    /// changed since the last read.
    pub(crate) fn read<E>(
        &self,
        key: &K,
        path: &Path,
        parse: impl FnOnce(&[u8]) -> Result<T, E>,
    ) -> Result<Arc<T>, ReadError<E>> {
        let read_at_ns = now_ns();
        let meta = std::fs::metadata(path).map_err(ReadError::Io)?;
        let ns = |secs: i64, nsec: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsec);
        let stamp = Stamp {
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        };
        if let Ok(entries) = self.entries.lock()
            && let Some(e) = entries.get(key)
            && e.stamp == stamp
            && e.read_at_ns - stamp.mtime_ns.max(stamp.ctime_ns) >= SETTLED.as_nanos() as i128
        {
            return Ok(e.value.clone());
        }
        // not known settled: the bytes tell whether it is what was parsed
        // (a rewrite of the same content, or this process's own write, is not
        // parsed again)
        let bytes = std::fs::read(path).map_err(ReadError::Io)?;
        let mut entries = self.entries.lock().ok();
        if let Some(e) = entries.as_mut().and_then(|entries| entries.get_mut(key))
            && e.bytes == bytes
        {
            e.stamp = stamp;
            e.read_at_ns = read_at_ns;
            return Ok(e.value.clone());
        }
        let value = Arc::new(parse(&bytes).map_err(ReadError::Parse)?);
        if let Some(entries) = entries.as_mut() {
            entries.insert(key.clone(), Entry { stamp, read_at_ns, bytes, value: value.clone() });
        }
        Ok(value)
    }

    /// Keeps `value`, which this process has just written to the file as
    /// `bytes`: the next read finds it parsed (once it has compared the bytes).
    pub(crate) fn keep(&self, key: K, bytes: Vec<u8>, value: T) -> Arc<T> {
        let value = Arc::new(value);
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(key, Entry { stamp: UNKNOWN, read_at_ns: 0, bytes, value: value.clone() });
        }
        value
    }

    /// Keeps only the entries whose key `keep` accepts.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|k, _| keep(k));
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().map(|e| e.len()).unwrap_or(0)
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<String, std::str::Utf8Error> {
        std::str::from_utf8(bytes).map(str::to_string)
    }

    fn replace(path: &Path, content: &str) {
        rkt::fs::write_volatile(path, content.as_bytes(), 0o644).expect("write");
    }

    #[test]
    fn a_replaced_file_is_read_again_and_an_unchanged_one_is_shared() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("f");
        replace(&path, "one");
        let cache: FileCache<(), String> = FileCache::default();
        let fresh = cache.read(&(), &path, parse).expect("read");
        assert!(Arc::ptr_eq(&fresh, &cache.read(&(), &path, parse).expect("read")), "not settled, same bytes");
        std::thread::sleep(SETTLED * 2);
        let settled = cache.read(&(), &path, parse).expect("read");
        assert!(Arc::ptr_eq(&settled, &cache.read(&(), &path, parse).expect("read")), "unchanged: reused");
        // same size, written at once: a new file all the same
        replace(&path, "two");
        assert_eq!(*cache.read(&(), &path, parse).expect("read"), "two");

        std::fs::write(&path, [0xff]).expect("write");
        assert!(matches!(cache.read(&(), &path, parse), Err(ReadError::Parse(_))));
        std::fs::remove_file(&path).expect("rm");
        assert!(matches!(cache.read(&(), &path, parse), Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound));
        cache.retain(|_| false);
        assert!(cache.is_empty());
    }

    #[test]
    fn a_kept_write_is_not_parsed_again_and_another_write_is() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("f");
        replace(&path, "mine");
        let cache: FileCache<u8, String> = FileCache::default();
        let kept = cache.keep(1, b"mine".to_vec(), "mine".into());
        let no_parse = |_: &[u8]| -> Result<String, ()> { panic!("parsed again") };
        assert!(Arc::ptr_eq(&kept, &cache.read(&1, &path, no_parse).expect("read")));
        replace(&path, "them");
        assert_eq!(*cache.read(&1, &path, parse).expect("read"), "them");
    }
}
