//! A pull from a registry, and a render from stored layers: fetch and check
//! the manifests and config, lock the layers (so identical pulls download
//! once), run every layer through the pipeline concurrently, merge the staged
//! layers in order, sync, then commit blobs, tree and index in that order.

use super::convert::{self, LayerRef};
use super::layer::{self, ChannelReader, Compression, LayerDone, LayerJob};
use super::oci::{self, AnyManifest, ImageConfig};
use super::policy;
use super::workdir::WorkDir;
use super::{Credentials, Image, ImageError, Store, io_ctx};
use crate::base::time::now_nanos;
use futures::StreamExt;
use rkt::cas::{AciInfo, Cas, Remote};
use rkt::digest::Digest;
use rkt::extract::{self, Unpacked};
use rkt::layer_aci;
use rkt::lock::HeldLock;
use rkt::reference::Reference;
use rkt::schema::ImageManifest;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Download progress: (layer index, bytes received so far, layer size).
pub type Progress = Arc<dyn Fn(usize, u64, u64) + Send + Sync>;

/// A layer of the manifest being pulled.
struct LayerDesc {
    digest: Digest,
    size: u64,
    media_type: String,
    compression: Compression,
    /// The layer's manifest, as its ACI holds it.
    manifest: Vec<u8>,
    /// An older release's blob of this layer (its tar, under the tar's
    /// key): the layer's ACI is made from it instead of a download.
    legacy: Option<String>,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ImageError> + Send + 'static,
) -> Result<T, ImageError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ImageError::Task(e.to_string()))?
}

fn parse_manifest(bytes: &[u8], content_type: &str, what: &str) -> Result<AnyManifest, ImageError> {
    oci::parse_manifest(bytes, content_type).map_err(|e| ImageError::Unsupported(format!("invalid {what}: {e}")))
}

fn digest_of(d: &oci::Descriptor) -> Result<Digest, ImageError> {
    oci::digest_of(d).map_err(|e| ImageError::Unsupported(e.to_string()))
}

/// Applies the signature policy to the manifest `reference` resolved to
/// (`digest`), before anything of the image is downloaded or stored.
async fn check_policy(
    store: &Store,
    session: &super::registry::Session<'_>,
    reference: &Reference,
    digest: &Digest,
) -> Result<(), ImageError> {
    let policy = store.policy()?;
    let decision = policy.decide(reference);
    let refused =
        |why: String| ImageError::Policy(format!("{reference} ({digest}) refused by the signature policy: {why}"));
    let needs = decision.needs().map_err(refused)?;
    if needs.is_empty() {
        return Ok(());
    }
    let tag = policy::signature_tag(digest);
    let signatures = match session.manifest(&tag).await {
        Ok((b, content_type, _)) => match parse_manifest(&b, &content_type, "signature manifest")? {
            AnyManifest::Image(m) => m.layers().clone(),
            AnyManifest::Index(_) => Vec::new(),
        },
        Err(super::RegistryError::NotFound { .. }) => {
            return Err(refused(format!("scope {:?} requires a signature and {tag} does not exist", decision.scope)));
        }
        Err(e) => return Err(e.into()),
    };
    let mut checked = Vec::new();
    let mut payloads = Vec::new();
    for layer in signatures.iter().filter(|l| l.media_type().to_string() == policy::SIMPLE_SIGNING) {
        let Some(sig) = layer.annotations().as_ref().and_then(|a| a.get(policy::SIGNATURE_ANNOTATION)) else {
            continue;
        };
        let payload = session.small_blob(&digest_of(layer)?, layer.size(), policy::MAX_PAYLOAD_BYTES).await?;
        payloads.push((payload, sig.clone()));
    }
    // every signedBy of the scope needs one signature of its own keys
    for keys in needs {
        let ok = payloads.iter().any(|(payload, sig)| {
            match policy::check_signature(keys, payload, sig, reference, digest) {
                Ok(()) => true,
                Err(e) => {
                    checked.push(e);
                    false
                }
            }
        });
        if !ok {
            let why = if payloads.is_empty() {
                format!("{tag} holds no cosign signature")
            } else {
                format!("no signature in {tag} is valid for scope {:?}: {}", decision.scope, checked.join("; "))
            };
            return Err(refused(why));
        }
    }
    tracing::debug!(image = %reference, scope = %decision.scope, "signature policy satisfied");
    Ok(())
}

/// The manifest and config of the image a pull fetches.
struct Fetched {
    /// The digest of what the reference resolved to (an index, or the manifest).
    top_digest: Digest,
    manifest: oci::ImageManifest,
    manifest_digest: Digest,
    config_digest: Digest,
    config: ImageConfig,
}

impl Fetched {
    /// The image's manifest with layers `keys` (key, compressed size) and
    /// the `pathWhitelist` their paths make (`layer_aci::path_whitelist`).
    fn image_manifest(&self, reference: &Reference, keys: &[(String, u64)], whitelist: Vec<String>) -> ImageManifest {
        let name = |i: usize| -> String {
            self.manifest
                .layers()
                .get(i)
                .and_then(|l| digest_of(l).ok())
                .map_or_else(String::new, |d| format!("{}{}", rkt::index::LAYER_NAME_PREFIX, d.file_name()))
        };
        let refs: Vec<LayerRef> =
            keys.iter().enumerate().map(|(i, (k, s))| LayerRef { key: k.clone(), name: name(i), size: *s }).collect();
        let mut m = convert::image_manifest(reference, &self.manifest_digest, &self.config_digest, &self.config, &refs);
        m.path_whitelist = whitelist;
        m
    }
}

