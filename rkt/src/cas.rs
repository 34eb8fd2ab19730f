//! rkt's CAS layout under `$D/cas` and rktlet's index of it.
//!
//! Paths: blobs at `blob/sha512/<k[7:9]>/<key>`, image manifests at
//! `imageManifest/sha512/<k[7:9]>/<key>`, trees at `tree/<treeStoreID>/`,
//! key-locks in `imagelocks/` and `treestorelocks/`, scratch in `tmp/`.
//!
//! The index (`db/index.json`) keeps rkt's `aciinfo` and `remote` tables (same
//! columns; times as Unix nanoseconds) plus `layerdigest` (registry blob
//! digest -> layer key, so a layer is found before it is downloaded). It is a
//! JSON file rewritten atomically while holding an exclusive flock on `db/`,
//! as rkt serializes its ql transactions; readers need no lock. Each change
//! is also written into rkt's own `db/ql.db`, in the same lock, which the
//! first change makes as rkt would when rkt never opened the store
//! (`ql::write::mirror_held`).

use crate::fs as fsutil;
use crate::lock::{self, HeldLock};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub use crate::index::{AciInfo, Index, LayerDigest, Remote};

/// The format version every change writes into `db/index.json`.
const INDEX_VERSION: u32 = 1;

/// The directories of one CAS.
#[derive(Debug, Clone)]
pub struct Cas {
    root: PathBuf,
}

