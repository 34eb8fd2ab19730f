//! Parsed pod manifests kept by the daemon between calls, checked against
//! the file at every read ([`crate::base::filecache`] says how).

use crate::base::filecache::{FileCache, ReadError};
use rkt::pod::{Pod, PodError, Result};
use rkt::schema::PodManifest;
use std::collections::HashSet;
use std::sync::Arc;
use uuid::Uuid;

#[derive(Debug, Default)]
pub(crate) struct ManifestCache {
    files: FileCache<Uuid, PodManifest>,
}

impl ManifestCache {
    /// The pod's manifest, parsed only if the file changed since last time.
    pub(crate) fn read(&self, pod: &Pod) -> Result<Arc<PodManifest>> {
        let path = pod.manifest_path();
        self.files.read(&pod.uuid(), &path, |bytes| serde_json::from_slice(bytes)).map_err(|e| match e {
            ReadError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => PodError::NotFound(pod.uuid().to_string()),
            ReadError::Io(source) => PodError::Io { context: format!("reading {}", path.display()), source },
            ReadError::Parse(source) => PodError::Manifest { uuid: pod.uuid(), source },
        })
    }

    /// Writes the pod's manifest ([`Pod::write_manifest`]) and keeps it, so
    /// the next read finds it parsed (once it has compared the bytes).
    pub(crate) fn write(&self, pod: &Pod, manifest: PodManifest) -> Result<Arc<PodManifest>> {
        let bytes = pod.write_manifest(&manifest)?;
        Ok(self.files.keep(pod.uuid(), bytes, manifest))
    }

    /// Drops the entries of pods that no longer exist (after a full listing).
    pub(crate) fn retain(&self, present: &HashSet<Uuid>) {
        self.files.retain(|uuid| present.contains(uuid));
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::filecache::SETTLED;
    use rkt::pod::DataDir;

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