/// Why a download broke off (a stall, a cut connection), preferred over
/// the unpacking error it causes downstream.
type NetworkError = Arc<std::sync::Mutex<Option<String>>>;

/// The layer jobs of a pull, running.
struct Running {
    forwarders: Vec<tokio::task::JoinHandle<()>>,
    handles: Vec<tokio::task::JoinHandle<Result<LayerDone, ImageError>>>,
    network_error: NetworkError,
}

pub(super) async fn pull(
    store: &Store,
    reference: &Reference,
    creds: Credentials,
    progress: Option<Progress>,
) -> Result<Image, ImageError> {
    let began = std::time::Instant::now();
    let session = store.registry().session(reference, creds);
    let fetched = fetch_manifest_and_config(store, &session, reference).await?;
    tracing::debug!(image = %reference, micros = began.elapsed().as_micros() as u64, "manifest and config fetched");
    let mut layers = layer_descs(reference, &fetched.manifest, &fetched.config)?;

    let cas = store.cas().clone();
    let _locks = lock_layers(&cas, &layers).await?;
    let index = cas.read_index().map_err(io_ctx("reading the image index"))?;
    let known = known_layers(&cas, &index, &layers);
    for (l, k) in layers.iter_mut().zip(&known) {
        if k.is_none() {
            l.legacy = legacy_layer(&cas, &index, l);
        }
    }
    let remotes = remotes_of(reference, &fetched.top_digest);
    if let Some(image_key) = already_stored(reference, &fetched, &cas, &index, &known, &remotes)? {
        return store.resolve(&image_key);
    }

    let work = WorkDir::new(&cas)?;
    let running = spawn_layer_jobs(store, &session, &cas, &work, &layers, &known, progress).await?;
    let started = std::time::Instant::now();
    tracing::debug!(image = %reference, micros = began.elapsed().as_micros() as u64, "layer downloads started");
    let done = await_layers(running, layers.len()).await?;
    tracing::debug!(image = %reference, ms = started.elapsed().as_millis() as u64, "layers downloaded, verified and unpacked");
    // a crash here leaves only the work dir (temporary, removed by gc); the pull is simply repeated
    crate::base::fault::point("pull-before-commit");

    let image_key = commit(reference, fetched, cas, work, done, &layers, remotes).await?;
    tracing::debug!(image = %reference, micros = began.elapsed().as_micros() as u64, "image committed");
    store.resolve(&image_key)
}

/// The image's manifest (the host platform's, when the reference names an
/// index), checked against the signature policy first, and its config.
async fn fetch_manifest_and_config(
    store: &Store,
    session: &super::registry::Session<'_>,
    reference: &Reference,
) -> Result<Fetched, ImageError> {
    let (bytes, content_type, top_digest) = session.manifest(&reference.object()).await?;
    let top = parse_manifest(&bytes, &content_type, "manifest")?;
    check_policy(store, session, reference, &top_digest).await?;
    let not_schema2 =
        || ImageError::Unsupported(format!("{reference}: only schema 2 / OCI image manifests are supported"));
    let (manifest, manifest_digest) = match top {
        AnyManifest::Index(index) => {
            let want = oci::host_platform();
            let chosen = oci::select_platform(index.manifests(), &want).ok_or_else(|| {
                ImageError::Registry(super::RegistryError::NotFound {
                    registry: reference.domain.clone(),
                    what: format!("a {}/{} manifest in index {reference}", want.os(), want.architecture()),
                })
            })?;
            let (b, content_type, d) = session.manifest(chosen.digest().as_ref()).await?;
            match parse_manifest(&b, &content_type, "manifest")? {
                AnyManifest::Image(m) => (*m, d),
                AnyManifest::Index(_) => return Err(not_schema2()),
            }
        }
        AnyManifest::Image(m) => (*m, top_digest.clone()),
    };
    if manifest.schema_version() != 2 {
        return Err(not_schema2());
    }
    let config_desc = manifest.config();
    let config_digest = digest_of(config_desc)?;
    let config_bytes = session.small_blob(&config_digest, config_desc.size(), oci::MAX_CONFIG_BYTES).await?;
    let config: ImageConfig =
        oci::parse_config(&config_bytes).map_err(|e| ImageError::Unsupported(format!("invalid image config: {e}")))?;
    Ok(Fetched { top_digest, manifest, manifest_digest, config_digest, config })
}