impl Cas {
    /// The CAS at `root` (`$D/cas`); nothing is created.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Cas { root: root.into() }
    }

    /// The CAS directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates the CAS's directories (0750) that are missing. Idempotent.
    pub fn ensure(&self) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let mut b = fs::DirBuilder::new();
        b.recursive(true).mode(0o750);
        for d in ["blob/sha512", "imageManifest/sha512", "tree", "tmp", "db", "imagelocks", "treestorelocks"] {
            b.create(self.root.join(d))?;
        }
        Ok(())
    }

    fn sharded(&self, kind: &str, key: &str) -> PathBuf {
        let shard = key.get(7..9).unwrap_or("xx");
        self.root.join(kind).join("sha512").join(shard).join(key)
    }

    /// The blob (an ACI) of CAS key `key`: `blob/sha512/<key[7..9]>/<key>`.
    pub fn blob(&self, key: &str) -> PathBuf {
        self.sharded("blob", key)
    }

    /// The image manifest of CAS key `key`: `imageManifest/sha512/<key[7..9]>/<key>`.
    pub fn image_manifest(&self, key: &str) -> PathBuf {
        self.sharded("imageManifest", key)
    }

    /// The rendered tree `tree/<tree_id>`.
    pub fn tree(&self, tree_id: &str) -> PathBuf {
        self.root.join("tree").join(tree_id)
    }

    /// Whether tree `tree_id` can be used as it is: rendered, and either
    /// synced (rkt's trees; rktlet's once settled) or rendered in this boot
    /// (`tree.rs`). A tree rendered in another boot and never synced may have
    /// lost files in a crash: it is rendered again.
    pub fn tree_rendered(&self, tree_id: &str) -> bool {
        state(&self.tree(tree_id), boot_id()).usable()
    }

    /// Marks a tree directory that is not in place yet as rendered in this
    /// boot and not synced (before it is moved into place).
    pub fn mark_unsynced(tree_dir: &Path) -> io::Result<()> {
        fs::write(tree_dir.join(UNSYNCED), boot_id())
    }

    /// Marks a complete tree directory as rendered: an empty `rendered`, as rkt writes it.
    pub fn mark_rendered(tree_dir: &Path) -> io::Result<()> {
        fs::write(tree_dir.join("rendered"), "")
    }

    /// The directory of the rendered trees, `tree/`.
    pub fn trees(&self) -> PathBuf {
        self.root.join("tree")
    }

    /// Scratch space, `tmp/`.
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// `db/index.json`: rktlet's index of the store ([`crate::index`]).
    pub fn index_path(&self) -> PathBuf {
        self.root.join("db/index.json")
    }

    /// Key-lock on an image or blob (exclusive; held while it is fetched or removed).
    pub fn lock_image(&self, name: &str) -> io::Result<HeldLock> {
        lock::exclusive_file(&self.root.join("imagelocks").join(name))
    }

    /// Key-lock on a tree (exclusive while it is rendered or removed).
    pub fn lock_tree(&self, tree_id: &str) -> io::Result<HeldLock> {
        lock::exclusive_file(&self.root.join("treestorelocks").join(tree_id))
    }

    /// The index as last committed.
    pub fn read_index(&self) -> io::Result<Index> {
        match fs::read(self.index_path()) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Index::default()),
            Err(e) => Err(e),
        }
    }

    /// One transaction: exclusive lock on `db/`, read, change, atomic rewrite.
    pub fn update_index<T>(&self, change: impl FnOnce(&mut Index) -> T) -> io::Result<T> {
        let _lock = lock::exclusive_dir(&self.root.join("db"))?;
        let mut index = self.read_index()?;
        let before = index.clone();
        let out = change(&mut index);
        index.version = INDEX_VERSION;
        let bytes = serde_json::to_vec(&index).map_err(io::Error::other)?;
        // rkt's own database shows the same change, first: a reader without
        // the lock, or a restart after a crash between the two, never finds
        // an image in rkt's database that rktlet's index no longer has (it
        // would take it for rkt's)
        let stored = |key: &str| self.blob(key).exists();
        if let Err(e) = crate::ql::write::mirror_held(&self.root.join("db"), &before, &index, stored) {
            tracing::warn!(error = %e, "rkt's image database not updated");
        }
        fsutil::write_atomic(&self.index_path(), &bytes, 0o640)?;
        Ok(out)
    }
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`); empty if unreadable,
/// which still tells boots apart from each other as long as it stays readable.
pub fn boot_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
    })
}

/// rktlet's marker of a tree not yet synced; holds the boot id it was
/// rendered in. rkt does not know it (and removes it with the tree).
pub const UNSYNCED: &str = "rktlet-unsynced";

/// The state of a tree directory's markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeState {
    /// No (complete) `rendered`: render it (again).
    NotRendered,
    /// Rendered in another boot and never synced: render it again.
    OtherBoot,
    /// Rendered in this boot, not synced yet (usable; settled in the background).
    Unsynced,
    /// Rendered and durable (rkt's trees, settled ones): trusted.
    Settled,
}

impl TreeState {
    /// Whether a tree in this state is used as it is (unsynced in this boot, or settled).
    fn usable(self) -> bool {
        matches!(self, TreeState::Unsynced | TreeState::Settled)
    }
}

/// The markers of tree directory `dir`, judged against boot `boot`.
pub fn state(dir: &Path, boot: &str) -> TreeState {
    let rendered = match fs::read_to_string(dir.join("rendered")) {
        Ok(s) => s,
        Err(_) => return TreeState::NotRendered,
    };
    // a release before this one: the boot id in `rendered` itself
    let legacy = rendered.trim();
    let marker = match fs::read_to_string(dir.join(UNSYNCED)) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(_) => return TreeState::OtherBoot,
    };
    let unsynced_in = match (&marker, legacy.is_empty()) {
        (Some(m), _) => m.trim().to_string(),
        (None, false) => legacy.to_string(),
        (None, true) => return TreeState::Settled,
    };
    if unsynced_in == boot { TreeState::Unsynced } else { TreeState::OtherBoot }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_rkt() {
        let c = Cas::new("/d/cas");
        let k = format!("sha512-ab{}", "0".repeat(62));
        assert_eq!(c.blob(&k), PathBuf::from(format!("/d/cas/blob/sha512/ab/{k}")));
        assert_eq!(c.image_manifest(&k), PathBuf::from(format!("/d/cas/imageManifest/sha512/ab/{k}")));
    }

    #[test]
    fn index_transactions() {
        let t = tempfile::tempdir().expect("tmp");
        let c = Cas::new(t.path());
        c.ensure().expect("ensure");
        assert!(c.read_index().expect("empty").aciinfo.is_empty());
        c.update_index(|i| {
            i.upsert_aci(AciInfo {
                blobkey: "sha512-1".into(),
                name: "n".into(),
                importtime: 1,
                lastused: 1,
                latest: false,
                size: 3,
                treestoresize: 0,
                verified: false,
            });
            i.add_layer_digest("sha256:x", "sha512-2");
            i.add_layer_digest("sha256:x", "sha512-3");
        })
        .expect("update");
        let i = c.read_index().expect("read");
        assert_eq!(i.aci("sha512-1").map(|a| a.size), Some(3));
        assert_eq!(i.layer_key("sha256:x"), Some("sha512-2"));
        assert_eq!(i.images_with_prefix("sha512-").len(), 1);
    }

    #[test]
    fn an_older_index_with_its_layer_column_reads() {
        let k = |c: char| format!("sha512-{}", c.to_string().repeat(64));
        let old = format!(
            r#"{{"version":1,"aciinfo":[
              {{"blobkey":"{}","name":"layer/{}","importtime":1,"lastused":1,"latest":false,"size":9,"treestoresize":0,"layer":true}},
              {{"blobkey":"{}","name":"example.com/app","importtime":2,"lastused":2,"latest":true,"size":9,"treestoresize":5,"layer":false,"verified":true}}],
              "remote":[],"layerdigest":[]}}"#,
            k('1'),
            k('1'),
            k('a')
        );
        let i: Index = serde_json::from_str(&old).expect("older index");
        let layers: Vec<bool> = i.aciinfo.iter().map(AciInfo::is_layer).collect();
        assert_eq!(layers, [true, false]);
        assert_eq!(i.images_with_prefix("sha512-").len(), 1);
        let written = serde_json::to_string(&i).expect("write");
        assert!(!written.contains("\"layer\""), "{written}");
    }
}
