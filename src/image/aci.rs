//! rkt's own images: ACIs fetched from a file or an https URL (issue 11,
//! first part). An
//! ACI is a tar (gzip, zstd or plain here) of `manifest` (an appc image
//! manifest) and `rootfs/`. Unless verification is skipped, its detached
//! OpenPGP signature (`<file>.asc`) must verify with a key trusted for the
//! manifest's name (`crate::trust`). The plain tar is stored under rkt's key
//! (SHA-512 of the uncompressed tar), the manifest beside it, the index row
//! last; the tree is rendered from the stored tar at once.

use super::cas::{AciInfo, now_nanos};
use super::verify::cas_key_of;
use super::{Image, ImageError, Store, io_ctx};
use crate::fsutil;
use crate::pod::manifest::ImageManifest;
use crate::trust::TrustStore;
use std::fs;
use std::io::{self, Read};
use std::path::Path;

/// How CRI names an ACI: `aci:` + a file path or an https URL.
pub const ACI_PREFIX: &str = "aci:";

/// The largest manifest accepted inside an ACI.
const MAX_MANIFEST: u64 = 1 << 20;

/// The plain tar of an ACI file's bytes (gzip and zstd are undone).
fn plain_tar(bytes: &[u8]) -> Result<Vec<u8>, ImageError> {
    let mut out = Vec::new();
    let read = if bytes.starts_with(&[0x1f, 0x8b]) {
        flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut out)
    } else if bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        zstd::Decoder::new(bytes).and_then(|mut d| d.read_to_end(&mut out))
    } else if bytes.starts_with(b"BZh") || bytes.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        return Err(ImageError::Unsupported("bzip2 and xz ACIs are not supported: gzip it".into()));
    } else {
        out.extend_from_slice(bytes);
        Ok(out.len())
    };
    read.map_err(io_ctx("decompressing the ACI"))?;
    Ok(out)
}

/// The `manifest` entry of an ACI's plain tar.
pub fn manifest_of(tar: &[u8]) -> Result<ImageManifest, ImageError> {
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries().map_err(io_ctx("reading the ACI"))? {
        let mut entry = entry.map_err(io_ctx("reading the ACI"))?;
        let path = entry.path().map_err(io_ctx("reading the ACI"))?.into_owned();
        if path
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .eq([std::path::Component::Normal("manifest".as_ref())])
        {
            if entry.size() > MAX_MANIFEST {
                return Err(ImageError::Unsupported(format!("the ACI manifest is larger than {MAX_MANIFEST} bytes")));
            }
            let mut json = Vec::new();
            entry.read_to_end(&mut json).map_err(io_ctx("reading the ACI manifest"))?;
            let m: ImageManifest = serde_json::from_slice(&json)
                .map_err(|e| ImageError::Unsupported(format!("invalid ACI manifest: {e}")))?;
            if m.ac_kind != "ImageManifest" || m.name.is_empty() {
                return Err(ImageError::Unsupported(format!(
                    "not an image manifest (acKind {:?}, name {:?})",
                    m.ac_kind, m.name
                )));
            }
            return Ok(m);
        }
    }
    Err(ImageError::Unsupported("the ACI has no manifest".into()))
}

/// Imports the ACI at `path`; with `trust`, only if `<path>.asc` is a
/// signature by a key trusted for the image's name.
pub fn import_file(store: &Store, trust: Option<&TrustStore>, path: &Path) -> Result<Image, ImageError> {
    let bytes = fs::read(path).map_err(io_ctx(format!("reading {}", path.display())))?;
    let sig_path = path.with_file_name(format!(
        "{}.asc",
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    ));
    let sig = trust.map(|_| fs::read(&sig_path).map_err(|e| format!("{} ({e})", sig_path.display())));
    import(store, trust, &path.display().to_string(), &bytes, sig)
}

/// Imports `aci:<file or URL>` (the form CRI PullImage takes).
pub async fn import_reference(store: &Store, trust: Option<&TrustStore>, reference: &str) -> Result<Image, ImageError> {
    let src = reference.strip_prefix(ACI_PREFIX).unwrap_or(reference);
    if src.starts_with("https://") || src.starts_with("http://") {
        import_url(store, trust, src).await
    } else {
        let src = src.strip_prefix("file://").unwrap_or(src);
        import_file(store, trust, Path::new(src))
    }
}

