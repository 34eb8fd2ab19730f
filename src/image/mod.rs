//! Images: references, the registry client, verification, rkt's CAS and tree
//! store, and docker-to-ACI conversion. Only this module writes `$D/cas`.
//!
//! How a docker image is stored (see `convert.rs` and `cas.rs`):
//! - each layer is an ACI of its own, stored as rkt stores ACIs: its blob
//!   is the uncompressed ACI tar (`manifest` first, files under `rootfs/`),
//!   its key rkt's (`sha512-` + 64 hex of the SHA-512 of those bytes). The
//!   pull computes the key by hashing the ACI rendition of the layer while
//!   it unpacks it (`rkt::layer_aci`), and keeps the download in
//!   `cas/rktlet-layers/<key>`; a background thread writes the ACI from it
//!   (in `cas/tmp/pull-*`, checked against the key, renamed into place)
//!   and deletes the download. Renders read whichever is there. Blobs of
//!   older releases (the layer's tar, keyed by the uncompressed tar) still
//!   render the images that name them; a pull of such a layer makes its
//!   ACI from that blob (a hard link serves as its download).
//! - the image is a small genuine ACI (`manifest` + empty `rootfs/`) whose
//!   manifest carries the app and lists the layers as `dependencies`; its key
//!   is the image ID shown to CRI.
//! - the tree `cas/tree/<treeStoreID>/` (rkt's id: `convert::tree_id`) is
//!   rendered at pull time and moved into place whole, marked not synced;
//!   an empty `rendered` is created last. rkt's tree hash goes into `hash`
//!   later, in the background (`tree.rs`).
//!
//! Durability: blobs, manifests and the index are fsynced; trees are synced
//! in the background, off the pull. A tree is derived data (its layers'
//! blobs are kept), and syncing 50 MiB of extracted files made a pull wait
//! for the disk. A crash that reboots the machine before that sync can lose
//! tree files still in the page cache: such a tree carries the previous
//! boot's id in its `rktlet-unsynced` marker and is rendered again from the
//! blobs when next used (`Store::tree`, `Cas::tree_rendered`). A daemon crash
//! without a reboot loses nothing (the page cache survives it).
//!
//! A pull is visible only once the index says so: blobs are renamed into
//! place after verification, the tree is renamed into place whole, and the
//! index transaction comes last. Work in progress lives in `cas/tmp/pull-*`
//! (each with a held lock file), removed by the next pull or gc after a crash.
//!
//! rkt's own index `cas/db/ql.db` (`ql/`), when there is one: the images it
//! lists and `index.json` does not are listed and resolved too, and left to
//! rkt to remove; rktlet's index changes are written into it as well.

pub(crate) mod aci;
pub mod auth;
pub mod convert;
pub mod discovery;
pub(crate) mod fsck;
pub(crate) mod hosts;
pub mod layer;
pub mod layer_aci;
pub mod oci;
pub(crate) mod policy;
mod pull;
pub(crate) mod registry;
mod workdir;