/// The manifest's layers, each of a media type whose compression is known.
fn layer_descs(
    reference: &Reference,
    manifest: &oci::ImageManifest,
    config: &ImageConfig,
) -> Result<Vec<LayerDesc>, ImageError> {
    let mut layers = Vec::new();
    for l in manifest.layers() {
        let media_type = l.media_type().to_string();
        let compression = Compression::from_media_type(&media_type).ok_or_else(|| {
            ImageError::Unsupported(format!("{reference}: unsupported layer media type {media_type:?}"))
        })?;
        let digest = digest_of(l)?;
        let manifest = convert::layer_manifest_json(&digest, &media_type, config);
        layers.push(LayerDesc { digest, size: l.size(), media_type, compression, manifest, legacy: None });
    }
    Ok(layers)
}

/// One downloader per layer across processes: key-locks in digest order (no deadlock).
async fn lock_layers(cas: &Cas, layers: &[LayerDesc]) -> Result<Vec<HeldLock>, ImageError> {
    let mut lock_names: Vec<String> = layers.iter().map(|l| l.digest.file_name()).collect();
    lock_names.sort();
    lock_names.dedup();
    let cas = cas.clone();
    blocking(move || {
        lock_names
            .iter()
            .map(|n| cas.lock_image(n).map_err(io_ctx(format!("locking {n}"))))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
}

/// The key of each layer already stored as an ACI (its blob there, or its
/// download waiting for it), by the index. A layer an older release stored
/// (its tar under the tar's key) is not: its ACI has another key, made from
/// that blob (`legacy_layer`), and the images made of it keep theirs.
fn known_layers(cas: &Cas, index: &rkt::cas::Index, layers: &[LayerDesc]) -> Vec<Option<String>> {
    layers
        .iter()
        .map(|l| {
            index.layer_key(&l.digest.to_string()).map(str::to_string).filter(|k| {
                let legacy = index.aci(k).is_some_and(|a| convert::is_legacy_layer(&a.name, k));
                !legacy && (cas.blob(k).exists() || layer_aci::pending(cas, k).exists())
            })
        })
        .collect()
}

/// The key of an older release's blob of layer `l` (its tar under the
/// tar's key, named `layer/<key>`), if there is one.
fn legacy_layer(cas: &Cas, index: &rkt::cas::Index, l: &LayerDesc) -> Option<String> {
    let key = index.layer_key(&l.digest.to_string())?;
    let row = index.aci(key)?;
    (convert::is_legacy_layer(&row.name, key) && cas.blob(key).exists()).then(|| key.to_string())
}

/// The names the image is stored under: by digest, and as asked for
/// unless that was by digest.
fn remotes_of(reference: &Reference, top_digest: &Digest) -> Vec<String> {
    let mut remotes = vec![format!("docker://{}", reference.with_digest(top_digest))];
    if reference.digest.is_none() {
        remotes.push(format!("docker://{reference}"));
    }
    remotes
}

/// Everything already here (layers, image and rendered tree): the image
/// needs at most its names added. Returns its key then.
fn already_stored(
    reference: &Reference,
    fetched: &Fetched,
    cas: &Cas,
    index: &rkt::cas::Index,
    known: &[Option<String>],
    remotes: &[String],
) -> Result<Option<String>, ImageError> {
    if !known.iter().all(Option::is_some) {
        return Ok(None);
    }
    // the image these layers made when it was pulled by this digest (its
    // key depends on the layers' contents, through its pathWhitelist)
    let layer_keys: Vec<String> = known.iter().flatten().cloned().collect();
    let by_digest = format!("docker://{}", reference.with_digest(&fetched.top_digest));
    let Some(image_key) = index.remote.iter().find(|r| r.aciurl == by_digest).map(|r| r.blobkey.clone()) else {
        return Ok(None);
    };
    let Ok(bytes) = fs::read(cas.image_manifest(&image_key)) else { return Ok(None) };
    let Ok(m) = serde_json::from_slice::<ImageManifest>(&bytes) else { return Ok(None) };
    let same_layers = m
        .dependencies
        .iter()
        .filter(|d| d.image_name.starts_with(rkt::index::LAYER_NAME_PREFIX))
        .filter_map(|d| d.image_id.clone())
        .eq(layer_keys.iter().cloned());
    let tree_id = convert::layered_tree_id(&image_key, &layer_keys);
    if same_layers && index.aci(&image_key).is_some() && cas.tree_rendered(&tree_id) {
        let now = now_nanos();
        cas.update_index(|i| {
            for url in remotes {
                i.upsert_remote(remote_row(url, &image_key, now));
            }
        })
        .map_err(io_ctx("updating the image index"))?;
        return Ok(Some(image_key));
    }
    Ok(None)
}

/// Every layer's job started, each on a blocking thread: a stored layer read
/// back from its blob, a missing one downloaded (every download asked for at
/// once) through a forwarder into its pipeline. Layer 0 unpacks into the
/// work dir's rootfs, the others are staged beside it.
async fn spawn_layer_jobs(
    store: &Store,
    session: &super::registry::Session<'_>,
    cas: &Cas,
    work: &WorkDir,
    layers: &[LayerDesc],
    known: &[Option<String>],
    progress: Option<Progress>,
) -> Result<Running, ImageError> {
    // every missing layer is asked for at once: a registry answers each
    // request in 4-17 ms, which one after the other delayed the last layer
    let mut streams = futures::future::try_join_all(
        layers
            .iter()
            .zip(known)
            .filter(|(l, k)| k.is_none() && l.legacy.is_none())
            .map(|(l, _)| session.blob_stream(&l.digest)),
    )
    .await?
    .into_iter();
    let mut forwarders = Vec::new();
    let mut handles = Vec::new();
    let network_error: NetworkError = Arc::default();
    let stall_secs = store.registry().config.stall_timeout().as_secs();
    let max_layer_bytes = store.registry().config.max_layer_bytes();
    for (i, l) in layers.iter().enumerate() {
        let dest = if i == 0 { work.rootfs() } else { work.path.join(format!("layer-{i}")) };
        if i > 0 {
            fs::create_dir(&dest).map_err(io_ctx(format!("creating {}", dest.display())))?;
        }
        let job = match (&known[i], &l.legacy) {
            (Some(key), _) => stored_job(cas, i, key, dest)?,
            (None, Some(legacy)) => {
                let path = cas.blob(legacy);
                let f = fs::File::open(&path).map_err(io_ctx(format!("opening {}", path.display())))?;
                LayerJob {
                    index: i,
                    source: Box::new(f),
                    expected_digest: None,
                    expected_key: None,
                    aci_manifest: Some(l.manifest.clone()),
                    legacy_key: Some(legacy.clone()),
                    compression: Compression::Detect,
                    blob_out: None,
                    dest,
                    staged: i > 0,
                    max_bytes: u64::MAX,
                }
            }
            (None, None) => {
                let Some(stream) = streams.next() else {
                    return Err(ImageError::Task("a layer has no download".into()));
                };
                let (tx, rx) = tokio::sync::mpsc::channel(64);
                let forwarder = Forwarder {
                    index: i,
                    size: l.size,
                    digest: l.digest.clone(),
                    progress: progress.clone(),
                    network_error: network_error.clone(),
                    stall_secs,
                };
                forwarders.push(forwarder.spawn(stream, tx));
                LayerJob {
                    index: i,
                    source: Box::new(ChannelReader::new(rx)),
                    expected_digest: Some((l.digest.clone(), l.size)),
                    expected_key: None,
                    aci_manifest: Some(l.manifest.clone()),
                    legacy_key: None,
                    compression: l.compression,
                    blob_out: Some(work.path.join(format!("blob-{i}"))),
                    dest,
                    staged: i > 0,
                    max_bytes: max_layer_bytes,
                }
            }
        };
        handles.push(tokio::task::spawn_blocking(move || layer::run(job)));
    }
    Ok(Running { forwarders, handles, network_error })
}

/// A layer's download on its way to the layer's pipeline.
struct Forwarder {
    index: usize,
    size: u64,
    digest: Digest,
    progress: Option<Progress>,
    network_error: NetworkError,
    stall_secs: u64,
}

impl Forwarder {
    /// Passes the download's chunks on, reporting progress; a download
    /// that breaks off is recorded in `network_error` and passed on as an
    /// error. Ends when the pipeline stops reading.
    fn spawn<S>(self, stream: S, tx: tokio::sync::mpsc::Sender<io::Result<bytes::Bytes>>) -> tokio::task::JoinHandle<()>
    where
        S: futures::Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send + 'static,
    {
        let Forwarder { index: i, size, digest, progress, network_error, stall_secs } = self;
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut received = 0u64;
            while let Some(chunk) = stream.next().await {
                let chunk = match chunk {
                    Ok(c) => {
                        received += c.len() as u64;
                        if let Some(p) = &progress {
                            p(i, received, size);
                        }
                        Ok(c)
                    }
                    Err(e) => {
                        let why = if e.is_timeout() {
                            format!("registry stalled: no data for {stall_secs}s")
                        } else {
                            format!("registry connection broke: {e}")
                        };
                        let why = format!("downloading layer {digest} ({received} of {size} bytes): {why}");
                        if let Ok(mut slot) = network_error.lock() {
                            slot.get_or_insert(why.clone());
                        }
                        Err(io::Error::other(why))
                    }
                };
                if tx.send(chunk).await.is_err() {
                    break;
                }
            }
        })
    }
}

