//! Docker layers stored as rkt stores them: each layer blob in `cas/blob`
//! is an ACI (an uncompressed tar, `manifest` first, the files under
//! `rootfs/`) whose SHA-512 is its key, its dependencies resolvable in the
//! index; rkt's renderer (appc's acirenderer rules, followed here) makes
//! the tree rktlet made; renders work from the ACIs once the downloads are
//! gone, and from a download still waiting; a store of the previous
//! layout (layer tars under the tar's key) keeps working after the upgrade.

mod common;

use common::registry::registry;
use rkt::cas::{AciInfo, Remote};
use rkt::digest::cas_key_of;
use rkt::pod::DataDir;
use rkt::schema::{Dependency, ImageManifest};
use rkt::tree;
use rktlet::image::{Credentials, RegistryConfig, Store, convert, layer_aci};
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io::Read;
use std::path::Path;

fn store() -> (tempfile::TempDir, Store) {
    let t = tempfile::tempdir().expect("tmp");
    let s = Store::open(&DataDir::new(t.path().join("data")), RegistryConfig::default()).expect("open store");
    (t, s)
}

/// (name, type flag) of each entry of an ACI, and its manifest.
fn read_aci(bytes: &[u8]) -> (Vec<(String, u8)>, ImageManifest) {
    let mut a = tar::Archive::new(bytes);
    let mut entries = Vec::new();
    let mut manifest = None;
    for e in a.entries().expect("entries") {
        let mut e = e.expect("entry");
        let name = e.path().expect("path").to_string_lossy().into_owned();
        if name == "manifest" {
            let mut json = Vec::new();
            e.read_to_end(&mut json).expect("manifest");
            manifest = Some(serde_json::from_slice(&json).expect("a valid image manifest"));
        }
        entries.push((name, e.header().entry_type().as_byte()));
    }
    (entries, manifest.expect("a manifest"))
}

/// Every path of a rendered rootfs, `rootfs/` + relative.
fn tree_paths(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("dir").flatten() {
            let p = e.path();
            out.insert(format!("rootfs/{}", p.strip_prefix(root).expect("below").display()));
            if e.file_type().expect("type").is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

/// The paths rkt's renderer takes from an image and its dependencies
/// (appc's acirenderer): the flattened dependency list, upper first; an
/// entry of a dependency only if the image's pathWhitelist (when it has
/// one) names it, not if an upper image provided it already, not below a
/// path an upper image made something other than a directory.
fn rkt_render(store: &Store, image_id: &str) -> BTreeSet<String> {
    let image = store.resolve(image_id).expect("image");
    let list = store.dependency_list(&image).expect("dependency list");
    let pwl: Option<BTreeSet<String>> = (!image.manifest.path_whitelist.is_empty())
        .then(|| image.manifest.path_whitelist.iter().map(|p| format!("rootfs{p}")).collect());
    let mut all: HashMap<String, u8> = HashMap::new();
    for (level, key) in list.iter().enumerate() {
        let bytes = fs::read(store.cas().blob(key)).expect("blob");
        for (name, flag) in read_aci(&bytes).0 {
            let name = name.trim_end_matches('/').to_string();
            if name == "rootfs" || !name.starts_with("rootfs/") {
                continue;
            }
            if level > 0 && pwl.as_ref().is_some_and(|w| !w.contains(&name)) {
                continue;
            }
            if all.contains_key(&name) {
                continue;
            }
            let mut parent = Path::new(&name).parent();
            let mut under_non_dir = false;
            while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                if all.get(&p.to_string_lossy().into_owned()).is_some_and(|f| *f != b'5') {
                    under_non_dir = true;
                }
                parent = p.parent();
            }
            if !under_non_dir {
                all.insert(name, flag);
            }
        }
    }
    all.into_keys().collect()
}

/// Checks every layer blob of `image_id` as rkt reads it; returns the layer keys.
fn check_layer_blobs(store: &Store, image_id: &str) -> Vec<String> {
    let image = store.resolve(image_id).expect("image");
    let index = store.cas().read_index().expect("index");
    let keys = image.layer_keys();
    assert!(!keys.is_empty());
    for (key, dep) in keys.iter().zip(&image.manifest.dependencies) {
        let blob = store.cas().blob(key);
        let bytes = fs::read(&blob).unwrap_or_else(|e| panic!("{}: {e}", blob.display()));
        assert_eq!(&cas_key_of(&bytes), key, "the blob's SHA-512 is its key");
        assert!(!rkt::layer_aci::pending(store.cas(), key).exists(), "the download is gone once the ACI is there");
        let (entries, m) = read_aci(&bytes);
        assert_eq!(entries[0].0, "manifest", "manifest first");
        assert_eq!(entries[1], ("rootfs".to_string(), b'5'));
        assert!(entries[2..].iter().all(|(n, _)| n.starts_with("rootfs/")), "{entries:?}");
        let mut names: Vec<&String> = entries.iter().map(|(n, _)| n).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), entries.len(), "no duplicate entries");
        assert_eq!((m.ac_kind.as_str(), m.ac_version.is_empty()), ("ImageManifest", false));
        assert!(m.name.starts_with("layer/sha256-"), "{}", m.name);
        assert!(m.label("os").is_some() && m.label("arch").is_some());
        // the image names it as its dependency by name and key; the index has both
        assert_eq!((dep.image_name.as_str(), dep.image_id.as_deref()), (m.name.as_str(), Some(key.as_str())));
        let row = index.aci(key).expect("indexed");
        assert_eq!((row.name.as_str(), row.size as usize), (m.name.as_str(), bytes.len()), "rkt's name and size");
        assert_eq!(store.read_manifest(key).expect("stored manifest"), m);
    }
    keys
}

