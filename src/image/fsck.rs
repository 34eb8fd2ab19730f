//! `rktlet image verify`: a consistency check of the image store, for after
//! a crash (or a doubt). What it checks, and what counts as a problem:
//! - every image in the index has its blob, and the blob's content still has
//!   its key (the SHA-512 of the uncompressed tar, as rkt keys its CAS), and
//!   its image manifest parses;
//! - every layer-digest and remote row names an image in the index;
//! - every usable tree (`tree.rs`) belongs to an indexed image under that
//!   image's tree id (or an older release's id for it), and a synced one has
//!   a `hash`; with `deep`, that hash is compared with rkt's tree hash of its
//!   contents (an older release's layer-chain hash is only noted) and its
//!   files with a fresh rendering from the blobs (types, modes, owners,
//!   sizes, contents, link targets);
//! - no leftover of an interrupted pull sits in `cas/tmp` (gc removes them;
//!   so does a daemon start).
//!
//! Not problems, only reported: layers whose ACI the background task has not
//! written yet (their downloads wait in `cas/rktlet-layers/`; renders check
//! them against their keys), blobs or downloads the index does not name (a pull killed
//! between storing its blobs and committing its index row; the next pull of
//! that image reuses them), trees rendered in another boot and never synced
//! (rendered again from the blobs on first use) and trees not synced yet.

use super::{ImageError, Store, io_ctx};
use rkt::cas::Cas;
use rkt::digest::{Algorithm, Hasher, cas_key, cas_key_of};
use rkt::tree::{self, TreeState};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

#[derive(Debug, Default, Serialize)]
pub(crate) struct Report {
    pub images: usize,
    pub blobs: usize,
    pub trees: usize,
    /// Trees compared file by file with a fresh rendering (`deep`).
    pub trees_compared: usize,
    /// What is wrong: the store does not pass.
    pub problems: Vec<String>,
    /// Worth knowing, not wrong.
    pub notes: Vec<String>,
}

impl Report {
    pub(crate) fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks the store; `deep` also compares every rendered tree with its blobs.
pub(crate) fn verify(store: &Store, deep: bool) -> Result<Report, ImageError> {
    let cas = store.cas();
    let index = cas.read_index().map_err(io_ctx("reading the image index"))?;
    let mut r = Report { images: index.aciinfo.iter().filter(|a| !a.is_layer()).count(), ..Default::default() };
    let indexed: HashSet<&str> = index.aciinfo.iter().map(|a| a.blobkey.as_str()).collect();
    for row in &index.aciinfo {
        r.blobs += 1;
        let waiting = rkt::layer_aci::pending(cas, &row.blobkey);
        if !cas.blob(&row.blobkey).exists() && waiting.exists() {
            r.notes.push(format!("layer {} waits for its ACI to be written (renders use its download)", row.blobkey));
            continue;
        }
        match blob_key(&cas.blob(&row.blobkey)) {
            Ok(key) if key == row.blobkey => {}
            Ok(key) => r.problems.push(format!("blob {} has the content of {key}", row.blobkey)),
            Err(e) => r.problems.push(format!("blob {}: {e}", row.blobkey)),
        }
        if let Err(e) = store.read_manifest(&row.blobkey) {
            r.problems.push(format!("image manifest of {}: {e}", row.blobkey));
        }
    }
    for l in &index.layerdigest {
        if !indexed.contains(l.blobkey.as_str()) {
            r.problems.push(format!("layer digest {} names {}, which is not in the index", l.digest, l.blobkey));
        }
    }
    for rem in &index.remote {
        if !indexed.contains(rem.blobkey.as_str()) {
            r.problems.push(format!("remote {} names {}, which is not in the index", rem.aciurl, rem.blobkey));
        }
    }
    let waiting = fs::read_dir(cas.root().join(rkt::layer_aci::PENDING_DIR))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned());
    for key in stored_keys(cas).into_iter().chain(waiting) {
        if !indexed.contains(key.as_str()) {
            r.notes.push(format!("blob {key} is not in the index (an interrupted pull; reused by the next one)"));
        }
    }
    // pull leftovers first: rendering for `deep` makes a work directory, and
    // making one clears leftovers
    for e in fs::read_dir(cas.tmp()).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(super::workdir::WORK_PREFIX)
            && !name.ends_with(".lock")
            && !super::workdir::tmp_in_use(cas, &name)
        {
            r.problems.push(format!("leftover of an interrupted pull: {}", e.path().display()));
        }
    }
    for id in fs::read_dir(cas.trees()).into_iter().flatten().flatten() {
        let id = id.file_name().to_string_lossy().into_owned();
        r.trees += 1;
        match tree::state(&cas.tree(&id), rkt::cas::boot_id()) {
            TreeState::NotRendered | TreeState::OtherBoot => {
                r.notes.push(format!(
                    "tree {id} is not rendered, or was not synced before a reboot (rendered again on first use)"
                ));
                continue;
            }
            TreeState::Unsynced => {
                r.notes.push(format!("tree {id} is not synced yet (its hash is written when it is)"));
                check_tree(store, &id, deep, false, &mut r);
            }
            TreeState::Settled => check_tree(store, &id, deep, true, &mut r),
        }
    }
    Ok(r)
}

