//! rkt's own images: ACIs fetched from a file, an https URL, or an appc
//! name through discovery (`discovery.rs`). An ACI is a tar (gzip, bzip2,
//! xz, zstd or plain) of `manifest` (an appc image manifest) and `rootfs/`
//! (reading one, its plain tar and its manifest, is `rkt::aci`).
//! Unless verification is skipped, its detached OpenPGP signature
//! (`<file>.asc`) must verify with a key trusted for the manifest's name
//! (`crate::trust`), and a fetch by name must get an image of that name and
//! those labels. The plain tar is stored under rkt's key (SHA-512 of the
//! uncompressed tar), the manifest beside it, the index row last; the tree is
//! rendered from the stored tars at once.
//!
//! Dependencies are resolved by name and labels (or the `imageID` the
//! manifest pins): from the store first, then by discovery, each checked
//! like the image itself. The stored copy of the manifest records the key
//! each dependency resolved to, so the image's tree never changes when a
//! newer version of a dependency is fetched later. The tree renders the
//! dependencies breadth-first from the image, lowest first, upper images
//! overriding files of lower ones (as rkt's acirenderer orders them).
//!
//! URL fetches keep rkt's `remote` rows: `ETag` and `Cache-Control: max-age`
//! of the response. Within max-age the stored image is used without asking;
//! after it, the fetch is conditional (`If-None-Match`) and a 304 keeps it.

use super::discovery;
use super::{Image, ImageError, Store, io_ctx};
use crate::base::time::now_nanos;
use crate::trust::TrustStore;
use rkt::aci::{MAX_MANIFEST, decompressed, manifest_of, plain_tar};
use rkt::cas::{AciInfo, Remote};
use rkt::digest::cas_key_of;
use rkt::schema::ImageManifest;
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

pub(crate) use rkt::index::ACI_PREFIX;

/// The largest ACI downloaded whole.
const MAX_ACI_BYTES: u64 = 4 << 30;
/// How far into an unverified ACI the manifest is looked for.
const MANIFEST_SCAN_BYTES: u64 = 64 << 20;
/// The largest discovery page read.
const MAX_PAGE_BYTES: u64 = 1 << 20;
/// Dependency chains deeper than this are refused (a cycle, or abuse).
const MAX_DEPTH: usize = 16;

/// Where an ACI comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    File(PathBuf),
    Url(String),
    /// An appc name and the labels asked for (`version` from `name:version`).
    Name {
        name: String,
        labels: BTreeMap<String, String>,
    },
}

impl Source {
    /// A file path (`/x.aci`, `./x.aci`, `file://...`, anything ending in
    /// `.aci`, or an existing file), an `http(s)://` URL, or an appc name
    /// with an optional `:version` and `,label=value` pairs.
    pub(crate) fn parse(s: &str) -> Result<Source, ImageError> {
        let s = s.strip_prefix(ACI_PREFIX).unwrap_or(s);
        if s.starts_with("https://") || s.starts_with("http://") {
            return Ok(Source::Url(s.to_string()));
        }
        if let Some(p) = s.strip_prefix("file://") {
            return Ok(Source::File(p.into()));
        }
        if s.starts_with('/')
            || s.starts_with("./")
            || s.starts_with("../")
            || s.ends_with(".aci")
            || Path::new(s).is_file()
        {
            return Ok(Source::File(s.into()));
        }
        let mut parts = s.split(',');
        let first = parts.next().unwrap_or_default();
        let (name, version) = match first.split_once(':') {
            Some((n, v)) => (n, Some(v)),
            None => (first, None),
        };
        let mut labels = BTreeMap::new();
        if let Some(v) = version {
            labels.insert("version".to_string(), v.to_string());
        }
        for kv in parts {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| ImageError::Unsupported(format!("{s}: labels are written label=value, got {kv:?}")))?;
            labels.insert(k.to_string(), v.to_string());
        }
        if !discovery::is_ac_identifier(name) {
            return Err(ImageError::Unsupported(format!(
                "{s:?} is neither a file, an http(s) URL nor an appc image name"
            )));
        }
        Ok(Source::Name { name: name.to_string(), labels })
    }
}

/// What a fetch by name must get.
#[derive(Debug, Clone)]
struct Wanted {
    name: String,
    labels: BTreeMap<String, String>,
}

