//! The image test fixture: `tests/fixtures/seed-registry.sh` run once per test
//! binary on free loopback ports (plain, basic-auth and token-auth registries),
//! stopped by its watchdog when the test process exits. Its OCI layout and
//! registry storage live under the target dir, so re-runs take seconds.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::ports::{free_port, free_port_pair};

pub struct Registry {
    /// `127.0.0.1:PORT` of the anonymous registry.
    pub main: String,
    pub auth: String,
    pub token: String,
    pub token_realm: String,
    pub work: PathBuf,
    pub env: HashMap<String, String>,
}

pub const USER: &str = "testuser";
pub const PASS: &str = "testpass";

/// Starts (once) and returns the seeded registries.
pub fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("registry");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed-registry.sh");
        let (main, auth, token) = (free_port(), free_port(), free_port_pair());
        let out = Command::new("bash")
            .arg(&script)
            .arg(main.to_string())
            .env("WORK", &work)
            .env("AUTH_PORT", auth.to_string())
            .env("TOKEN_PORT", token.to_string())
            .env("WATCH_PID", std::process::id().to_string())
            .output()
            .expect("run seed-registry.sh");
        assert!(
            out.status.success(),
            "seed-registry.sh failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let env_text = std::fs::read_to_string(work.join(format!("seed-{main}.env"))).expect("seed env file");
        let env = env_text
            .split_whitespace()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        Registry {
            main: format!("127.0.0.1:{main}"),
            auth: format!("127.0.0.1:{auth}"),
            token: format!("127.0.0.1:{token}"),
            token_realm: format!("http://127.0.0.1:{}/token", token + 1),
            work,
            env,
        }
    })
}

impl Registry {
    /// The pre-minted bearer token the token server hands out.
    pub fn bearer_token(&self) -> String {
        let body = std::fs::read_to_string(self.work.join("token/www/token")).expect("token file");
        let v: serde_json::Value = serde_json::from_str(&body).expect("token json");
        v["token"].as_str().expect("token").to_string()
    }

    /// The registry's storage directory of the anonymous registry.
    pub fn storage(&self) -> PathBuf {
        self.work.join("store-main")
    }

    /// Uploads a blob to `repo` on the anonymous registry; returns its digest and size.
    pub async fn upload_blob(&self, repo: &str, bytes: Vec<u8>) -> (String, usize) {
        let http = reqwest::Client::new();
        let digest = sha256(&bytes);
        let r = http.post(format!("http://{}/v2/{repo}/blobs/uploads/", self.main)).send().await.expect("start upload");
        assert_eq!(r.status().as_u16(), 202, "start upload");
        let loc = r.headers()["location"].to_str().expect("location").to_string();
        let loc = if loc.starts_with("http") { loc } else { format!("http://{}{loc}", self.main) };
        let sep = if loc.contains('?') { '&' } else { '?' };
        let len = bytes.len();
        let r = http.put(format!("{loc}{sep}digest={digest}")).body(bytes).send().await.expect("put blob");
        assert_eq!(r.status().as_u16(), 201, "put blob");
        (digest, len)
    }

    /// Puts an OCI manifest at `repo:tag`; returns its digest.
    pub async fn put_manifest(&self, repo: &str, tag: &str, manifest: &serde_json::Value) -> String {
        let body = serde_json::to_vec(manifest).expect("manifest");
        let digest = sha256(&body);
        let r = reqwest::Client::new()
            .put(format!("http://{}/v2/{repo}/manifests/{tag}", self.main))
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(body)
            .send()
            .await
            .expect("put manifest");
        assert_eq!(r.status().as_u16(), 201, "put manifest");
        digest
    }

    /// Pushes an image made of `layers` (uncompressed tars, gzipped here) to
    /// `repo:latest` on the anonymous registry with the distribution API.
    /// Returns the layer digests (of the gzipped blobs).
    pub async fn push(&self, repo: &str, layers: &[Vec<u8>]) -> Vec<String> {
        self.push_image(repo, layers).await.0
    }

    /// [`Registry::push`], also returning the manifest digest.
    pub async fn push_image(&self, repo: &str, layers: &[Vec<u8>]) -> (Vec<String>, String) {
        let mut descs = Vec::new();
        let mut diff_ids = Vec::new();
        for l in layers {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(l).expect("gzip");
            let gz = gz.finish().expect("gzip");
            diff_ids.push(sha256(l));
            descs.push(self.upload_blob(repo, gz).await);
        }
        let config = serde_json::json!({"architecture":"amd64","os":"linux","config":{"Cmd":["/bin/true"]},
            "rootfs":{"type":"layers","diff_ids":diff_ids}});
        let (cdigest, csize) = self.upload_blob(repo, serde_json::to_vec(&config).expect("config")).await;
        let manifest = serde_json::json!({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
            "config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":cdigest,"size":csize},
            "layers": descs.iter().map(|(d, s)| serde_json::json!({"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":d,"size":s})).collect::<Vec<_>>()});
        let digest = self.put_manifest(repo, "latest", &manifest).await;
        (descs.into_iter().map(|(d, _)| d).collect(), digest)
    }
}

pub fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(bytes);
    format!("sha256:{}", h.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// A tar with raw entry names (so hostile names like `../x` can be written).
pub fn raw_tar(entries: &[(&str, tar::EntryType, &[u8], &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, kind, data, link) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_mode(if *kind == tar::EntryType::Directory { 0o755 } else { 0o644 });
        h.set_size(data.len() as u64);
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        let name = h.as_old_mut().name.as_mut();
        name[..path.len()].copy_from_slice(path.as_bytes());
        if !link.is_empty() {
            h.set_link_name(link).expect("link name");
        }
        h.set_cksum();
        b.append(&h, *data).expect("append");
    }
    b.into_inner().expect("tar")
}