#[tokio::test(flavor = "multi_thread")]
async fn layer_blobs_are_acis_rkt_reads_and_renders_as_rktlet_did() {
    let reg = registry();
    let (_t, store) = store();
    for name in ["edge:latest", "cfg:latest", "big:latest"] {
        let r = format!("{}/{name}", reg.main);
        let image = store.pull(&r, Credentials::default(), None).await.unwrap_or_else(|e| panic!("pull {r}: {e}"));
        // the ACIs are written after the pull, in the background
        tree::finish_settling();
        check_layer_blobs(&store, &image.id);
        let t = store.tree(&image.id).expect("tree");
        assert_eq!(rkt_render(&store, &image.id), tree_paths(&t.rootfs()), "{name}: rkt renders rktlet's tree");
        let pwl = &image.manifest.path_whitelist;
        if name == "edge:latest" {
            // edge deletes files: its whitelist keeps them, and the whiteouts, from rkt
            assert!(pwl.contains(&"/opt/opq/z".to_string()), "{pwl:?}");
            assert!(!pwl.iter().any(|p| p == "/etc/to-delete" || p.starts_with("/opt/opq/x") || p.contains("/.wh.")));
        } else {
            assert!(pwl.is_empty(), "{name} deletes nothing: {pwl:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn renders_work_from_the_acis_and_from_a_download_still_waiting() {
    let reg = registry();
    let (_t, store) = store();
    let image = store.pull(&format!("{}/edge:latest", reg.main), Credentials::default(), None).await.expect("pull");
    tree::finish_settling();
    let keys = check_layer_blobs(&store, &image.id);
    let tree_dir = store.tree(&image.id).expect("tree").path;
    let before = tree_paths(&tree_dir.join("rootfs"));
    let again = |store: &Store| {
        // (the background hash of the last render done first: it writes into the tree)
        tree::finish_settling();
        fs::remove_dir_all(&tree_dir).expect("remove the tree");
        let t = store.tree(&image.id).expect("rendered again");
        assert_eq!(fs::read_to_string(t.rootfs().join("opt/opq/z")).expect("z"), "z\n");
        assert!(!t.rootfs().join("etc/to-delete").exists() && !t.rootfs().join("opt/opq/x").exists());
        assert_eq!(tree_paths(&t.rootfs()), before);
    };
    // from the ACIs alone
    again(&store);
    // from a download waiting for its ACI: the registry's blob back in
    // cas/rktlet-layers, the ACI gone; then the ACI is written again, the same bytes
    let top = keys.last().expect("a layer").clone();
    let m = store.read_manifest(&top).expect("layer manifest");
    let digest = m.annotation(convert::ANN_LAYER_DIGEST).expect("its registry digest").to_string();
    let hex = digest.trim_start_matches("sha256:");
    let download = reg.storage().join(format!("docker/registry/v2/blobs/sha256/{}/{hex}/data", &hex[..2]));
    let aci = fs::read(store.cas().blob(&top)).expect("aci");
    fs::remove_file(store.cas().blob(&top)).expect("remove the ACI");
    let waiting = rkt::layer_aci::pending(store.cas(), &top);
    fs::create_dir_all(waiting.parent().expect("dir")).expect("dir");
    fs::copy(&download, &waiting).expect("the download");
    again(&store);
    assert_eq!(layer_aci::convert_pending(store.cas()), 1);
    assert_eq!(fs::read(store.cas().blob(&top)).expect("aci again"), aci, "the same ACI, byte for byte");
    assert!(!waiting.exists());
    // a download whose ACI does not come out with its key keeps waiting
    fs::remove_file(store.cas().blob(&top)).expect("remove the ACI");
    // (a plain tar, one byte of a file's data changed: it unpacks, with another key)
    let mut other = Vec::new();
    flate2::read::MultiGzDecoder::new(fs::File::open(&download).expect("download"))
        .read_to_end(&mut other)
        .expect("gunzip");
    let at = {
        let mut a = tar::Archive::new(&other[..]);
        let e = a.entries().expect("entries").flatten().find(|e| e.size() > 0).expect("a file with data");
        e.raw_file_position() as usize
    };
    other[at] ^= 0xff;
    fs::write(&waiting, &other).expect("a wrong download");
    assert_eq!(layer_aci::convert_pending(store.cas()), 0);
    assert!(waiting.exists() && !store.cas().blob(&top).exists(), "nothing half-written under the key");
    assert!(fs::read_dir(store.cas().tmp()).expect("tmp").flatten().all(|e| !e.path().is_dir()), "no work dir left");
}

/// A layer as the previous release stored it: the registry's blob under
/// the key of its uncompressed tar, named `layer/<key>`.
fn store_legacy_layer(store: &Store, download: &Path, digest: &str) -> String {
    let mut tar = Vec::new();
    flate2::read::MultiGzDecoder::new(fs::File::open(download).expect("download"))
        .read_to_end(&mut tar)
        .expect("gunzip");
    let key = cas_key_of(&tar);
    let blob = store.cas().blob(&key);
    fs::create_dir_all(blob.parent().expect("dir")).expect("dir");
    fs::copy(download, &blob).expect("blob");
    let mut m = ImageManifest::new(format!("layer/{key}"));
    m.annotations.push(rkt::schema::NameValue::new(convert::ANN_LAYER_DIGEST, digest));
    let mp = store.cas().image_manifest(&key);
    fs::create_dir_all(mp.parent().expect("dir")).expect("dir");
    fs::write(&mp, serde_json::to_vec(&m).expect("json")).expect("manifest");
    let size = fs::metadata(&blob).expect("blob").len() as i64;
    store
        .cas()
        .update_index(|i| {
            i.upsert_aci(AciInfo {
                blobkey: key.clone(),
                name: format!("layer/{key}"),
                importtime: 1,
                lastused: 1,
                latest: false,
                size,
                treestoresize: 0,
                verified: false,
            });
            i.add_layer_digest(digest, &key);
        })
        .expect("index");
    key
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_of_the_previous_layout_keeps_working_and_a_pull_converts_it() {
    let reg = registry();
    let (_t, store) = store();
    // busybox as the previous release stored it: its layer's tar, an image ACI naming it
    let reference = format!("{}/busybox:latest", reg.main);
    // what a fresh store of this release makes of it, and its layer's digest
    let (fresh, digest) = {
        let (_t2, other) = self::store();
        let i = other.pull(&reference, Credentials::default(), None).await.expect("pull elsewhere");
        let layer = i.layer_keys()[0].clone();
        let m = other.read_manifest(&layer).expect("layer manifest");
        let digest = m.annotation(convert::ANN_LAYER_DIGEST).expect("digest").to_string();
        tree::finish_settling();
        (i, digest)
    };
    let hex = digest.trim_start_matches("sha256:").to_string();
    let download = reg.storage().join(format!("docker/registry/v2/blobs/sha256/{}/{hex}/data", &hex[..2]));
    let legacy_layer = store_legacy_layer(&store, &download, &digest);
    let mut m = fresh.manifest.clone();
    m.path_whitelist.clear();
    m.dependencies = vec![Dependency {
        image_name: format!("layer/{legacy_layer}"),
        image_id: Some(legacy_layer.clone()),
        labels: Vec::new(),
        size: fs::metadata(&download).expect("size").len(),
    }];
    let (old_id, old_aci) = convert::empty_aci(&m).expect("image aci");
    for (path, bytes) in [
        (store.cas().blob(&old_id), old_aci.clone()),
        (store.cas().image_manifest(&old_id), serde_json::to_vec(&m).expect("json")),
    ] {
        fs::create_dir_all(path.parent().expect("dir")).expect("dir");
        fs::write(path, bytes).expect("write");
    }
    store
        .cas()
        .update_index(|i| {
            i.upsert_aci(AciInfo {
                blobkey: old_id.clone(),
                name: m.name.clone(),
                importtime: 1,
                lastused: 1,
                latest: true,
                size: old_aci.len() as i64,
                treestoresize: 0,
                verified: false,
            });
            i.upsert_remote(Remote {
                aciurl: format!("docker://{reference}"),
                sigurl: String::new(),
                etag: String::new(),
                blobkey: old_id.clone(),
                cachemaxage: 0,
                downloadtime: 1,
            });
        })
        .expect("index");

    // the upgraded store serves it: by name, rendered from the layer's tar
    let old = store.resolve(&reference).expect("resolve");
    assert_eq!(old.id, old_id);
    let t = store.tree(&old.id).expect("rendered from the old layout");
    assert!(t.rootfs().join("bin/busybox").exists());
    let old_tree = t.id.clone();

    // a pull stores the layer as an ACI, made from the old blob (nothing is
    // downloaded again): a new image id, the old one still there
    let downloaded = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = downloaded.clone();
    let progress: rktlet::image::Progress = std::sync::Arc::new(move |_, got, _| {
        counter.fetch_max(got, std::sync::atomic::Ordering::SeqCst);
    });
    let new = store.pull(&reference, Credentials::default(), Some(progress)).await.expect("pull");
    assert_eq!(downloaded.load(std::sync::atomic::Ordering::SeqCst), 0, "no layer downloaded");
    tree::finish_settling();
    assert_ne!(new.id, old_id);
    assert_eq!(new.id, fresh.id, "the same image a fresh store gets");
    let keys = check_layer_blobs(&store, &new.id);
    assert_ne!(keys[0], legacy_layer);
    assert!(store.tree(&new.id).expect("tree").rootfs().join("bin/busybox").exists());
    assert_eq!(store.resolve(&reference).expect("by name").id, new.id);
    // the next pull finds the layer's ACI: nothing to make or download
    let index = store.cas().read_index().expect("index");
    assert_eq!(index.layer_key(&digest), Some(keys[0].as_str()), "the digest names the ACI now");
    assert_eq!(store.pull(&reference, Credentials::default(), None).await.expect("again").id, new.id);
    let kept = store.resolve(&old_id).expect("the old image by id");
    assert_eq!(store.tree(&kept.id).expect("old tree").id, old_tree);

    // a damaged old blob is not made into an ACI: the layer is downloaded
    let (_t4, other) = self::store();
    let damaged = store_legacy_layer(&other, &download, &digest);
    let mut bytes = fs::read(other.cas().blob(&damaged)).expect("old blob");
    let mut plain = Vec::new();
    flate2::read::MultiGzDecoder::new(&bytes[..]).read_to_end(&mut plain).expect("gunzip");
    let at = {
        let mut a = tar::Archive::new(&plain[..]);
        let e = a.entries().expect("entries").flatten().find(|e| e.size() > 0).expect("a file with data");
        e.raw_file_position() as usize
    };
    plain[at] ^= 0xff;
    bytes = plain;
    fs::write(other.cas().blob(&damaged), &bytes).expect("damage");
    let err = other.pull(&reference, Credentials::default(), None).await.expect_err("a damaged old blob");
    assert!(err.to_string().contains("stored layer tar has key"), "{err}");

    // removed (as gc does once it is unused): its layer tar and tree go, the new layer stays
    assert_eq!(store.remove(&old_id).expect("remove"), Some(old_id.clone()));
    assert!(!store.cas().blob(&legacy_layer).exists() && !store.cas().tree(&old_tree).exists());
    assert!(store.cas().blob(&keys[0]).exists(), "the new layer stays");
    assert!(store.tree(&new.id).expect("tree").rootfs().join("bin/busybox").exists());
}