/// Waits for every layer's job; the first failure stops the downloads and
/// is returned (a broken download as the network's doing). Returns the
/// layers done, in order.
async fn await_layers(running: Running, layer_count: usize) -> Result<Vec<LayerDone>, ImageError> {
    let Running { forwarders, handles, network_error } = running;
    let mut done: Vec<LayerDone> = Vec::new();
    let mut first_err = None;
    for h in handles {
        match h.await {
            Ok(Ok(d)) => {
                done.push(d);
                // a crash between layers leaves only the work dir, as below
                if done.len() == 1 && layer_count > 1 {
                    crate::base::fault::point("pull-between-layers");
                }
            }
            Ok(Err(e)) => {
                if first_err.is_none() {
                    forwarders.iter().for_each(|f| f.abort());
                    first_err = Some(e);
                }
            }
            Err(e) => first_err = first_err.or(Some(ImageError::Task(e.to_string()))),
        }
    }
    if let Some(e) = first_err {
        let network = network_error.lock().ok().and_then(|mut slot| slot.take());
        return Err(match (network, e) {
            // bytes that arrived whole but wrong stay a verification failure;
            // a short download is the network's doing
            (Some(_), e @ ImageError::Verify { .. }) if e.to_string().contains("digest mismatch") => e,
            (Some(why), _) => ImageError::Network(why),
            (None, e) => e,
        });
    }
    done.sort_by_key(|d| d.index);
    Ok(done)
}