impl Wanted {
    /// The manifest's name must be the one asked; every label asked must be
    /// on it with that value (`version=latest` asks for no particular version).
    fn check(&self, m: &ImageManifest) -> Result<(), String> {
        if m.name != self.name {
            return Err(format!("asked for {}, the image is {}", self.name, m.name));
        }
        for (k, v) in &self.labels {
            if k == "version" && v == "latest" {
                continue;
            }
            match m.label(k) {
                Some(have) if have == v => {}
                have => return Err(format!("{}: asked for {k}={v}, the image has {have:?}", self.name)),
            }
        }
        Ok(())
    }

    fn matches(&self, m: &ImageManifest) -> bool {
        self.check(m).is_ok()
    }
}

/// Fetches ACIs into a store.
pub(crate) struct Fetcher<'a> {
    store: &'a Store,
    trust: Option<&'a TrustStore>,
    /// Discovery and downloads over plain http from any host
    /// (`--insecure-options=http`); loopback hosts always may.
    pub allow_http: bool,
    http: reqwest::Client,
}

/// A boxed future, for the recursion through dependencies.
type Boxed<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, ImageError>> + Send + 'a>>;

impl<'a> Fetcher<'a> {
    /// With `trust`, every image must carry a signature by a key trusted for
    /// its name; without, signatures are not checked (`--insecure-options=image`).
    pub(crate) fn new(store: &'a Store, trust: Option<&'a TrustStore>) -> Fetcher<'a> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("rktlet/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(std::time::Duration::from_secs(30))
            // a redirect may not downgrade to http on another host, nor reach loopback from afar
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                let first = attempt.previous().first().cloned();
                let next = attempt.url();
                let local = |u: &reqwest::Url| u.host_str().is_some_and(super::hosts::is_loopback);
                let ok = first.as_ref().is_some_and(|f| {
                    (next.scheme() == "https" || (next.scheme() == f.scheme() && next.host_str() == f.host_str()))
                        && (!local(next) || local(f))
                });
                if attempt.previous().len() >= 10 {
                    attempt.error("too many redirects")
                } else if ok {
                    attempt.follow()
                } else {
                    attempt.error("redirect to plain http elsewhere or to loopback refused")
                }
            }))
            .read_timeout(store.registry().config.stall_timeout())
            .build()
            .unwrap_or_default();
        Fetcher { store, trust, allow_http: false, http }
    }

    /// Fetches what `asked` names ([`Source::parse`]) with its dependencies
    /// and returns the image; `aci:<asked>` resolves to it afterwards.
    pub(crate) async fn fetch(&self, asked: &str) -> Result<Image, ImageError> {
        let src = Source::parse(asked)?;
        let key = match &src {
            Source::File(p) => self.file(p, None, 0).await?,
            Source::Url(u) => self.url(u, None, None, 0).await?,
            Source::Name { name, labels } => {
                let wanted = Wanted { name: name.clone(), labels: labels.clone() };
                self.discovered(&wanted, 0).await?
            }
        };
        if !matches!(src, Source::Url(_)) {
            // the exact form asked, as ImageStatus will ask again
            let bare = asked.strip_prefix(ACI_PREFIX).unwrap_or(asked);
            let row = Remote {
                aciurl: format!("{ACI_PREFIX}{}", bare.strip_prefix("file://").unwrap_or(bare)),
                sigurl: String::new(),
                etag: String::new(),
                blobkey: key.clone(),
                cachemaxage: 0,
                downloadtime: now_nanos(),
            };
            self.store.cas().update_index(|i| i.upsert_remote(row)).map_err(io_ctx("updating the image index"))?;
        }
        self.store.resolve(&key)
    }

    async fn file(&self, path: &Path, wanted: Option<&Wanted>, depth: usize) -> Result<String, ImageError> {
        let p = path.to_path_buf();
        let (bytes, sig) = tokio::task::spawn_blocking(move || {
            let bytes = fs::read(&p).map_err(io_ctx(format!("reading {}", p.display())))?;
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let sig_path = p.with_file_name(format!("{name}.asc"));
            let sig = fs::read(&sig_path).map_err(|e| format!("{} ({e})", sig_path.display()));
            Ok::<_, ImageError>((bytes, sig))
        })
        .await
        .map_err(|e| ImageError::Task(e.to_string()))??;
        self.import(&path.display().to_string(), bytes, sig, wanted, depth, Vec::new()).await
    }

    /// `url` (its signature at `asc`, default `<url>.asc`), with the cache
    /// rules of the `remote` row.
    fn url<'s>(
        &'s self,
        url: &'s str,
        asc: Option<&'s str>,
        wanted: Option<&'s Wanted>,
        depth: usize,
    ) -> Boxed<'s, String> {
        Box::pin(async move {
            let parsed =
                reqwest::Url::parse(url).map_err(|e| ImageError::Unsupported(format!("invalid URL {url}: {e}")))?;
            // a URL that discovery found may use loopback http only for a loopback name
            // (else any page could point the node at its own local services)
            let name_local = wanted.is_none_or(|w| super::hosts::is_loopback(w.name.split('/').next().unwrap_or("")));
            let loopback = name_local && parsed.host_str().is_some_and(super::hosts::is_loopback);
            if parsed.scheme() != "https" && !(parsed.scheme() == "http" && (loopback || self.allow_http)) {
                return Err(ImageError::Unsupported(format!(
                    "{url}: ACIs are fetched over https (http only from loopback or with --insecure-options=http)"
                )));
            }
            let aciurl = format!("{ACI_PREFIX}{url}");
            let cas = self.store.cas();
            let cached = cas
                .read_index()
                .map_err(io_ctx("reading the image index"))?
                .remote
                .into_iter()
                .find(|r| r.aciurl == aciurl && cas.blob(&r.blobkey).exists())
                // a copy fetched unverified never stands in for a verified fetch
                .filter(|r| self.trust.is_none() || self.verified(&r.blobkey))
                // nor one that is not what a fetch by name asks for
                .filter(|r| wanted.is_none_or(|w| self.store.read_manifest(&r.blobkey).is_ok_and(|m| w.matches(&m))));
            let now = now_nanos();
            if let Some(row) = &cached
                && row.downloadtime.saturating_add(row.cachemaxage.saturating_mul(1_000_000_000)) > now
            {
                tracing::debug!(url, key = row.blobkey, "ACI still fresh in the store (max-age)");
                return Ok(row.blobkey.clone());
            }
            let mut req = self.http.get(url);
            if let Some(row) = cached.as_ref().filter(|r| !r.etag.is_empty()) {
                req = req.header(reqwest::header::IF_NONE_MATCH, &row.etag);
            }
            let resp = req.send().await.map_err(|e| ImageError::Network(format!("{url}: {e}")))?;
            let etag = header(&resp, reqwest::header::ETAG);
            let max_age = max_age(&header(&resp, reqwest::header::CACHE_CONTROL));
            if resp.status() == reqwest::StatusCode::NOT_MODIFIED
                && let Some(mut row) = cached
            {
                tracing::debug!(url, key = row.blobkey, "ACI not modified (ETag)");
                row.downloadtime = now;
                row.cachemaxage = max_age;
                let key = row.blobkey.clone();
                cas.update_index(|i| i.upsert_remote(row)).map_err(io_ctx("updating the image index"))?;
                return Ok(key);
            }
            let bytes = body(resp, url, MAX_ACI_BYTES).await?;
            let sigurl = asc.map_or_else(|| format!("{url}.asc"), str::to_string);
            let sig = match self.trust {
                Some(_) => match self.http.get(&sigurl).send().await {
                    Ok(r) => body(r, &sigurl, MAX_MANIFEST).await.map_err(|e| e.to_string()),
                    Err(e) => Err(format!("{sigurl}: {e}")),
                },
                None => Err("not fetched".into()),
            };
            let row = Remote { aciurl, sigurl, etag, blobkey: String::new(), cachemaxage: max_age, downloadtime: now };
            self.import(url, bytes, sig, wanted, depth, vec![row]).await
        })
    }

    /// Discovery, then the URL it found.
    fn discovered<'s>(&'s self, wanted: &'s Wanted, depth: usize) -> Boxed<'s, String> {
        Box::pin(async move {
            let http = &self.http;
            let endpoint = discovery::discover(&wanted.name, &wanted.labels, self.allow_http, |u| async move {
                let resp = http.get(&u).send().await.map_err(|e| format!("{u}: {e}"))?;
                if !resp.status().is_success() {
                    return Err(format!("{u}: {}", resp.status()));
                }
                let page = body(resp, &u, MAX_PAGE_BYTES).await.map_err(|e| e.to_string())?;
                Ok(String::from_utf8_lossy(&page).into_owned())
            })
            .await?;
            tracing::info!(name = wanted.name, url = endpoint.aci, "discovered");
            self.url(&endpoint.aci, Some(&endpoint.asc), Some(wanted), depth).await
        })
    }

    /// Whether the stored image `key` was imported with its signature checked.
    fn verified(&self, key: &str) -> bool {
        self.store.cas().read_index().is_ok_and(|i| i.aci(key).is_some_and(|a| a.verified))
    }

    /// A dependency's key: the pinned `imageID` if stored, else the newest
    /// stored image of that name and labels, else discovery.
    async fn dependency(&self, dep: &rkt::schema::Dependency, depth: usize) -> Result<String, ImageError> {
        let wanted = Wanted {
            name: dep.image_name.clone(),
            labels: dep.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect(),
        };
        let index = self.store.cas().read_index().map_err(io_ctx("reading the image index"))?;
        // an ACI of rkt's own (not a docker image, whose layers are no ACIs)
        let stored = |key: &str| {
            index.aci(key).is_some_and(|a| !a.is_layer() && (self.trust.is_none() || a.verified))
                && self.store.cas().blob(key).exists()
                && self.store.read_manifest(key).is_ok_and(|m| {
                    wanted.matches(&m)
                        && !m.dependencies.iter().any(|d| d.image_name.starts_with(rkt::index::LAYER_NAME_PREFIX))
                })
        };
        // appc writes the full SHA-512 (128 hex); rkt's keys keep 64
        let pinned = dep.image_id.as_deref().map(|id| match id.strip_prefix("sha512-") {
            Some(hex) if hex.len() > 64 => format!("sha512-{}", &hex[..64]),
            _ => id.to_string(),
        });
        let dep = rkt::schema::Dependency { image_id: pinned, ..dep.clone() };
        if let Some(id) = &dep.image_id {
            if stored(id) {
                return Ok(id.clone());
            }
        } else {
            let mut rows: Vec<&AciInfo> = index.aciinfo.iter().filter(|a| a.name == dep.image_name).collect();
            rows.sort_by_key(|a| std::cmp::Reverse(a.importtime));
            if let Some(a) = rows.into_iter().find(|a| stored(&a.blobkey)) {
                return Ok(a.blobkey.clone());
            }
        }
        let key = self.discovered(&wanted, depth).await?;
        match &dep.image_id {
            Some(id) if *id != key => Err(ImageError::Verify {
                what: format!("dependency {}", dep.image_name),
                detail: format!("the manifest pins {id}, discovery found {key}"),
            }),
            _ => Ok(key),
        }
    }

    /// Checks and stores one ACI and its dependencies; returns its key.
    async fn import(
        &self,
        from: &str,
        bytes: Vec<u8>,
        sig: Result<Vec<u8>, String>,
        wanted: Option<&Wanted>,
        depth: usize,
        mut remotes: Vec<Remote>,
    ) -> Result<String, ImageError> {
        if depth > MAX_DEPTH {
            return Err(ImageError::Unsupported(format!(
                "{from}: dependencies nest deeper than {MAX_DEPTH} (a cycle?)"
            )));
        }
        let what = format!("ACI {from}");
        // the manifest alone first (it names the keys that may sign), the
        // signature over the bytes as served, and only then the whole tar
        let (bytes, manifest) = tokio::task::spawn_blocking(move || {
            // the manifest comes first in ACIs; a bomb or a huge entry before it stops here
            let reader = decompressed(&bytes).map_err(io_ctx("decompressing the ACI"))?;
            let manifest = manifest_of(reader.take(MANIFEST_SCAN_BYTES))?;
            Ok::<_, ImageError>((bytes, manifest))
        })
        .await
        .map_err(|e| ImageError::Task(e.to_string()))??;
        if let Some(trust) = self.trust {
            let sig = sig.map_err(|e| ImageError::Verify {
                what: what.clone(),
                detail: format!("no signature {e}; --insecure-options=image skips the check"),
            })?;
            let by = trust
                .verify(&manifest.name, &bytes, &sig)
                .map_err(|e| ImageError::Verify { what: what.clone(), detail: e.to_string() })?;
            tracing::info!(image = manifest.name, key = by, "ACI signature verified");
        }
        if let Some(w) = wanted {
            w.check(&manifest).map_err(|detail| ImageError::Verify { what: what.clone(), detail })?;
        }
        let tar = tokio::task::spawn_blocking(move || plain_tar(&bytes, MAX_ACI_BYTES))
            .await
            .map_err(|e| ImageError::Task(e.to_string()))??;
        let key = cas_key_of(&tar);
        // an image already stored keeps the dependencies it was pinned to
        let known = self.store.cas().read_index().map_err(io_ctx("reading the image index"))?.aci(&key).is_some()
            && (self.trust.is_none() || self.verified(&key));
        let stored = match self.store.read_manifest(&key) {
            Ok(m) if known => m,
            _ => {
                let mut stored = manifest;
                for dep in &mut stored.dependencies {
                    let key = self.dependency(dep, depth + 1).await?;
                    dep.image_id = Some(key);
                }
                stored
            }
        };
        let verified = self.trust.is_some();
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let cas = store.cas();
            let blob = cas.blob(&key);
            let mpath = cas.image_manifest(&key);
            for p in [&blob, &mpath] {
                let parent = p.parent().unwrap_or(p);
                fs::create_dir_all(parent).map_err(io_ctx(format!("creating {}", parent.display())))?;
            }
            let json = serde_json::to_vec(&stored).map_err(|e| io_ctx("encoding the manifest")(io::Error::other(e)))?;
            rkt::fs::write_atomic(&blob, &tar, 0o644).map_err(io_ctx(format!("writing {}", blob.display())))?;
            let forget = |e: ImageError| {
                // a first import that failed leaves no blob behind (gc only knows indexed ones)
                if !known {
                    let _ = fs::remove_file(&blob);
                }
                e
            };
            let tree_size = super::pull::render_aci(cas, &key, &stored).map_err(forget)?;
            // the manifest (with its pinned dependencies) once the tree stands
            rkt::fs::write_atomic(&mpath, &json, 0o644).map_err(io_ctx(format!("writing {}", mpath.display())))?;
            let now = now_nanos();
            let deps: Vec<String> = stored.dependencies.iter().filter_map(|d| d.image_id.clone()).collect();
            let gone = cas
                .update_index(|i| {
                    // a dependency removed meanwhile (image rm checks dependents in here too)
                    if let Some(d) = deps.iter().find(|d| i.aci(d).is_none()) {
                        return Some(d.clone());
                    }
                    for mut r in remotes.drain(..) {
                        r.blobkey = key.clone();
                        i.upsert_remote(r);
                    }
                    i.upsert_aci(AciInfo {
                        blobkey: key.clone(),
                        name: stored.name.clone(),
                        importtime: now,
                        lastused: now,
                        latest: false,
                        size: tar.len() as i64,
                        treestoresize: tree_size,
                        verified,
                    });
                    None
                })
                .map_err(io_ctx("updating the image index"))?;
            if let Some(d) = gone {
                return Err(forget(ImageError::InUse(format!(
                    "dependency {d} was removed during the import; fetch again"
                ))));
            }
            Ok(key)
        })
        .await
        .map_err(|e| ImageError::Task(e.to_string()))?
    }
}

