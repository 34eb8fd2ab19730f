//! The rows of the store's index (`db/index.json`): rkt's `aciinfo` and
//! `remote` tables and rktlet's `layerdigest`, as the CAS keeps them and
//! rkt's `ql.db` mirrors them; and how the CRI names an ACI.

use serde::{Deserialize, Serialize};

/// How CRI names an ACI: `aci:` + a file path, an https URL, or an appc
/// name (`name[:version][,label=value...]`).
pub const ACI_PREFIX: &str = "aci:";

/// The name prefix of a docker layer's ACI (`layer/<digest>`): a dependency
/// of images, never an image of its own.
pub const LAYER_NAME_PREFIX: &str = "layer/";

/// rkt's tables, and rktlet's `layerdigest`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Index {
    /// The file's format version; every change writes the current one (1).
    #[serde(default)]
    pub version: u32,
    /// rkt's `aciinfo` table: the ACIs in the CAS (images and docker layers).
    #[serde(default)]
    pub aciinfo: Vec<AciInfo>,
    /// rkt's `remote` table: the URLs images were fetched from.
    #[serde(default)]
    pub remote: Vec<Remote>,
    /// rktlet's `layerdigest`: registry blob digests of docker layers and their keys.
    #[serde(default)]
    pub layerdigest: Vec<LayerDigest>,
}

/// A row of rkt's `aciinfo` table: one ACI in the CAS.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AciInfo {
    /// The ACI's CAS key (`sha512-` and 64 hex characters).
    pub blobkey: String,
    /// The image's name (its manifest's `name`); `layer/...` for a docker layer.
    pub name: String,
    /// When it was imported, in Unix nanoseconds.
    pub importtime: i64,
    /// When it was last used, in Unix nanoseconds.
    pub lastused: i64,
    /// rkt's: it was fetched without a version asked for (the latest one).
    pub latest: bool,
    /// Bytes of the stored blob, as rkt records them (a docker image's own
    /// small ACI; a layer's uncompressed ACI, recorded at the pull, before
    /// the background task has written it).
    pub size: i64,
    /// rkt's size of the image's rendered tree (0 before it is rendered).
    pub treestoresize: i64,
    /// rktlet: an ACI whose signature was checked when it was imported
    /// (absent in older indexes: unverified).
    #[serde(default)]
    pub verified: bool,
}

/// A row of rkt's `remote` table: a URL an image was fetched from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Remote {
    /// `docker://<normalized reference>` (by tag and by digest).
    pub aciurl: String,
    /// The URL of the image's signature; empty if none.
    pub sigurl: String,
    /// The HTTP `ETag` of the download; empty if none.
    pub etag: String,
    /// The CAS key of the image fetched.
    pub blobkey: String,
    /// The HTTP `Cache-Control` `max-age` of the download, in seconds.
    pub cachemaxage: i64,
    /// When it was downloaded, in Unix nanoseconds.
    pub downloadtime: i64,
}

/// A row of rktlet's `layerdigest`: a docker layer's registry digest and the key of its ACI.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LayerDigest {
    /// The registry's digest of the blob as downloaded, e.g. `sha256:...`.
    pub digest: String,
    /// The CAS key of the layer's ACI.
    pub blobkey: String,
}

impl AciInfo {
    /// A docker layer's ACI (a dependency of images, not an image to list):
    /// named `layer/...`. Indexes of older releases also kept a `layer`
    /// column; it said the same and is no longer written (rkt has none).
    pub fn is_layer(&self) -> bool {
        self.name.starts_with(LAYER_NAME_PREFIX)
    }
}

impl Index {
    /// The `aciinfo` row of CAS key `key`.
    pub fn aci(&self, key: &str) -> Option<&AciInfo> {
        self.aciinfo.iter().find(|a| a.blobkey == key)
    }

    /// Adds `row`; for a key already indexed, takes its `lastused`, the larger
    /// `treestoresize`, and `verified` if `row` is.
    pub fn upsert_aci(&mut self, row: AciInfo) {
        match self.aciinfo.iter_mut().find(|a| a.blobkey == row.blobkey) {
            Some(a) => {
                a.lastused = row.lastused;
                a.treestoresize = row.treestoresize.max(a.treestoresize);
                a.verified |= row.verified;
            }
            None => self.aciinfo.push(row),
        }
    }

    /// Adds `row`, replacing the row of the same `aciurl`.
    pub fn upsert_remote(&mut self, row: Remote) {
        self.remote.retain(|r| r.aciurl != row.aciurl);
        self.remote.push(row);
    }

    /// The CAS key of the layer with registry digest `digest`.
    pub fn layer_key(&self, digest: &str) -> Option<&str> {
        self.layerdigest.iter().find(|l| l.digest == digest).map(|l| l.blobkey.as_str())
    }

    /// Maps `digest` to `key`, unless `digest` is mapped already.
    pub fn add_layer_digest(&mut self, digest: &str, key: &str) {
        if self.layer_key(digest).is_none() {
            self.layerdigest.push(LayerDigest { digest: digest.to_string(), blobkey: key.to_string() });
        }
    }

    /// Maps `digest` to `key`, replacing what it mapped to (a layer an older
    /// release stored under another key).
    pub fn set_layer_digest(&mut self, digest: &str, key: &str) {
        self.layerdigest.retain(|l| l.digest != digest);
        self.layerdigest.push(LayerDigest { digest: digest.to_string(), blobkey: key.to_string() });
    }

    /// Image keys (not layers) whose key starts with `prefix`.
    pub fn images_with_prefix(&self, prefix: &str) -> Vec<&AciInfo> {
        self.aciinfo.iter().filter(|a| !a.is_layer() && a.blobkey.starts_with(prefix)).collect()
    }

    /// The `remote` rows of CAS key `key`.
    pub fn remotes_of(&self, key: &str) -> impl Iterator<Item = &Remote> {
        self.remote.iter().filter(move |r| r.blobkey == key)
    }
}