use crate::base::filecache::{FileCache, ReadError};
pub use auth::Credentials;
pub use hosts::RegistryConfig;
pub use pull::Progress;
use registry::{RegistryClient, RegistryError};
use rkt::cas::{Cas, Index};
use rkt::pod::{DataDir, PodDir};
use rkt::reference::Reference;
use rkt::schema::{self as pod_manifest, ImageManifest};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Reference(#[from] rkt::reference::ReferenceError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("image {0:?} not found in the store")]
    NotFound(String),
    #[error("image id prefix {0:?} is ambiguous")]
    Ambiguous(String),
    #[error("{what} failed verification: {detail}; nothing was stored")]
    Verify { what: String, detail: String },
    #[error("{0}")]
    Unsupported(String),
    #[error(transparent)]
    Extract(#[from] rkt::extract::ExtractError),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("image store task failed: {0}")]
    Task(String),
    #[error(transparent)]
    Discovery(#[from] discovery::DiscoveryError),
    /// The image is needed by another image.
    #[error("{0}")]
    InUse(String),
    /// The signature policy refused the image.
    #[error("{0}")]
    Policy(String),
    /// An image volume's sub path is not a directory of the image.
    #[error("{0}")]
    InvalidVolume(String),
    #[error(transparent)]
    PolicyFile(#[from] policy::PolicyError),
    /// The registry stopped sending or closed the connection mid-blob.
    #[error("{0}")]
    Network(String),
}

/// An ACI that cannot be read is what it was before `rkt::aci` read it:
/// an unsupported image, or an I/O error with its context.
impl From<rkt::aci::AciError> for ImageError {
    fn from(e: rkt::aci::AciError) -> Self {
        match e {
            rkt::aci::AciError::Unsupported(detail) => ImageError::Unsupported(detail),
            rkt::aci::AciError::Io { context, source } => ImageError::Io { context, source },
        }
    }
}

pub(crate) fn io_ctx(context: impl Into<String>) -> impl FnOnce(io::Error) -> ImageError {
    let context = context.into();
    move |source| ImageError::Io { context, source }
}

/// An image in the store, with the names it was pulled by.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// The image key, `sha512-...` (71 characters).
    pub id: String,
    pub manifest: ImageManifest,
    /// `domain/path:tag` for every tag it was pulled by.
    pub tags: Vec<String>,
    /// `domain/path@sha256:...`.
    pub digests: Vec<String>,
    /// Its content's size: a docker image's layers as downloaded
    /// (compressed), an ACI's blob.
    pub size: u64,
    pub import_time: i64,
    pub last_used: i64,
}

impl Image {
    /// What names the image's content, whatever registry or tag it came
    /// through: the digest of a docker image's config (`sha256:...`, which
    /// its ACI records as `appc.io/docker/imageid`), as containerd names an
    /// image; else (an ACI, an image fetched by rkt without it) the key.
    /// rkt's key stays the store's: an image pulled from two registries is
    /// two ACIs, two keys, one content id.
    pub(crate) fn content_id(&self) -> &str {
        content_id(&self.manifest, &self.id)
    }

    /// The user the image runs as: (uid if numeric, username otherwise).
    pub fn user(&self) -> (Option<i64>, String) {
        let user = self.manifest.app.as_ref().map(|a| a.user.clone()).unwrap_or_default();
        match user.parse::<i64>() {
            Ok(uid) => (Some(uid), String::new()),
            Err(_) => (None, user),
        }
    }

    /// The layer keys, bottom first.
    /// The keys of a docker image's layers, bottom first (empty for ACIs).
    pub fn layer_keys(&self) -> Vec<String> {
        self.manifest
            .dependencies
            .iter()
            .filter(|d| d.image_name.starts_with(rkt::index::LAYER_NAME_PREFIX))
            .filter_map(|d| d.image_id.clone())
            .collect()
    }

    /// The keys of every direct dependency: layers, or ACIs this one builds on.
    pub fn dependency_keys(&self) -> Vec<String> {
        self.manifest.dependencies.iter().filter_map(|d| d.image_id.clone()).collect()
    }

    /// The tree id releases before rkt's dependency order used
    /// ([`convert::legacy_tree_id`]).
    pub fn legacy_tree_id(&self) -> String {
        convert::legacy_tree_id(&self.id, &self.dependency_keys())
    }
}

/// A rendered tree: `cas/tree/<id>/` with `rootfs/` ready to be an overlay lower dir.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    pub id: String,
    pub path: PathBuf,
    pub image_id: String,
    pub manifest: ImageManifest,
}

impl Tree {
    pub fn rootfs(&self) -> PathBuf {
        self.path.join("rootfs")
    }

    /// Its image's content id ([`Image::content_id`]).
    pub(crate) fn content_id(&self) -> &str {
        content_id(&self.manifest, &self.image_id)
    }
}

/// The content id of the image with `manifest` and key `key`.
fn content_id<'a>(manifest: &'a ImageManifest, key: &'a str) -> &'a str {
    manifest.annotation(convert::ANN_IMAGE_ID).filter(|d| is_content_id(d)).unwrap_or(key)
}

/// What `gc` removed.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct GcReport {
    pub trees: Vec<String>,
    pub images: Vec<String>,
    pub layers: Vec<String>,
    pub tmp: usize,
}

/// The image store of one data dir.
#[derive(Debug, Clone)]
pub struct Store {
    data: DataDir,
    cas: Cas,
    registry: Arc<RegistryClient>,
    /// The signature policy file, read at every pull (a missing file accepts
    /// anything unless it was named explicitly).
    policy_path: Option<(PathBuf, bool)>,
    /// The index and image manifests as last parsed (checked against the
    /// files at every read).
    parsed: Arc<Parsed>,
}

#[derive(Debug, Default)]
struct Parsed {
    index: FileCache<(), Index>,
    manifests: FileCache<String, ImageManifest>,
    /// rkt's tables in `cas/db/ql.db` (`ql.rs`).
    rkt: FileCache<(), rkt::ql::Tables>,
    /// rktlet's index with rkt's images added, for the versions it was made of.
    merged: std::sync::Mutex<Option<Merged>>,
    /// The last error reading rkt's database (logged once).
    rkt_error: std::sync::Mutex<Option<String>>,
}