fn header(resp: &reqwest::Response, name: reqwest::header::HeaderName) -> String {
    resp.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

/// Seconds of `max-age` in a Cache-Control value (0 when absent or `no-cache`).
fn max_age(cache_control: &str) -> i64 {
    let directives: Vec<&str> = cache_control.split(',').map(str::trim).collect();
    if directives.iter().any(|d| d.eq_ignore_ascii_case("no-cache") || d.eq_ignore_ascii_case("no-store")) {
        return 0;
    }
    directives.iter().find_map(|d| d.strip_prefix("max-age=").and_then(|v| v.parse::<i64>().ok())).unwrap_or(0).max(0)
}

async fn body(resp: reqwest::Response, url: &str, limit: u64) -> Result<Vec<u8>, ImageError> {
    if !resp.status().is_success() {
        let status = resp.status();
        return Err(if status == reqwest::StatusCode::NOT_FOUND {
            let host = reqwest::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default();
            ImageError::Registry(super::RegistryError::NotFound { registry: host, what: url.to_string() })
        } else {
            ImageError::Network(format!("{url}: HTTP {status}"))
        });
    }
    Ok(super::registry::read_limited(resp, limit, url).await?.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources() {
        assert_eq!(Source::parse("aci:./x.aci").ok(), Some(Source::File("./x.aci".into())));
        assert_eq!(Source::parse("file:///a/b").ok(), Some(Source::File("/a/b".into())));
        assert_eq!(Source::parse("https://e.com/x.aci").ok(), Some(Source::Url("https://e.com/x.aci".into())));
        let labels = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(
            Source::parse("aci:example.com/app:1.0,os=linux").ok(),
            Some(Source::Name {
                name: "example.com/app".into(),
                labels: labels(&[("version", "1.0"), ("os", "linux")])
            })
        );
        assert_eq!(
            Source::parse("example.com/app").ok(),
            Some(Source::Name { name: "example.com/app".into(), labels: labels(&[]) })
        );
        assert!(Source::parse("Example.com/App").is_err());
        assert!(Source::parse("example.com/app,os").is_err());
    }

    #[test]
    fn cache_control() {
        assert_eq!(max_age("public, max-age=600"), 600);
        assert_eq!(max_age("max-age=600, no-cache"), 0);
        assert_eq!(max_age(""), 0);
    }
}
