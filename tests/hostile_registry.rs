//! Registries that misbehave (issue 10): a decompression bomb, a registry
//! that stalls mid-blob, one that closes the connection mid-blob, and an
//! oversized manifest. Each pull fails with a clear error and leaves the
//! store as it was. The bomb goes through the real test registry; the rest
//! through a small HTTP server here that speaks just enough of the
//! distribution API (a real registry cannot be made to stall or to cut a
//! connection on purpose). The same server checks CRI's `identity_token`:
//! the OAuth2 refresh-token POST to the token realm (the fixture's token
//! server is a static file server that cannot answer a POST).

mod common;

use rkt::pod::DataDir;
use rktlet::image::{Credentials, RegistryConfig, Store};
use sha2::Digest as _;
use std::path::Path;
use std::time::Duration;
use tar::EntryType as T;
use tokio::io::AsyncWriteExt;

fn sha256(b: &[u8]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(b))
}

fn store(dir: &Path, config: RegistryConfig) -> Store {
    Store::open(&DataDir::new(dir.join("data")), config).expect("open store")
}

/// Every file of the store but lock files (made on demand), with sizes.
fn files(store: &Store) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![store.cas().root().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let m = e.metadata().expect("meta");
            let name = e.path().display().to_string();
            if m.is_dir() {
                stack.push(e.path());
            } else if !name.ends_with(".lock") && !name.contains("imagelocks") && !name.contains("treestorelocks") {
                out.push((name, m.len()));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_decompression_bomb_is_cut_at_the_layer_limit() {
    let reg = common::registry::registry();
    let t = tempfile::tempdir().expect("tmp");
    let config = RegistryConfig { max_layer_bytes: Some(32 << 20), ..Default::default() };
    let s = store(t.path(), config);
    let before = files(&s);
    // 120 MB of zeros: about 120 KB once gzipped
    let zeros = vec![0u8; 120 << 20];
    let layer = common::registry::raw_tar(&[("bomb", T::Regular, &zeros, "")]);
    let repo = format!("bomb-{}", uuid::Uuid::new_v4().simple());
    reg.push(&repo, &[layer]).await;
    let err = s.pull(&format!("{}/{repo}:latest", reg.main), Credentials::default(), None).await.expect_err("bomb");
    assert_eq!(rktlet::cri::image_error_code(&err), tonic::Code::FailedPrecondition, "{err}");
    assert!(err.to_string().contains("max_layer_bytes"), "{err}");
    assert_eq!(files(&s), before, "the store changed");
}

/// How the fake registry serves the layer blob.
#[derive(Clone, Copy, PartialEq)]
enum Blob {
    /// All of it.
    Whole,
    /// Half of it, then nothing (the connection stays open).
    Stall,
    /// Half of it, then the connection closes.
    Cut,
}

/// A registry on loopback serving `repo:latest`: a manifest (padded to
/// `manifest_pad` bytes when given), a config and one layer served as `blob`.
async fn fake_registry(blob: Blob, manifest_pad: usize) -> String {
    fake_registry_with(blob, manifest_pad, None).await
}

/// The access token the fake token realm hands out for the right refresh token.
const ACCESS: &str = "access-for-refresh";

/// [`fake_registry`]; with `refresh`, every `/v2/` request needs a bearer
/// token that the realm `/token` gives for a POST of that refresh token.
async fn fake_registry_with(blob: Blob, manifest_pad: usize, refresh: Option<&'static str>) -> String {
    let layer = common::registry::raw_tar(&[("f", T::Regular, &vec![7u8; 1 << 20], "")]);
    let config = serde_json::to_vec(&serde_json::json!({"architecture":"amd64","os":"linux",
        "rootfs":{"type":"layers","diff_ids":[sha256(&layer)]}}))
    .expect("config");
    let mut manifest = serde_json::json!({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
        "config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":sha256(&config),"size":config.len()},
        "layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":sha256(&layer),"size":layer.len()}]});
    if manifest_pad > 0 {
        manifest["annotations"] = serde_json::json!({ "pad": "x".repeat(manifest_pad) });
    }
    let manifest = serde_json::to_vec(&manifest).expect("manifest");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (layer_digest, config_digest) = (sha256(&layer), sha256(&config));
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else { return };
            let (layer, config, manifest) = (layer.clone(), config.clone(), manifest.clone());
            let (layer_digest, config_digest) = (layer_digest.clone(), config_digest.clone());
            tokio::spawn(async move {
                let Some(req) = common::http::read_request(&mut conn).await else { return };
                let (line, path, body) = (req.line.clone(), req.path().to_string(), req.body.clone());
                let header = |name: &str| req.header(name);
                if let Some(refresh) = refresh {
                    let form = String::from_utf8_lossy(&body).to_string();
                    let out = if path.starts_with("/token") {
                        let good = line.starts_with("POST")
                            && form.split('&').any(|kv| kv == "grant_type=refresh_token")
                            && form.split('&').any(|kv| kv == format!("refresh_token={refresh}"));
                        if good {
                            let token = format!(r#"{{"access_token":"{ACCESS}"}}"#);
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{token}",
                                token.len()
                            )
                        } else {
                            "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
                        }
                    } else if header("authorization") != format!("Bearer {ACCESS}") {
                        let addr = header("host");
                        format!(
                            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"http://{addr}/token\",service=\"fake\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        )
                    } else {
                        String::new()
                    };
                    if !out.is_empty() {
                        let _ = conn.write_all(out.as_bytes()).await;
                        return;
                    }
                }
                let reply = |ctype: &str, body: &[u8]| {
                    let mut r = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nDocker-Content-Digest: {}\r\nConnection: close\r\n\r\n",
                        body.len(),
                        sha256(body)
                    )
                    .into_bytes();
                    r.extend_from_slice(body);
                    r
                };
                let out = if path == "/v2/" {
                    reply("application/json", b"{}")
                } else if path.ends_with("/manifests/latest") {
                    reply("application/vnd.oci.image.manifest.v1+json", &manifest)
                } else if path.ends_with(&config_digest) {
                    reply("application/octet-stream", &config)
                } else if path.ends_with(&layer_digest) && blob == Blob::Whole {
                    reply("application/octet-stream", &layer)
                } else if path.ends_with(&layer_digest) {
                    let full = reply("application/octet-stream", &layer);
                    let half = full.len() - layer.len() / 2;
                    let _ = conn.write_all(&full[..half]).await;
                    let _ = conn.flush().await;
                    if let Blob::Stall = blob {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    return;
                } else {
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
                };
                let _ = conn.write_all(&out).await;
            });
        }
    });
    addr
}