#[derive(Debug)]
struct Merged {
    own: Arc<Index>,
    rkt: Arc<rkt::ql::Tables>,
    index: Arc<Index>,
}

/// How stale an image's `lastused` may get before a use records it: the
/// record is an fsynced index rewrite, too slow for every CreateContainer,
/// and image gc counts in hours.
const LAST_USED_STEP_NANOS: i64 = 60 * 1_000_000_000;

impl Store {
    /// Opens (creating if needed) the store of `data` with a registry config.
    pub fn open(data: &DataDir, config: RegistryConfig) -> Result<Store, ImageError> {
        let cas = Cas::new(data.cas());
        cas.ensure().map_err(io_ctx(format!("creating the image store in {}", cas.root().display())))?;
        Ok(Store {
            data: data.clone(),
            cas,
            registry: Arc::new(RegistryClient::new(config)?),
            policy_path: None,
            parsed: Arc::default(),
        })
    }

    /// Checks registry pulls against the signature policy at `path`
    /// (`policy.rs`), read at every pull so an edit applies to the next one.
    /// Fails now if the file is there but invalid.
    /// `required`: the file must exist (it was named explicitly).
    pub fn with_policy(mut self, (path, required): (PathBuf, bool)) -> Result<Store, ImageError> {
        policy::Policy::load(&path, required)?;
        self.policy_path = Some((path, required));
        Ok(self)
    }

    /// The signature policy in force now.
    pub(crate) fn policy(&self) -> Result<policy::Policy, ImageError> {
        match &self.policy_path {
            Some((p, required)) => Ok(policy::Policy::load(p, *required)?),
            None => Ok(policy::Policy::default()),
        }
    }

    pub fn cas(&self) -> &Cas {
        &self.cas
    }

    /// The index as last committed, with the images rkt's own database
    /// (`cas/db/ql.db`) lists and rktlet's does not. An unreadable rkt
    /// database is logged and left out.
    fn index(&self) -> Result<Arc<Index>, ImageError> {
        let own = self.own_index()?;
        let rkt = match self.rkt_tables() {
            Ok(Some(t)) => t,
            Ok(None) => return Ok(own),
            Err(e) => {
                let e = e.to_string();
                if let Ok(mut last) = self.parsed.rkt_error.lock()
                    && last.as_deref() != Some(e.as_str())
                {
                    tracing::warn!(error = %e, "rkt's image database left out");
                    *last = Some(e);
                }
                return Ok(own);
            }
        };
        if let Ok(m) = self.parsed.merged.lock()
            && let Some(m) = m.as_ref()
            && Arc::ptr_eq(&m.own, &own)
            && Arc::ptr_eq(&m.rkt, &rkt)
        {
            return Ok(m.index.clone());
        }
        let mut merged = (*own).clone();
        let index = if rkt::ql::merge_into(&mut merged, &rkt) { Arc::new(merged) } else { own.clone() };
        if let Ok(mut m) = self.parsed.merged.lock() {
            *m = Some(Merged { own, rkt, index: index.clone() });
        }
        Ok(index)
    }

    /// rkt's tables, read under its lock (parsed again only when the file changed).
    fn rkt_tables(&self) -> Result<Option<Arc<rkt::ql::Tables>>, rkt::ql::QlError> {
        rkt::ql::with_db(&self.cas.root().join("db"), |path| {
            self.parsed.rkt.read(&(), path, rkt::ql::parse).map_err(|e| match e {
                ReadError::Io(source) => {
                    rkt::ql::QlError::Io { context: format!("reading {}", path.display()), source }
                }
                ReadError::Parse(e) => e,
            })
        })
    }