/// Checks a usable tree: it belongs to an indexed image under that image's
/// tree id (or the id an older release gave it); a synced one has rkt's
/// `hash` of its contents (compared with `deep`, which also compares its
/// files with a fresh rendering).
fn check_tree(store: &Store, id: &str, deep: bool, synced: bool, r: &mut Report) {
    let dir = store.cas().tree(id);
    let image_key = fs::read_to_string(dir.join("image")).unwrap_or_default().trim().to_string();
    let image = match store.resolve(&image_key) {
        Ok(i) if !image_key.is_empty() => i,
        _ => {
            r.problems.push(format!("tree {id} is rendered for image {image_key:?}, which is not in the index"));
            return;
        }
    };
    let ids = [store.tree_id(&image).unwrap_or_default(), image.legacy_tree_id()];
    if !ids.iter().any(|t| t == id) {
        r.problems.push(format!("tree {id} is not the tree id of image {image_key}"));
        return;
    }
    if ids[0] != id {
        r.notes.push(format!(
            "tree {id} has the id an older release gave image {image_key} (gc removes it once no pod uses it)"
        ));
    }
    let hash = fs::read_to_string(dir.join("hash")).unwrap_or_default();
    if synced && hash.is_empty() {
        r.problems.push(format!("tree {id} has no hash"));
        return;
    }
    if !deep {
        return;
    }
    if synced {
        let rules = [tree::ModeRule::WithTypeBits, tree::ModeRule::PermissionsOnly];
        let computed: Result<Vec<String>, _> = rules.iter().map(|rule| tree::tree_hash(&dir, *rule)).collect();
        match computed {
            Ok(hashes) if hashes.contains(&hash) => {}
            // an older release's hash: the key of its layer chain
            Ok(_) if hash == cas_key_of(image.dependency_keys().join(",").as_bytes()) => {
                r.notes.push(format!("tree {id} has an older release's hash (not rkt's tree hash)"))
            }
            Ok(hashes) => {
                r.problems.push(format!("tree {id}: its hash {hash} is not that of its contents ({})", hashes[0]))
            }
            Err(e) => r.problems.push(format!("tree {id}: cannot hash its contents: {e}")),
        }
    }
    let rootfs = dir.join("rootfs");
    match super::pull::render_scratch(store, &image, |fresh| Ok((digest_tree(fresh)?, digest_tree(&rootfs)?))) {
        Ok((want, got)) => {
            r.trees_compared += 1;
            if let Some(diff) = first_difference(&want, &got) {
                r.problems.push(format!("tree {id} differs from its layers: {diff}"));
            }
        }
        Err(e) => r.problems.push(format!("tree {id}: cannot render its layers to compare: {e}")),
    }
}

/// The key of a stored blob: SHA-512 of its uncompressed content.
fn blob_key(path: &Path) -> io::Result<String> {
    let mut buffered = BufReader::with_capacity(256 * 1024, fs::File::open(path)?);
    let head = buffered.fill_buf()?;
    let mut plain: Box<dyn Read> = if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::bufread::MultiGzDecoder::new(buffered))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(zstd::Decoder::with_buffer(buffered)?)
    } else {
        Box::new(buffered)
    };
    let mut h = Hasher::new(Algorithm::Sha512);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = plain.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(cas_key(&h.finish()))
}