/// The image's manifest made from the layers' keys and sizes, then blobs,
/// tree and index committed on a blocking thread (`Commit::run`), the work
/// dir removed after. Returns the image's key.
async fn commit(
    reference: &Reference,
    fetched: Fetched,
    cas: Cas,
    work: WorkDir,
    done: Vec<LayerDone>,
    layers: &[LayerDesc],
    remotes: Vec<String>,
) -> Result<String, ImageError> {
    let manifests: Vec<Vec<u8>> = layers.iter().map(|l| l.manifest.clone()).collect();
    let legacy: Vec<Option<String>> = layers.iter().map(|l| l.legacy.clone()).collect();
    let keys: Vec<(String, u64)> = done
        .iter()
        .map(|d| (d.key.clone(), if d.compressed_size > 0 { d.compressed_size } else { layers[d.index].size }))
        .collect();
    let paths: Vec<layer_aci::LayerPaths> = done.iter().map(|d| d.unpacked.layer_paths()).collect();
    let whitelist = layer_aci::path_whitelist(&paths.iter().collect::<Vec<_>>());
    let image_manifest = fetched.image_manifest(reference, &keys, whitelist);
    let layer_meta: Vec<(Digest, String)> = layers.iter().map(|l| (l.digest.clone(), l.media_type.clone())).collect();
    blocking(move || {
        let plan = Commit {
            cas: &cas,
            work: &work,
            done: &done,
            layer_meta: &layer_meta,
            manifests: &manifests,
            legacy: &legacy,
            image: image_manifest,
            remotes,
        };
        let key = plan.run()?;
        // the layers' ACIs are written from their downloads off the pull
        super::layer_aci::convert_later(&cas);
        Ok(key)
    })
    .await
}

fn remote_row(url: &str, key: &str, now: i64) -> Remote {
    Remote {
        aciurl: url.to_string(),
        sigurl: String::new(),
        etag: String::new(),
        blobkey: key.to_string(),
        cachemaxage: 0,
        downloadtime: now,
    }
}

/// Merges staged layers 1.. into the bottom layer's tree and fixes directory
/// metadata (no sync: see "Durability" in `image/mod.rs`).
fn finish_tree(rootfs: &Path, work: &Path, done: &[LayerDone]) -> Result<(), ImageError> {
    for d in done.iter().filter(|d| d.index > 0) {
        extract::merge(rootfs, &work.join(format!("layer-{}", d.index)), &d.unpacked)?;
    }
    let all: Vec<&Unpacked> = done.iter().map(|d| &d.unpacked).collect();
    extract::apply_dir_meta(rootfs, &all)?;
    let skipped: usize = all.iter().map(|u| u.skipped_devices).sum();
    if skipped > 0 {
        tracing::info!(skipped, "device nodes skipped (no privilege to create them)");
    }
    Ok(())
}

/// Moves a finished tree (`work/tree`) into `cas/tree/<id>` and marks it rendered.
fn commit_tree(
    cas: &Cas,
    work: &Path,
    tree_id: &str,
    image_key: &str,
    manifest: &ImageManifest,
) -> Result<i64, ImageError> {
    let _lock = cas.lock_tree(tree_id).map_err(io_ctx("locking the tree"))?;
    let final_path = cas.tree(tree_id);
    let tmp_tree = work.join("tree");
    if cas.tree_rendered(tree_id) {
        return Ok(rkt::tree::tree_size(&final_path)); // rendered meanwhile by another process
    }
    if final_path.exists() {
        fs::remove_dir_all(&final_path).map_err(io_ctx(format!("removing partial tree {}", final_path.display())))?;
    }
    keep_only_rootfs(&tmp_tree)?;
    let json = serde_json::to_vec(manifest).map_err(|e| io_ctx("encoding the manifest")(io::Error::other(e)))?;
    // plain writes (see "Durability" in image/mod.rs): the whole directory
    // becomes visible by one rename, marked not synced, and `rendered`
    // comes last; `hash` is written when the tree is synced (`tree.rs`)
    for (name, bytes) in [("manifest", &json[..]), ("image", image_key.as_bytes())] {
        let path = tmp_tree.join(name);
        fs::write(&path, bytes).map_err(io_ctx(format!("writing {}", path.display())))?;
    }
    Cas::mark_unsynced(&tmp_tree).map_err(io_ctx(format!("marking {} unsynced", tmp_tree.display())))?;
    fs::rename(&tmp_tree, &final_path).map_err(io_ctx(format!("moving the tree to {}", final_path.display())))?;
    Cas::mark_rendered(&final_path).map_err(io_ctx(format!("marking {} rendered", final_path.display())))?;
    rkt::tree::settle_later(cas, tree_id);
    // as it will be once settled: with its `hash` (`sha512-` + 64 hex)
    Ok(rkt::tree::tree_size(&final_path) + if final_path.join("hash").exists() { 0 } else { 71 })
}