    /// Whether `key` is an image only rkt's database lists.
    /// Whether image `key` is rkt's alone: in rkt's database, not in
    /// rktlet's index. A key rktlet's index lacks is decided again under the
    /// index's lock, against rkt's database as it is then: a removal by
    /// rktlet writes its index, then rkt's database, and a concurrent call
    /// could see the one without the other (critest's simultaneous
    /// RemoveImage calls did). NotFound when neither has it any more.
    fn rkt_only(&self, key: &str) -> Result<bool, ImageError> {
        if self.own_index()?.aci(key).is_some() {
            return Ok(false);
        }
        let db = self.cas.root().join("db");
        let _lock = rkt::lock::exclusive_dir(&db).map_err(io_ctx("locking the image index"))?;
        if self.own_index()?.aci(key).is_some() {
            return Ok(false);
        }
        let rkt_has = match fs::read(db.join(rkt::ql::DB_FILE)) {
            Ok(bytes) => rkt::ql::parse(&bytes).is_ok_and(|t| t.aciinfo.iter().any(|a| a.blobkey == key)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(io_ctx("reading rkt's image database")(e)),
        };
        if rkt_has { Ok(true) } else { Err(ImageError::NotFound(key.to_string())) }
    }

    /// rktlet's own index (parsed again only when it changed).
    fn own_index(&self) -> Result<Arc<Index>, ImageError> {
        let path = self.cas.index_path();
        match self.parsed.index.read(&(), &path, |bytes| serde_json::from_slice(bytes)) {
            Ok(index) => Ok(index),
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound => Ok(Arc::default()),
            Err(ReadError::Io(e)) => Err(io_ctx("reading the image index")(e)),
            Err(ReadError::Parse(e)) => {
                Err(io_ctx("parsing the image index")(io::Error::new(io::ErrorKind::InvalidData, e)))
            }
        }
    }

    /// Pulls `reference` (rendering its tree) and returns the image.
    pub async fn pull(
        &self,
        reference: &str,
        creds: Credentials,
        progress: Option<Progress>,
    ) -> Result<Image, ImageError> {
        let r: Reference = reference.parse()?;
        pull::pull(self, &r, creds, progress).await
    }

    /// Finds an image by id (`sha512-` prefix, at least 9 characters), by
    /// its content id (`sha256:` and the config's 64 hex digits: the
    /// newest of the images that have it) or by a docker reference it was
    /// pulled as (tag or digest).
    pub fn resolve(&self, reference_or_id: &str) -> Result<Image, ImageError> {
        if is_content_id(reference_or_id) {
            return self
                .with_content(reference_or_id)?
                .pop()
                .ok_or_else(|| ImageError::NotFound(reference_or_id.to_string()));
        }
        let index = self.index()?;
        let key = match resolve_key(&index, reference_or_id) {
            Ok(key) => key,
            // rkt's image string: an ACI by its manifest's name and version label
            Err(e) => self.aci_by_name(&index, reference_or_id)?.ok_or(e)?,
        };
        self.image_from(&index, &key)
    }

    /// The key of the ACI rkt's image string `name[:version]` names (as `rkt
    /// app add` and `rkt run` take it): an image whose manifest is named
    /// `name`, with the label `version` when one is given; of several, the
    /// newest import. None when there is none.
    fn aci_by_name(&self, index: &Index, s: &str) -> Result<Option<String>, ImageError> {
        let (name, version) = match s.rsplit_once(':') {
            Some((name, version)) if !version.contains('/') && !version.is_empty() => (name, Some(version)),
            _ => (s, None),
        };
        let mut found: Option<&rkt::cas::AciInfo> = None;
        for row in index.aciinfo.iter().filter(|a| !a.is_layer() && a.name == name) {
            if let Some(v) = version {
                match self.read_manifest(&row.blobkey) {
                    Ok(m) if m.label("version") == Some(v) => {}
                    Ok(_) | Err(ImageError::NotFound(_)) => continue,
                    Err(e) => return Err(e),
                }
            }
            if found.is_none_or(|f| row.importtime > f.importtime) {
                found = Some(row);
            }
        }
        Ok(found.map(|a| a.blobkey.clone()))
    }

    /// Every image whose content id is `content_id`, oldest first.
    pub(crate) fn with_content(&self, content_id: &str) -> Result<Vec<Image>, ImageError> {
        Ok(self.list()?.into_iter().filter(|i| i.content_id() == content_id).collect())
    }

    /// The image `reference_or_id` names ([`Store::resolve`]) with every
    /// other of the same content (pulled from another registry, repository
    /// or mirror), oldest first; empty when there is none.
    pub(crate) fn resolve_content(&self, reference_or_id: &str) -> Result<Vec<Image>, ImageError> {
        match self.resolve(reference_or_id) {
            Ok(image) if image.content_id() != image.id => self.with_content(image.content_id()),
            Ok(image) => Ok(vec![image]),
            Err(ImageError::NotFound(_)) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Every image, grouped by content id (each group oldest first, the
    /// groups in the order of their oldest).
    pub(crate) fn list_by_content(&self) -> Result<Vec<Vec<Image>>, ImageError> {
        Ok(group_by_content(self.list()?))
    }

    /// Removes the image `reference_or_id` names and every other of the same
    /// content, with all their names, as [`Store::remove`] removes one (a
    /// CRI RemoveImage: containerd removes every reference to the image).
    /// The keys removed; empty when there was no such image.
    pub(crate) fn remove_content(&self, reference_or_id: &str) -> Result<Vec<String>, ImageError> {
        let mut removed = Vec::new();
        let images = match self.resolve_content(reference_or_id) {
            Ok(images) => images,
            // (gone while its content's images were read)
            Err(ImageError::NotFound(_)) => Vec::new(),
            Err(e) => return Err(e),
        };
        for image in images {
            match self.remove(&image.id) {
                Ok(key) => removed.extend(key),
                // removed meanwhile by a concurrent call: RemoveImage is
                // idempotent (critest v1.36's simultaneous RemoveImage calls)
                Err(ImageError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(removed)
    }

    fn image_from(&self, index: &Index, key: &str) -> Result<Image, ImageError> {
        let row = index.aci(key).ok_or_else(|| ImageError::NotFound(key.to_string()))?;
        let manifest = self.read_manifest(key)?;
        let mut tags = Vec::new();
        let mut digests = Vec::new();
        for r in index.remotes_of(key) {
            let name = r.aciurl.trim_start_matches("docker://").to_string();
            if name.contains('@') { digests.push(name) } else { tags.push(name) }
        }
        tags.sort();
        digests.sort();
        let mut image = Image {
            id: key.to_string(),
            manifest,
            tags,
            digests,
            size: row.size.max(0) as u64,
            import_time: row.importtime,
            last_used: row.lastused,
        };
        // a docker image's content is its layers: the sizes its manifest
        // lists (as downloaded), not its own few-KiB ACI that the index
        // records as rkt does
        let layers: Vec<&pod_manifest::Dependency> = image
            .manifest
            .dependencies
            .iter()
            .filter(|d| d.image_name.starts_with(rkt::index::LAYER_NAME_PREFIX))
            .collect();
        if !layers.is_empty() {
            image.size = layers.iter().map(|d| d.size).sum();
            if image.size == 0 {
                // no sizes listed: the image's stored layer blobs
                image.size = image.layer_keys().iter().filter_map(|k| index.aci(k)).map(|a| a.size.max(0) as u64).sum();
            }
        }
        Ok(image)
    }

    pub fn read_manifest(&self, key: &str) -> Result<ImageManifest, ImageError> {
        let path = self.cas.image_manifest(key);
        let parsed =
            self.parsed.manifests.read(&key.to_string(), &path, |bytes| serde_json::from_slice(bytes)).map_err(
                |e| match e {
                    ReadError::Io(e) if e.kind() == io::ErrorKind::NotFound => ImageError::NotFound(key.to_string()),
                    ReadError::Io(e) => io_ctx(format!("reading {}", path.display()))(e),
                    ReadError::Parse(e) => io_ctx(format!("parsing {}", path.display()))(io::Error::other(e)),
                },
            )?;
        Ok((*parsed).clone())
    }

    /// rkt's flattened dependency list of an image
    /// ([`convert::dependency_list`]), its manifests read from the store.
    pub fn dependency_list(&self, image: &Image) -> Result<Vec<String>, ImageError> {
        convert::dependency_list(&image.id, &image.manifest, |k| self.read_manifest(k).ok())
            .map_err(|e| ImageError::Unsupported(format!("{}: {e}", image.manifest.name)))
    }

    /// rkt's tree store id of an image (`deps-` + the key of its flattened
    /// dependency list).
    pub fn tree_id(&self, image: &Image) -> Result<String, ImageError> {
        Ok(convert::tree_id(&self.dependency_list(image)?))
    }

    /// Every image (not layers), oldest import first.
    pub fn list(&self) -> Result<Vec<Image>, ImageError> {
        let index = self.index()?;
        // a full listing: parsed manifests of images no longer stored go
        self.parsed.manifests.retain(|key| index.aciinfo.iter().any(|a| &a.blobkey == key));
        let mut rows: Vec<_> = index.aciinfo.iter().filter(|a| !a.is_layer()).collect();
        rows.sort_by_key(|a| a.importtime);
        rows.iter()
            .filter_map(|a| match self.image_from(&index, &a.blobkey) {
                // removed by rkt (`rkt image rm` takes the manifest and the
                // blob, and its own row): not listed, as rkt no longer lists it
                Err(ImageError::NotFound(_)) => None,
                other => Some(other),
            })
            .collect()
    }

    /// The rendered tree of an image, rendering it from the stored layers if
    /// needed (blocking; call from a blocking thread). Marks the image used
    /// (at most once a minute: [`LAST_USED_STEP_NANOS`]).
    pub fn tree(&self, reference_or_id: &str) -> Result<Tree, ImageError> {
        let image = self.resolve(reference_or_id)?;
        let id = self.tree_id(&image)?;
        let path = self.cas.tree(&id);
        if !self.cas.tree_rendered(&id) {
            pull::render_stored(self, &image)?;
        }
        let now = crate::base::time::now_nanos();
        if now - image.last_used >= LAST_USED_STEP_NANOS {
            self.cas
                .update_index(|i| {
                    if let Some(a) = i.aciinfo.iter_mut().find(|a| a.blobkey == image.id) {
                        a.lastused = now;
                    }
                })
                .map_err(io_ctx("updating the image index"))?;
        }
        Ok(Tree { id, path, image_id: image.id, manifest: image.manifest })
    }

    /// The source of an image volume (CRI `Mount.image`, KEP-4639): the
    /// image's rendered tree, or `sub_path` inside it, which must be a
    /// directory of the image (no `..`, no link leading out of it). The
    /// image must have been pulled; it is marked used.
    pub(crate) fn volume_source(&self, reference: &str, sub_path: &str) -> Result<ImageVolume, ImageError> {
        let tree = self.tree(reference)?;
        let rootfs = tree.rootfs();
        let mut source = rootfs.clone();
        if !sub_path.is_empty() {
            let relative = Path::new(sub_path);
            if relative.is_absolute() || relative.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
                return Err(ImageError::InvalidVolume(format!(
                    "image volume sub path {sub_path:?} of {reference}: a relative path without `..` is needed"
                )));
            }
            // the image's own links resolve on the host: they may not lead out
            let resolved = fs::canonicalize(rootfs.join(relative)).map_err(|e| {
                ImageError::InvalidVolume(format!("image volume sub path {sub_path:?} of {reference}: {e}"))
            })?;
            let root = fs::canonicalize(&rootfs).map_err(io_ctx(format!("resolving {}", rootfs.display())))?;
            if !resolved.starts_with(&root) || !resolved.is_dir() {
                return Err(ImageError::InvalidVolume(format!(
                    "image volume sub path {sub_path:?} of {reference} is not a directory of the image"
                )));
            }
            source = resolved;
        }
        Ok(ImageVolume { image_id: tree.image_id, tree_id: tree.id, source })
    }

    /// Removes an image (by id, tag or digest) with all its names, its tree
    /// when no pod uses it, and the layers no other image needs. `Ok(None)`
    /// when there was no such image (removal is idempotent). An image a
    /// container has as a volume stays (`InUse`).
    pub fn remove(&self, reference_or_id: &str) -> Result<Option<String>, ImageError> {
        let image = match self.resolve(reference_or_id) {
            Ok(i) => i,
            Err(ImageError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let rkt_only = match self.rkt_only(&image.id) {
            // removed meanwhile by a concurrent call
            Err(ImageError::NotFound(_)) => return Ok(None),
            other => other?,
        };
        if rkt_only {
            return Err(ImageError::InUse(format!(
                "image {} ({}) was fetched by rkt: remove it with `rkt image rm {}`",
                image.id, image.manifest.name, image.id
            )));
        }
        let _lock = self.cas.lock_image(&image.id).map_err(io_ctx("locking the image"))?;
        let used = self.used_by_pods();
        if let Some(app) = used.volume_images.get(&image.id) {
            return Err(ImageError::InUse(format!(
                "image {} ({}) is mounted as a volume by {app}: remove that container first",
                image.id, image.manifest.name
            )));
        }
        // checked inside the index update, which imports also pass through
        // last (they check their dependencies are still there in theirs)
        let dependent = self
            .cas
            .update_index(|i| {
                let dependent = i.aciinfo.iter().filter(|a| !a.is_layer() && a.blobkey != image.id).find_map(|a| {
                    // an unreadable manifest is not known to depend on it
                    let m = self.read_manifest(&a.blobkey).ok()?;
                    let uses = m.dependencies.iter().any(|d| d.image_id.as_deref() == Some(image.id.as_str()));
                    uses.then_some((a.blobkey.clone(), m.name))
                });
                if dependent.is_none() {
                    i.aciinfo.retain(|a| a.blobkey != image.id);
                    i.remote.retain(|r| r.blobkey != image.id);
                }
                dependent
            })
            .map_err(io_ctx("updating the image index"))?;
        if let Some((id, name)) = dependent {
            return Err(ImageError::InUse(format!(
                "image {} ({}) is a dependency of image {id} ({name}): remove that first",
                image.id, image.manifest.name
            )));
        }
        let _ = fs::remove_file(self.cas.blob(&image.id));
        let _ = fs::remove_file(self.cas.image_manifest(&image.id));
        // its tree, and one rendered under an older release's id
        let mut trees = vec![image.legacy_tree_id()];
        trees.extend(self.tree_id(&image).ok());
        for tree in trees {
            if !used.trees.contains(&tree) {
                self.remove_tree(&tree)?;
            }
        }
        self.remove_orphan_layers()?;
        Ok(Some(image.id))
    }

    fn remove_tree(&self, id: &str) -> Result<(), ImageError> {
        let _lock = self.cas.lock_tree(id).map_err(io_ctx("locking the tree"))?;
        let path = self.cas.tree(id);
        // unmark first: a half-removed tree must never look rendered
        let _ = fs::remove_file(path.join("rendered"));
        match fs::remove_dir_all(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_ctx(format!("removing {}", path.display()))(e)),
        }
    }

    /// Removes layers no image depends on; returns their keys.
    fn remove_orphan_layers(&self) -> Result<Vec<String>, ImageError> {
        let index = self.index()?;
        let mut needed = std::collections::HashSet::new();
        for a in index.aciinfo.iter().filter(|a| !a.is_layer()) {
            if let Ok(m) = self.read_manifest(&a.blobkey) {
                needed.extend(m.dependencies.into_iter().filter_map(|d| d.image_id));
            }
        }
        let orphans: Vec<String> = index
            .aciinfo
            .iter()
            .filter(|a| a.is_layer() && !needed.contains(&a.blobkey))
            .map(|a| a.blobkey.clone())
            .collect();
        if orphans.is_empty() {
            return Ok(orphans);
        }
        self.cas
            .update_index(|i| {
                i.aciinfo.retain(|a| !orphans.contains(&a.blobkey));
                i.layerdigest.retain(|l| !orphans.contains(&l.blobkey));
            })
            .map_err(io_ctx("updating the image index"))?;
        for k in &orphans {
            let _ = fs::remove_file(self.cas.blob(k));
            let _ = fs::remove_file(rkt::layer_aci::pending(&self.cas, k));
            let _ = fs::remove_file(self.cas.image_manifest(k));
        }
        Ok(orphans)
    }

    /// Trees and images referenced by pods that still exist (rkt: prepare,
    /// prepared, run and exited-garbage pods).
    pub(crate) fn used_by_pods(&self) -> UsedByPods {
        let mut used = UsedByPods::default();
        for dir in [PodDir::Prepare, PodDir::Prepared, PodDir::Run, PodDir::ExitedGarbage] {
            let Ok(pods) = fs::read_dir(self.data.pod_parent(dir)) else { continue };
            for pod in pods.flatten() {
                let p = pod.path();
                if let Ok(id) = fs::read_to_string(p.join("stage1TreeStoreID")) {
                    used.trees.insert(id.trim().to_string());
                }
                if let Ok(apps) = fs::read_dir(p.join("appsinfo")) {
                    for app in apps.flatten() {
                        if let Ok(id) = fs::read_to_string(app.path().join("treeStoreID")) {
                            used.trees.insert(id.trim().to_string());
                        }
                        let volumes = fs::read_to_string(app.path().join(IMAGE_VOLUMES)).unwrap_or_default();
                        for (image, tree) in volumes.lines().filter_map(|l| l.split_once(' ')) {
                            used.trees.insert(tree.to_string());
                            used.images.insert(image.to_string());
                            let who = format!(
                                "app {} of pod {}",
                                app.file_name().to_string_lossy(),
                                pod.file_name().to_string_lossy()
                            );
                            used.volume_images.insert(image.to_string(), who);
                        }
                    }
                }
                if let Ok(bytes) = fs::read(p.join("pod"))
                    && let Ok(m) = serde_json::from_slice::<rkt::schema::PodManifest>(&bytes)
                {
                    used.images.extend(m.apps.into_iter().map(|a| a.image.id));
                }
            }
        }
        used
    }

    /// rkt's `image gc`: under the prepare lock, removes trees no pod uses,
    /// images not used for `grace` and not used by pods (the rules are
    /// [`rkt::gc::collect_images`]), orphan layers and leftovers of
    /// interrupted pulls.
    pub fn gc(&self, grace: Duration) -> Result<GcReport, ImageError> {
        let locks = self.data.locks();
        fs::create_dir_all(&locks).map_err(io_ctx(format!("creating {}", locks.display())))?;
        let _prepare =
            rkt::lock::exclusive_file(&locks.join("prepareLock")).map_err(io_ctx("taking the prepare lock"))?;
        let mut report = GcReport { tmp: workdir::clean_tmp(&self.cas), ..Default::default() };
        let used = self.used_by_pods();
        if let Ok(trees) = fs::read_dir(self.cas.trees()) {
            for t in trees.flatten() {
                let id = t.file_name().to_string_lossy().into_owned();
                if !used.trees.contains(&id) {
                    self.remove_tree(&id)?;
                    report.trees.push(id);
                }
            }
        }
        let now = crate::base::time::now_nanos();
        // in import order, as listed: the rules judge them newest first
        let images = self
            .list()?
            .into_iter()
            .map(|i| rkt::gc::GcImage { dependencies: i.dependency_keys(), id: i.id, last_used: i.last_used })
            .collect();
        report.images = rkt::gc::collect_images(
            images,
            now,
            grace,
            &used.images,
            |id| {
                self.rkt_only(id).or_else(|e| match e {
                    // (removed meanwhile: remove says so, below)
                    ImageError::NotFound(_) => Ok(false),
                    e => Err(e),
                })
            },
            |id| Ok(self.remove(id)?.is_some()),
        )?;
        report.layers = self.remove_orphan_layers()?;
        Ok(report)
    }

    /// Removes the work directories of pulls that were cut short (their
    /// locks are free); returns how many.
    pub(crate) fn clean_leftovers(&self) -> usize {
        workdir::clean_tmp(&self.cas)
    }

    /// Bytes and inodes the store uses on disk.
    pub(crate) fn usage(&self) -> (u64, u64) {
        rkt::extract::usage(self.cas.root())
    }

    pub(crate) fn registry(&self) -> &RegistryClient {
        &self.registry
    }
}

/// Trees and images that pods reference.
#[derive(Debug, Default)]
pub(crate) struct UsedByPods {
    pub trees: std::collections::HashSet<String>,
    pub images: std::collections::HashSet<String>,
    /// Images mounted as volumes, and by which app of which pod.
    pub volume_images: std::collections::HashMap<String, String>,
}

/// The file in an app's `appsinfo/<app>/` that lists its image volumes, a
/// line `<image id> <tree id>` each (rktlet's own; rkt ignores it).
pub(crate) const IMAGE_VOLUMES: &str = "imageVolumes";

/// An image volume's source in the store ([`Store::volume_source`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ImageVolume {
    pub image_id: String,
    pub tree_id: String,
    pub source: PathBuf,
}

/// `images` grouped by content id ([`Image::content_id`]), each group and
/// the groups in the order given.
pub(crate) fn group_by_content(images: Vec<Image>) -> Vec<Vec<Image>> {
    let mut groups: Vec<Vec<Image>> = Vec::new();
    for image in images {
        match groups.iter_mut().find(|g| g[0].content_id() == image.content_id()) {
            Some(group) => group.push(image),
            None => groups.push(vec![image]),
        }
    }
    groups
}

/// Whether `s` is a content id: `sha256:` and 64 lowercase hex digits.
pub fn is_content_id(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// An image key from an id prefix or a reference.
fn resolve_key(index: &Index, s: &str) -> Result<String, ImageError> {
    if let Some(hex) = s.strip_prefix("sha512-") {
        let prefix: String = format!("sha512-{}", &hex[..hex.len().min(64)]);
        if prefix.len() < 9 {
            return Err(ImageError::Ambiguous(s.to_string()));
        }
        let found = index.images_with_prefix(&prefix);
        return match found.as_slice() {
            [] => Err(ImageError::NotFound(s.to_string())),
            [one] => Ok(one.blobkey.clone()),
            _ => Err(ImageError::Ambiguous(s.to_string())),
        };
    }
    if let Some(src) = s.strip_prefix(aci::ACI_PREFIX) {
        // an ACI by the file or URL it was fetched from
        let url = format!("{}{}", aci::ACI_PREFIX, src.strip_prefix("file://").unwrap_or(src));
        return index
            .remote
            .iter()
            .find(|x| x.aciurl == url)
            .map(|row| row.blobkey.clone())
            .ok_or_else(|| ImageError::NotFound(s.to_string()));
    }
    let r: Reference = s.parse()?;
    let url = format!("docker://{r}");
    if let Some(row) = index.remote.iter().find(|x| x.aciurl == url) {
        return Ok(row.blobkey.clone());
    }
    if let Some(d) = &r.digest {
        // the same content by digest, whatever tag or digest form it was pulled as
        let with = format!("docker://{}", r.with_digest(d));
        if let Some(row) = index.remote.iter().find(|x| x.aciurl == with) {
            return Ok(row.blobkey.clone());
        }
    }
    Err(ImageError::NotFound(s.to_string()))
}