/// Imports the ACI at an `https://` URL (plain `http://` only from
/// loopback hosts), its signature from `<url>.asc`.
pub async fn import_url(store: &Store, trust: Option<&TrustStore>, url: &str) -> Result<Image, ImageError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| ImageError::Unsupported(format!("invalid URL {url}: {e}")))?;
    let loopback = matches!(parsed.host_str(), Some("localhost" | "127.0.0.1" | "[::1]" | "::1"));
    if parsed.scheme() != "https" && !(parsed.scheme() == "http" && loopback) {
        return Err(ImageError::Unsupported(format!("{url}: ACIs are fetched over https (http only from loopback)")));
    }
    let bytes = get(url).await.map_err(|e| io_ctx("fetching the ACI")(io::Error::other(e)))?;
    let sig = match trust {
        Some(_) => Some(get(&format!("{url}.asc")).await),
        None => None,
    };
    import(store, trust, url, &bytes, sig)
}

async fn get(url: &str) -> Result<Vec<u8>, String> {
    let resp = reqwest::get(url).await.map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url}: {}", resp.status()));
    }
    resp.bytes().await.map(|b| b.to_vec()).map_err(|e| format!("{url}: {e}"))
}

/// Checks (with `trust`, `sig` must be a signature by a key trusted for the
/// manifest's name) and stores one ACI.
fn import(
    store: &Store,
    trust: Option<&TrustStore>,
    from: &str,
    bytes: &[u8],
    sig: Option<Result<Vec<u8>, String>>,
) -> Result<Image, ImageError> {
    let tar = plain_tar(bytes)?;
    let manifest = manifest_of(&tar)?;
    if let (Some(trust), Some(sig)) = (trust, sig) {
        let what = format!("ACI {from}");
        let sig = sig.map_err(|e| ImageError::Verify {
            what: what.clone(),
            detail: format!("no signature {e}; --insecure-options=image skips the check"),
        })?;
        let by = trust
            .verify(&manifest.name, bytes, &sig)
            .map_err(|e| ImageError::Verify { what, detail: e.to_string() })?;
        tracing::info!(image = manifest.name, key = by, "ACI signature verified");
    }
    if !manifest.dependencies.is_empty() {
        return Err(ImageError::Unsupported(format!(
            "ACI {} has dependencies; fetching them is not supported yet",
            manifest.name
        )));
    }
    let key = cas_key_of(&tar);
    let cas = store.cas();
    let blob = cas.blob(&key);
    let mpath = cas.image_manifest(&key);
    for p in [&blob, &mpath] {
        let parent = p.parent().unwrap_or(p);
        fs::create_dir_all(parent).map_err(io_ctx(format!("creating {}", parent.display())))?;
    }
    let json = serde_json::to_vec(&manifest).map_err(|e| io_ctx("encoding the manifest")(io::Error::other(e)))?;
    fsutil::write_atomic(&blob, &tar, 0o644).map_err(io_ctx(format!("writing {}", blob.display())))?;
    fsutil::write_atomic(&mpath, &json, 0o644).map_err(io_ctx(format!("writing {}", mpath.display())))?;
    let tree_size = super::pull::render_aci(cas, &key, &manifest)?;
    let now = now_nanos();
    cas.update_index(|i| {
        // the reference it was fetched by resolves to it (CRI asks by that)
        i.upsert_remote(super::cas::Remote {
            aciurl: format!("{ACI_PREFIX}{from}"),
            sigurl: String::new(),
            etag: String::new(),
            blobkey: key.clone(),
            cachemaxage: 0,
            downloadtime: now,
        });
        i.upsert_aci(AciInfo {
            blobkey: key.clone(),
            name: manifest.name.clone(),
            importtime: now,
            lastused: now,
            latest: false,
            size: tar.len() as i64,
            treestoresize: tree_size,
            layer: false,
        })
    })
    .map_err(io_ctx("updating the image index"))?;
    store.resolve(&key)
}