/// Deletes what a tree holds beside `rootfs/`. An ACI's tar is unpacked at
/// the tree's top, so it can bring more than its rootfs and manifest, links
/// included; the tree's own files (`manifest`, `image`, `hash`, `rendered`)
/// are written after this, as new files, never through such a link.
fn keep_only_rootfs(tree: &Path) -> Result<(), ImageError> {
    for entry in fs::read_dir(tree).map_err(io_ctx(format!("reading {}", tree.display())))?.flatten() {
        if entry.file_name() == "rootfs" {
            continue;
        }
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let removed = if is_dir { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
        removed.map_err(io_ctx(format!("removing {}", path.display())))?;
    }
    Ok(())
}

struct Commit<'a> {
    cas: &'a Cas,
    work: &'a WorkDir,
    done: &'a [LayerDone],
    layer_meta: &'a [(Digest, String)],
    /// Each layer's manifest, as its ACI holds it.
    manifests: &'a [Vec<u8>],
    /// Each layer's older release's blob it was made from, if it was.
    legacy: &'a [Option<String>],
    image: ImageManifest,
    remotes: Vec<String>,
}

impl Commit<'_> {
    fn run(self) -> Result<String, ImageError> {
        let Commit { cas, work, done, layer_meta, manifests, legacy, image, remotes } = self;
        let rootfs = work.rootfs();
        let started = std::time::Instant::now();
        finish_tree(&rootfs, &work.path, done)?;
        tracing::debug!(ms = started.elapsed().as_millis() as u64, "layers merged and synced");
        let ensure_parent = |p: &Path| -> Result<(), ImageError> {
            let parent = p.parent().unwrap_or(p);
            fs::create_dir_all(parent).map_err(io_ctx(format!("creating {}", parent.display())))
        };
        // 1. layer manifests (the bytes their ACIs hold), then the layers'
        // downloads, which wait there for their ACIs (`layer_aci`)
        for d in done {
            let mpath = cas.image_manifest(&d.key);
            if !mpath.exists() {
                ensure_parent(&mpath)?;
                rkt::fs::write_atomic(&mpath, &manifests[d.index], 0o644)
                    .map_err(io_ctx(format!("writing {}", mpath.display())))?;
            }
            let blob = cas.blob(&d.key);
            let waiting = layer_aci::pending(cas, &d.key);
            let tmp_blob = work.path.join(format!("blob-{}", d.index));
            if !blob.exists() && !waiting.exists() {
                // the download, or an older release's blob of the layer (a
                // second name: that blob stays for the images that name it)
                let from = match &legacy[d.index] {
                    Some(old) => cas.blob(old),
                    None => tmp_blob,
                };
                ensure_parent(&waiting)?;
                let stored = match &legacy[d.index] {
                    Some(_) => fs::hard_link(&from, &waiting).or_else(|_| {
                        // another file system: a copy, renamed into place whole
                        let copy = work.path.join(format!("legacy-{}", d.index));
                        fs::copy(&from, &copy).and_then(|_| fs::rename(&copy, &waiting))
                    }),
                    None if from.exists() => fs::rename(&from, &waiting),
                    None => Ok(()),
                };
                stored.map_err(io_ctx(format!("storing {}", waiting.display())))?;
                rkt::fs::sync_dir(waiting.parent().unwrap_or(&waiting)).map_err(io_ctx("syncing the layer store"))?;
            }
        }
        // a crash here leaves stored blobs the index does not name: `image
        // verify` notes them; the repeated pull keeps them (same keys)
        crate::base::fault::point("pull-mid-commit");
        // 2. the image ACI and its manifest
        let (image_key, aci) = convert::empty_aci(&image).map_err(io_ctx("building the image ACI"))?;
        let blob = cas.blob(&image_key);
        ensure_parent(&blob)?;
        rkt::fs::write_atomic(&blob, &aci, 0o644).map_err(io_ctx(format!("writing {}", blob.display())))?;
        let mpath = cas.image_manifest(&image_key);
        ensure_parent(&mpath)?;
        let json =
            serde_json::to_vec(&image).map_err(|e| io_ctx("encoding the image manifest")(io::Error::other(e)))?;
        rkt::fs::write_atomic(&mpath, &json, 0o644).map_err(io_ctx(format!("writing {}", mpath.display())))?;
        // 3. the tree
        let layer_keys: Vec<String> = done.iter().map(|d| d.key.clone()).collect();
        let tree_id = convert::layered_tree_id(&image_key, &layer_keys);
        let tree_size = commit_tree(cas, &work.path, &tree_id, &image_key, &image)?;
        tracing::debug!(ms = started.elapsed().as_millis() as u64, "blobs and tree committed");
        // 4. the index: from here on the image is visible
        let now = now_nanos();
        cas.update_index(|i| {
            for d in done {
                // rkt's: the size of the layer's (uncompressed) ACI
                let size = d.aci_size as i64;
                i.upsert_aci(AciInfo {
                    blobkey: d.key.clone(),
                    // the name its manifest has, as rkt records it
                    name: format!("{}{}", rkt::index::LAYER_NAME_PREFIX, layer_meta[d.index].0.file_name()),
                    importtime: now,
                    lastused: now,
                    latest: false,
                    size,
                    treestoresize: 0,
                    verified: false,
                });
                i.set_layer_digest(&layer_meta[d.index].0.to_string(), &d.key);
            }
            i.upsert_aci(AciInfo {
                blobkey: image_key.clone(),
                name: image.name.clone(),
                importtime: now,
                lastused: now,
                latest: remotes.iter().any(|r| r.ends_with(":latest")),
                // rkt's: the stored blob (the image's own small ACI)
                size: aci.len() as i64,
                treestoresize: tree_size,
                verified: false,
            });
            for url in &remotes {
                i.upsert_remote(remote_row(url, &image_key, now));
            }
        })
        .map_err(io_ctx("updating the image index"))?;
        Ok(image_key)
    }
}