/// Every blob file's key.
fn stored_keys(cas: &Cas) -> Vec<String> {
    let root = cas.root().join("blob/sha512");
    let mut keys = Vec::new();
    for shard in fs::read_dir(root).into_iter().flatten().flatten() {
        for f in fs::read_dir(shard.path()).into_iter().flatten().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if rkt::digest::is_cas_key(&name) {
                keys.push(name);
            }
        }
    }
    keys
}

/// A description of every entry below `root`, by relative path.
fn digest_tree(root: &Path) -> Result<BTreeMap<String, String>, ImageError> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir).map_err(io_ctx(format!("reading {}", dir.display())))?;
        for e in entries {
            let e = e.map_err(io_ctx(format!("reading {}", dir.display())))?;
            let path = e.path();
            let m = fs::symlink_metadata(&path).map_err(io_ctx(format!("reading {}", path.display())))?;
            let t = m.file_type();
            let what = if t.is_dir() {
                stack.push(path.clone());
                "dir".to_string()
            } else if t.is_symlink() {
                let target = fs::read_link(&path).map_err(io_ctx(format!("reading {}", path.display())))?;
                format!("symlink {}", target.display())
            } else if t.is_file() {
                format!("file {} {}", m.len(), file_digest(&path)?)
            } else if t.is_char_device() || t.is_block_device() {
                format!("device {}", m.rdev())
            } else {
                "other".to_string()
            };
            let rel = path.strip_prefix(root).unwrap_or(&path).display().to_string();
            out.insert(rel, format!("{what} mode {:o} owner {}:{}", m.mode() & 0o7777, m.uid(), m.gid()));
        }
    }
    Ok(out)
}

fn file_digest(path: &Path) -> Result<String, ImageError> {
    let mut f = fs::File::open(path).map_err(io_ctx(format!("opening {}", path.display())))?;
    let mut h = Hasher::new(Algorithm::Sha256);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf).map_err(io_ctx(format!("reading {}", path.display())))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finish().to_string())
}

/// The first path whose description differs, with both sides.
fn first_difference(want: &BTreeMap<String, String>, got: &BTreeMap<String, String>) -> Option<String> {
    for (path, w) in want {
        match got.get(path) {
            None => return Some(format!("{path} is missing")),
            Some(g) if g != w => return Some(format!("{path} is {g}, its layers make {w}")),
            _ => {}
        }
    }
    got.keys().find(|p| !want.contains_key(*p)).map(|p| format!("{p} is not in its layers"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_are_named() {
        let m = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        let want: BTreeMap<String, String> = m(&[("a", "file 1 x"), ("b", "dir")]);
        assert_eq!(first_difference(&want, &want), None);
        assert_eq!(first_difference(&want, &m(&[("a", "file 1 x")])).as_deref(), Some("b is missing"));
        assert_eq!(
            first_difference(&want, &m(&[("a", "file 2 y"), ("b", "dir")])).as_deref(),
            Some("a is file 2 y, its layers make file 1 x")
        );
        assert_eq!(
            first_difference(&want, &m(&[("a", "file 1 x"), ("b", "dir"), ("c", "dir")])).as_deref(),
            Some("c is not in its layers")
        );
    }

    #[test]
    fn a_blob_key_is_the_hash_of_its_uncompressed_content() {
        let dir = tempfile::tempdir().expect("tmp");
        let plain = b"some tar bytes".repeat(1000);
        let gz = dir.path().join("gz");
        let mut enc =
            flate2::write::GzEncoder::new(fs::File::create(&gz).expect("create"), flate2::Compression::fast());
        io::Write::write_all(&mut enc, &plain).expect("write");
        enc.finish().expect("finish");
        let raw = dir.path().join("raw");
        fs::write(&raw, &plain).expect("write");
        assert_eq!(blob_key(&gz).expect("gz"), cas_key_of(&plain));
        assert_eq!(blob_key(&raw).expect("raw"), cas_key_of(&plain));
    }
}
