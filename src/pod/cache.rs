//! Parsed pod manifests kept by the daemon between calls. The file stays the
//! truth: every read checks the file's identity (inode, size, mtime, ctime)
//! with one `stat` and parses again when it changed.
//!
//! Why an unchanged identity means unchanged bytes: manifests are replaced by
//! rename, so a new version is a new file whose mtime is the time it was
//! written, at the kernel's timestamp granularity (a clock tick at worst). A
//! cached copy is trusted only once it was read [`SETTLED`] after the file's
//! mtime: any file written after that read then has a later mtime than the
//! cached one, even if it reuses the inode number and has the same size.
//! Until then (a manifest written moments ago) the file is read on every
//! call and parsed again only if its bytes differ from the kept ones; the
//! daemon's own writes ([`ManifestCache::write`]) keep what they wrote, so a
//! pod whose apps change every few milliseconds is not parsed for each.
//! (A wall clock set back by more than that window could defeat the check;
//! the daemon also drops entries of pods it no longer lists.)

use super::manifest::PodManifest;
use super::{Pod, PodError, Result};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use uuid::Uuid;

/// How long after a file's mtime a read must be for the copy to be trusted
/// (well above any timestamp granularity).
pub const SETTLED: Duration = Duration::from_millis(50);

/// What identifies one version of a manifest file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

#[derive(Debug)]
struct Entry {
    stamp: Stamp,
    /// Taken before the file was read: a lower bound of the read's time.
    read_at_ns: i128,
    /// The file's bytes the manifest was parsed from.
    bytes: Vec<u8>,
    manifest: Arc<PodManifest>,
}

#[derive(Debug, Default)]
pub struct ManifestCache {
    entries: Mutex<HashMap<Uuid, Entry>>,
}

fn now_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128)
}

impl ManifestCache {
    /// The pod's manifest, parsed only if the file changed since last time.
    pub fn read(&self, pod: &Pod) -> Result<Arc<PodManifest>> {
        let read_at_ns = now_ns();
        let path = pod.manifest_path();
        let meta = std::fs::metadata(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => PodError::NotFound(pod.uuid().to_string()),
            _ => PodError::Io { context: format!("reading {}", path.display()), source: e },
        })?;
        let ns = |secs: i64, nsec: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsec);
        let stamp = Stamp {
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        };
        if let Ok(entries) = self.entries.lock()
            && let Some(e) = entries.get(&pod.uuid())
            && e.stamp == stamp
            && e.read_at_ns - stamp.mtime_ns.max(stamp.ctime_ns) >= SETTLED.as_nanos() as i128
        {
            return Ok(e.manifest.clone());
        }
        // not known settled: the bytes tell whether it is what was parsed
        // (a rewrite of the same content, or the daemon's own write, is not
        // parsed again)
        let bytes = std::fs::read(&path)
            .map_err(|e| PodError::Io { context: format!("reading {}", path.display()), source: e })?;
        let mut entries = self.entries.lock().ok();
        if let Some(e) = entries.as_mut().and_then(|entries| entries.get_mut(&pod.uuid()))
            && e.bytes == bytes
        {
            e.stamp = stamp;
            e.read_at_ns = read_at_ns;
            return Ok(e.manifest.clone());
        }
        let manifest: Arc<PodManifest> =
            Arc::new(serde_json::from_slice(&bytes).map_err(|source| PodError::Manifest { uuid: pod.uuid(), source })?);
        if let Some(entries) = entries.as_mut() {
            entries.insert(pod.uuid(), Entry { stamp, read_at_ns, bytes, manifest: manifest.clone() });
        }
        Ok(manifest)
    }

    /// Writes the pod's manifest ([`Pod::write_manifest`]) and keeps it, so
    /// the next read finds it parsed (once it has compared the bytes).
    pub fn write(&self, pod: &Pod, manifest: PodManifest) -> Result<Arc<PodManifest>> {
        let bytes = pod.write_manifest(&manifest)?;
        let manifest = Arc::new(manifest);
        if let Ok(mut entries) = self.entries.lock() {
            // a stamp no file has: the next read compares the bytes
            let stamp = Stamp { ino: 0, size: u64::MAX, mtime_ns: 0, ctime_ns: 0 };
            entries.insert(pod.uuid(), Entry { stamp, read_at_ns: 0, bytes, manifest: manifest.clone() });
        }
        Ok(manifest)
    }

    /// Drops the entries of pods that no longer exist (after a full listing).
    pub fn retain(&self, present: &HashSet<Uuid>) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|uuid, _| present.contains(uuid));
        }
    }

    pub fn len(&self) -> usize {
        self.entries.lock().map(|e| e.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::DataDir;

    /// A pod being prepared, with an empty manifest.
    fn preparing_pod(dir: &std::path::Path) -> Pod {
        let data = DataDir::new(dir.join("data"));
        let mut pod = Pod::create(&data).expect("create");
        pod.to_preparing().expect("prepare");
        pod.write_initial(&PodManifest::mutable()).expect("manifest");
        pod
    }

    #[test]
    fn a_rewritten_manifest_is_read_again_and_an_unchanged_one_is_shared() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut pod = preparing_pod(tmp.path());
        let cache = ManifestCache::default();
        // just written: not trusted by its stamp, but its bytes match the parse
        let fresh = cache.read(&pod).expect("read");
        assert!(Arc::ptr_eq(&fresh, &cache.read(&pod).expect("read")), "not settled, but the same bytes");
        std::thread::sleep(SETTLED * 2);
        let first = cache.read(&pod).expect("read");
        assert!(Arc::ptr_eq(&first, &cache.read(&pod).expect("read")), "unchanged: the parsed copy is reused");

        let mut changed = (*first).clone();
        changed.user_labels.insert("k".into(), "v".into());
        pod.write_manifest(&changed).expect("write");
        let second = cache.read(&pod).expect("read");
        assert_eq!(second.user_labels.get("k").map(String::as_str), Some("v"));
        std::thread::sleep(SETTLED * 2);
        let second = cache.read(&pod).expect("read");

        // the pod moves between state directories: same file, still cached
        pod.to_run().expect("run");
        assert!(Arc::ptr_eq(&second, &cache.read(&pod).expect("read")));

        cache.retain(&HashSet::new());
        assert!(cache.is_empty());
        std::fs::remove_file(pod.manifest_path()).expect("rm");
        assert!(matches!(cache.read(&pod), Err(PodError::NotFound(_))));
    }

    #[test]
    fn the_daemons_own_write_is_not_parsed_again_and_anothers_is() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let pod = preparing_pod(tmp.path());
        let cache = ManifestCache::default();
        let mut changed = (*cache.read(&pod).expect("read")).clone();
        changed.user_labels.insert("k".into(), "1".into());
        let written = cache.write(&pod, changed.clone()).expect("write");
        assert!(Arc::ptr_eq(&written, &cache.read(&pod).expect("read")), "the same bytes: the kept parse");
        // another process rewrites it at once (same size, maybe the same timestamps)
        changed.user_labels.insert("k".into(), "2".into());
        pod.write_manifest(&changed).expect("write");
        let read = cache.read(&pod).expect("read");
        assert_eq!(read.user_labels.get("k").map(String::as_str), Some("2"));
    }
}