/// A layer read back from the store, checked against its key: its ACI
/// blob (or an older release's blob of its tar), or the download that
/// waits for its ACI (whose rendition is made again to check it).
fn stored_job(cas: &Cas, index: usize, key: &str, dest: PathBuf) -> Result<LayerJob, ImageError> {
    let blob = cas.blob(key);
    let waiting = layer_aci::pending(cas, key);
    let open = |p: &Path| fs::File::open(p);
    // the download goes once its ACI is in place: look at the blob again then
    let (f, aci_manifest) = match open(&blob) {
        Ok(f) => (f, None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match open(&waiting) {
            Ok(f) => {
                let mpath = cas.image_manifest(key);
                let m = fs::read(&mpath).map_err(io_ctx(format!("reading {}", mpath.display())))?;
                (f, Some(m))
            }
            Err(_) => (open(&blob).map_err(io_ctx(format!("opening {}", blob.display())))?, None),
        },
        Err(e) => return Err(io_ctx(format!("opening {}", blob.display()))(e)),
    };
    Ok(LayerJob {
        index,
        source: Box::new(f),
        expected_digest: None,
        expected_key: Some(key.to_string()),
        aci_manifest,
        legacy_key: None,
        compression: Compression::Detect,
        blob_out: None,
        dest,
        staged: index > 0,
        // it was accepted once; a store read back is not limited again
        max_bytes: u64::MAX,
    })
}

/// Renders an image from its stored layers into a scratch directory, hands
/// its rootfs to `f`, and removes it.
pub(super) fn render_scratch<T>(
    store: &Store,
    image: &Image,
    f: impl FnOnce(&Path) -> Result<T, ImageError>,
) -> Result<T, ImageError> {
    let keys = image.layer_keys();
    let work = if keys.is_empty() {
        unpack_aci_chain(store.cas(), &image.id, &image.manifest)?
    } else {
        render_layers(store.cas(), &keys)?.0
    };
    f(&work.rootfs())
}

/// Renders the tree of an ACI and the ACIs it depends on from their stored
/// plain tars (`manifest` and `rootfs/`); returns the tree's size.
pub(super) fn render_aci(cas: &Cas, key: &str, manifest: &ImageManifest) -> Result<i64, ImageError> {
    let work = unpack_aci_chain(cas, key, manifest)?;
    let list = dependency_list(cas, key, manifest)?;
    commit_tree(cas, &work.path, &convert::tree_id(&list), key, manifest)
}

/// rkt's flattened dependency list of a stored ACI, its dependencies'
/// manifests read from the CAS (each must be there).
fn dependency_list(cas: &Cas, key: &str, manifest: &ImageManifest) -> Result<Vec<String>, ImageError> {
    let mut unreadable = None;
    let list = convert::dependency_list(key, manifest, |id| {
        let path = cas.image_manifest(id);
        let read = fs::read(&path).map_err(io_ctx(format!("reading dependency {id}"))).and_then(|b| {
            serde_json::from_slice(&b).map_err(|e| io_ctx(format!("parsing {}", path.display()))(io::Error::other(e)))
        });
        match read {
            Ok(m) => Some(m),
            Err(e) => {
                unreadable.get_or_insert(e);
                None
            }
        }
    })
    .map_err(|e| ImageError::Unsupported(format!("{}: {e}", manifest.name)))?;
    match unreadable {
        Some(e) => Err(e),
        None => Ok(list),
    }
}

/// The ACIs an image's tree is made of: rkt's flattened dependency list,
/// each ACI at its first place (rkt's acirenderer order: earlier ones
/// override later ones).
fn aci_chain(cas: &Cas, key: &str, manifest: &ImageManifest) -> Result<Vec<String>, ImageError> {
    let mut chain: Vec<String> = Vec::new();
    for k in dependency_list(cas, key, manifest)? {
        if !chain.contains(&k) {
            chain.push(k);
        }
    }
    if chain.len() > 65 {
        return Err(ImageError::Unsupported(format!("{}: more than 64 dependencies", manifest.name)));
    }
    Ok(chain)
}

/// Unpacks a stored ACI and its dependencies (lowest first, each on top of
/// the ones below) as a work directory's tree.
fn unpack_aci_chain(cas: &Cas, key: &str, manifest: &ImageManifest) -> Result<WorkDir, ImageError> {
    let chain = aci_chain(cas, key, manifest)?;
    let work = WorkDir::new(cas)?;
    let tree = work.path.join("tree");
    let mut unpacked = Vec::new();
    for (i, k) in chain.iter().rev().enumerate() {
        let blob = cas.blob(k);
        let tar = fs::File::open(&blob).map_err(io_ctx(format!("opening {}", blob.display())))?;
        if chain.len() == 1 {
            unpacked.push(extract::Unpacker::new(&tree, false).unpack(io::BufReader::new(tar))?);
            rootfs_is_a_directory(&tree, k)?;
            break;
        }
        let stage = work.path.join(format!("stage-{i}"));
        fs::create_dir(&stage).map_err(io_ctx(format!("creating {}", stage.display())))?;
        let u = extract::Unpacker::new(&stage, true).unpack(io::BufReader::new(tar))?;
        if fs::symlink_metadata(stage.join("rootfs")).is_ok() {
            rootfs_is_a_directory(&stage, k)?;
        }
        extract::merge(&tree, &stage, &u)?;
        unpacked.push(u);
    }
    rootfs_is_a_directory(&tree, key)?;
    extract::apply_dir_meta(&tree, &unpacked.iter().collect::<Vec<_>>())?;
    Ok(work)
}

/// An ACI's `rootfs` must be a real directory: a symlink (to `/`, say)
/// would make the overlay's lower layer the host's root.
fn rootfs_is_a_directory(dir: &Path, key: &str) -> Result<(), ImageError> {
    match fs::symlink_metadata(dir.join("rootfs")) {
        Ok(m) if m.is_dir() => Ok(()),
        _ => Err(ImageError::Extract(extract::ExtractError::Unsafe {
            entry: "rootfs".into(),
            reason: format!("ACI {key}: rootfs is not a directory"),
        })),
    }
}

/// Renders an image's tree from its stored layers (after gc removed it).
pub(super) fn render_stored(store: &Store, image: &Image) -> Result<(), ImageError> {
    let cas = store.cas();
    let keys = image.layer_keys();
    let tree_size = if keys.is_empty() {
        // an ACI of rkt's own: its rootfs is in its own blob
        render_aci(cas, &image.id, &image.manifest)?
    } else {
        let (work, _) = render_layers(cas, &keys)?;
        commit_tree(cas, &work.path, &store.tree_id(image)?, &image.id, &image.manifest)?
    };
    cas.update_index(|i| {
        if let Some(a) = i.aciinfo.iter_mut().find(|a| a.blobkey == image.id) {
            a.treestoresize = tree_size;
        }
    })
    .map_err(io_ctx("updating the image index"))?;
    Ok(())
}

/// Unpacks stored layers (checked against their keys) into a new work
/// directory's tree, merged.
fn render_layers(cas: &Cas, keys: &[String]) -> Result<(WorkDir, Vec<LayerDone>), ImageError> {
    let work = WorkDir::new(cas)?;
    let results: Vec<Result<LayerDone, ImageError>> = std::thread::scope(|s| {
        let handles: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let dest = if i == 0 { work.rootfs() } else { work.path.join(format!("layer-{i}")) };
                s.spawn(move || {
                    if i > 0 {
                        fs::create_dir(&dest).map_err(io_ctx(format!("creating {}", dest.display())))?;
                    }
                    layer::run(stored_job(cas, i, key, dest)?)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(ImageError::Task("render thread panicked".into()))))
            .collect()
    });
    let done: Vec<LayerDone> = results.into_iter().collect::<Result<_, _>>()?;
    finish_tree(&work.rootfs(), &work.path, &done)?;
    Ok((work, done))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trees_files_are_never_written_through_an_images_links() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cas = Cas::new(tmp.path().join("cas"));
        cas.ensure().expect("cas");
        let outside = tmp.path().join("node-file");
        fs::write(&outside, "node").expect("node file");
        let work = tmp.path().join("work");
        let tree = work.join("tree");
        fs::create_dir_all(tree.join("rootfs/etc")).expect("rootfs");
        for name in ["manifest", "image", "hash", "rendered", rkt::tree::UNSYNCED] {
            std::os::unix::fs::symlink(&outside, tree.join(name)).expect("link");
        }
        fs::create_dir(tree.join("extra")).expect("extra");
        commit_tree(&cas, &work, "deps-sha512-t", "sha512-k", &ImageManifest::new("x")).expect("commit");
        assert_eq!(fs::read_to_string(&outside).expect("node file"), "node", "written through a link");
        let committed = cas.tree("deps-sha512-t");
        rkt::tree::finish_settling();
        for name in ["manifest", "image", "hash", "rendered"] {
            assert!(fs::symlink_metadata(committed.join(name)).expect(name).is_file(), "{name}");
        }
        assert!(!committed.join("extra").exists() && committed.join("rootfs/etc").is_dir());
        assert!(cas.tree_rendered("deps-sha512-t"));
    }
}