/// A pull that must fail, guarded so that a hang fails the test instead of stalling it.
async fn failing_pull(s: &Store, reference: &str) -> rktlet::image::ImageError {
    tokio::time::timeout(Duration::from_secs(60), s.pull(reference, Credentials::default(), None))
        .await
        .expect("the pull hung")
        .expect_err("the pull must fail")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_or_cut_blob_fails_and_leaves_nothing() {
    let t = tempfile::tempdir().expect("tmp");
    let s = store(t.path(), RegistryConfig { stall_timeout_secs: Some(1), ..Default::default() });
    let before = files(&s);

    let addr = fake_registry(Blob::Stall, 0).await;
    let err = failing_pull(&s, &format!("{addr}/stalls:latest")).await;
    assert_eq!(rktlet::cri::image_error_code(&err), tonic::Code::Unavailable, "{err}");
    assert!(err.to_string().contains("no data for 1s"), "{err}");
    assert_eq!(files(&s), before, "a stalled pull changed the store");

    let addr = fake_registry(Blob::Cut, 0).await;
    let err = failing_pull(&s, &format!("{addr}/cut:latest")).await;
    assert_eq!(rktlet::cri::image_error_code(&err), tonic::Code::Unavailable, "{err}");
    assert!(err.to_string().contains("connection broke"), "{err}");
    assert_eq!(files(&s), before, "a cut pull changed the store");

    // a manifest beyond the 4 MiB limit is refused before it is parsed
    let addr = fake_registry(Blob::Cut, 5 << 20).await;
    let err = failing_pull(&s, &format!("{addr}/huge:latest")).await;
    assert!(err.to_string().contains("limit"), "{err}");
    assert_eq!(files(&s), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_identity_token_is_exchanged_at_the_token_realm() {
    let t = tempfile::tempdir().expect("tmp");
    let s = store(t.path(), RegistryConfig::default());
    let addr = fake_registry_with(Blob::Whole, 0, Some("the-refresh-token")).await;
    let reference = format!("{addr}/private:latest");
    let wrong = Credentials::from_cri("", "", "", "not-it", "");
    let err = s.pull(&reference, wrong, None).await.expect_err("a wrong refresh token");
    assert_eq!(rktlet::cri::image_error_code(&err), tonic::Code::Unauthenticated, "{err}");
    let right = Credentials::from_cri("", "", "", "the-refresh-token", "");
    let image = s.pull(&reference, right, None).await.expect("pull with the identity token");
    let tree = s.tree(&image.id).expect("tree");
    assert_eq!(std::fs::metadata(tree.rootfs().join("f")).expect("layer file").len(), 1 << 20);
}
