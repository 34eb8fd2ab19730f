//! The signature policy for registry pulls (issue 11): cosign "simple
//! signing" signatures made by OpenSSL (an independent implementation of
//! ECDSA P-256 and Ed25519), pushed to the real test registry by its API,
//! checked before anything is stored.

mod common;

use base64::Engine;
use common::registry::{raw_tar, registry};
use rkt::pod::DataDir;
use rktlet::image::{ImageError, RegistryConfig, Store};
use std::path::{Path, PathBuf};
use std::process::Command;

fn openssl(args: &[&str]) {
    let out = Command::new("openssl").args(args).output().expect("openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A key pair made by OpenSSL: `<name>.pem` (private), `<name>.pub` (SPKI PEM).
struct Key {
    private: PathBuf,
    public: PathBuf,
    ed25519: bool,
}

impl Key {
    fn new(dir: &Path, name: &str, ed25519: bool) -> Key {
        let private = dir.join(format!("{name}.pem"));
        let public = dir.join(format!("{name}.pub"));
        let p = private.to_str().expect("utf8");
        if ed25519 {
            openssl(&["genpkey", "-algorithm", "ed25519", "-out", p]);
        } else {
            openssl(&["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", p]);
        }
        openssl(&["pkey", "-in", p, "-pubout", "-out", public.to_str().expect("utf8")]);
        Key { private, public, ed25519 }
    }

    /// The base64 signature of `payload`, as cosign puts it in its annotation.
    fn sign(&self, dir: &Path, payload: &[u8]) -> String {
        let input = dir.join("payload.in");
        let output = dir.join("payload.sig");
        std::fs::write(&input, payload).expect("payload");
        let (i, o, k) =
            (input.to_str().expect("utf8"), output.to_str().expect("utf8"), self.private.to_str().expect("utf8"));
        if self.ed25519 {
            openssl(&["pkeyutl", "-sign", "-inkey", k, "-rawin", "-in", i, "-out", o]);
        } else {
            openssl(&["dgst", "-sha256", "-sign", k, "-out", o, i]);
        }
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(&output).expect("signature"))
    }
}

fn payload(repo: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"critical":{"identity":{"docker-reference":repo},
        "image":{"docker-manifest-digest":digest},"type":"cosign container image signature"},"optional":null}))
    .expect("payload")
}

/// Pushes a cosign signature manifest for `digest` in `repo` with the given
/// (payload, base64 signature) layers.
async fn push_signature(repo: &str, digest: &str, layers: &[(Vec<u8>, String)]) {
    let reg = registry();
    let (cdigest, csize) = reg.upload_blob(repo, b"{}".to_vec()).await;
    let mut descs = Vec::new();
    for (payload, sig) in layers {
        let (d, s) = reg.upload_blob(repo, payload.clone()).await;
        descs.push(serde_json::json!({"mediaType":"application/vnd.dev.cosign.simplesigning.v1+json",
            "digest":d,"size":s,"annotations":{"dev.cosignproject.cosign/signature":sig}}));
    }
    let manifest = serde_json::json!({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
        "config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":cdigest,"size":csize},"layers":descs});
    reg.put_manifest(repo, &format!("{}.sig", digest.replacen(':', "-", 1)), &manifest).await;
}

/// Pushes a one-file image unique to `repo`; returns its manifest digest.
async fn push_image(repo: &str) -> String {
    let content = format!("image {repo}\n");
    let layer = raw_tar(&[("etc/which", tar::EntryType::Regular, content.as_bytes(), "")]);
    registry().push_image(repo, &[layer]).await.1
}

fn store(dir: &Path, policy: &Path) -> Store {
    Store::open(&DataDir::new(dir.join("data")), RegistryConfig::default())
        .and_then(|s| s.with_policy((policy.to_path_buf(), true)))
        .expect("open store")
}

/// Nothing of a refused pull is in the store: no image, no layer blob.
fn assert_nothing_stored(store: &Store, dir: &Path) {
    assert!(store.list().expect("list").is_empty());
    let blobs = dir.join("data/cas/blob");
    let n = walk_files(&blobs);
    assert_eq!(n, 0, "blobs left in {}", blobs.display());
}

fn walk_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries.flatten().map(|e| if e.path().is_dir() { walk_files(&e.path()) } else { 1 }).sum()
}

fn refused(r: Result<rktlet::image::Image, ImageError>, needle: &str) {
    match r {
        Err(e @ ImageError::Policy(_)) => {
            assert_eq!(rktlet::cri::image_error_code(&e), tonic::Code::PermissionDenied);
            assert!(e.to_string().contains(needle), "{e} lacks {needle:?}");
        }
        other => panic!("expected a policy refusal containing {needle:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn signed_by_policy_over_cosign_signatures() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path();
    let reg = &registry().main;
    let p256 = Key::new(dir, "team", false);
    let ed = Key::new(dir, "edteam", true);
    let stranger = Key::new(dir, "stranger", false);
    let policy = dir.join("policy.json");
    std::fs::write(
        &policy,
        serde_json::to_vec(&serde_json::json!({
            "default": [{"type": "insecureAcceptAnything"}],
            "transports": {"docker": {
                format!("{reg}/sig"): [{"type": "signedBy", "keyPath": p256.public}],
                format!("{reg}/sig/ed"): [{"type": "sigstoreSigned", "keyPath": ed.public}],
                format!("{reg}/sig/open"): [{"type": "insecureAcceptAnything"}],
                format!("{reg}/closed"): [{"type": "reject"}],
            }}
        }))
        .expect("policy json"),
    )
    .expect("write policy");

    // valid ECDSA P-256 signature: pulls
    let repo = "sig/good";
    let digest = push_image(repo).await;
    let pl = payload(&format!("{reg}/{repo}"), &digest);
    push_signature(repo, &digest, &[(pl.clone(), p256.sign(dir, &pl))]).await;
    let d1 = dir.join("s1");
    let s = store(&d1, &policy);
    let img = s.pull(&format!("{reg}/{repo}"), Default::default(), None).await.expect("signed image pulls");
    assert!(s.tree(&img.id).expect("tree").rootfs().join("etc/which").is_file());

    // valid Ed25519 signature under its own scope
    let repo = "sig/ed/app";
    let digest = push_image(repo).await;
    let pl = payload(&format!("{reg}/{repo}"), &digest);
    push_signature(repo, &digest, &[(pl.clone(), ed.sign(dir, &pl))]).await;
    let d2 = dir.join("s2");
    store(&d2, &policy).pull(&format!("{reg}/{repo}"), Default::default(), None).await.expect("ed25519 signed pulls");

    // refused, each with nothing stored
    let zeros = format!("sha256:{}", "0".repeat(64));
    for (i, (repo, needle)) in [
        ("sig/unsigned", "does not exist"),
        ("sig/stranger", "not signed by a trusted key"),
        ("sig/tampered", "not signed by a trusted key"),
        ("sig/copied", "signature is for"),
        ("sig/renamed", "signature names"),
    ]
    .into_iter()
    .enumerate()
    {
        let digest = push_image(repo).await;
        let own = payload(&format!("{reg}/{repo}"), &digest);
        let layers = match repo {
            // signed by a key the policy does not trust
            "sig/stranger" => vec![(own.clone(), stranger.sign(dir, &own))],
            // the payload changed after signing
            "sig/tampered" => {
                let sig = p256.sign(dir, &own);
                let mut bad = own.clone();
                bad.insert(bad.len() - 3, b' ');
                vec![(bad, sig)]
            }
            // a good signature of another image copied next to this one
            "sig/copied" => {
                let other = payload(&format!("{reg}/{repo}"), &zeros);
                vec![(other.clone(), p256.sign(dir, &other))]
            }
            // a good signature of this digest naming another repository
            "sig/renamed" => {
                let other = payload(&format!("{reg}/elsewhere/app"), &digest);
                vec![(other.clone(), p256.sign(dir, &other))]
            }
            _ => Vec::new(),
        };
        if !layers.is_empty() {
            push_signature(repo, &digest, &layers).await;
        }
        let d = dir.join(format!("r{i}"));
        let s = store(&d, &policy);
        refused(s.pull(&format!("{reg}/{repo}"), Default::default(), None).await, needle);
        assert_nothing_stored(&s, &d);
    }

    // the P-256 signature does not satisfy the Ed25519 scope
    let repo = "sig/ed/wrongkey";
    let digest = push_image(repo).await;
    let pl = payload(&format!("{reg}/{repo}"), &digest);
    push_signature(repo, &digest, &[(pl.clone(), p256.sign(dir, &pl))]).await;
    let d = dir.join("r-ed");
    refused(
        store(&d, &policy).pull(&format!("{reg}/{repo}"), Default::default(), None).await,
        "not signed by a trusted key",
    );

    // a more specific accept-anything scope, the default, and reject
    push_image("sig/open/app").await;
    store(&dir.join("s3"), &policy)
        .pull(&format!("{reg}/sig/open/app"), Default::default(), None)
        .await
        .expect("unsigned image in an open scope pulls");
    push_image("plain/app").await;
    store(&dir.join("s4"), &policy)
        .pull(&format!("{reg}/plain/app"), Default::default(), None)
        .await
        .expect("insecureAcceptAnything default keeps pulling unsigned images");
    push_image("closed/app").await;
    let d = dir.join("r-closed");
    let s = store(&d, &policy);
    refused(s.pull(&format!("{reg}/closed/app"), Default::default(), None).await, "rejects images of scope");
    assert_nothing_stored(&s, &d);
}

fn pull_request(image: String) -> rktlet::proto::v1::PullImageRequest {
    use rktlet::proto::v1::{ImageSpec, PullImageRequest};
    PullImageRequest { image: Some(ImageSpec { image, ..Default::default() }), ..Default::default() }
}

#[tokio::test]
async fn policy_refusal_over_cri_and_bad_policy_files() {
    let t = tempfile::tempdir().expect("tempdir");
    let reg = &registry().main;
    let key = Key::new(t.path(), "k", false);
    let conf = t.path().join("conf");
    std::fs::create_dir_all(&conf).expect("conf dir");
    std::fs::write(conf.join("registries.toml"), "").expect("registries.toml");
    std::fs::write(
        conf.join("policy.json"),
        serde_json::to_vec(&serde_json::json!({"default":[{"type":"signedBy","keyPath":key.public}]})).expect("json"),
    )
    .expect("policy");
    let registries = conf.join("registries.toml");
    let d = common::Daemon::start(&["--registry-config", registries.to_str().expect("utf8")]);
    let mut images = d.images().await;
    push_image("cri/unsigned").await;
    let err =
        images.pull_image(pull_request(format!("{reg}/cri/unsigned"))).await.expect_err("unsigned image is refused");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("signature policy"), "{}", err.message());

    // the policy is read at every pull: a signature pushed now is accepted
    let repo = "cri/signed";
    let digest = push_image(repo).await;
    let pl = payload(&format!("{reg}/{repo}"), &digest);
    push_signature(repo, &digest, &[(pl.clone(), key.sign(t.path(), &pl))]).await;
    let ok = images
        .pull_image(pull_request(format!("{reg}/{repo}")))
        .await
        .expect("signed image pulls over CRI")
        .into_inner();
    assert!(rktlet::image::is_content_id(&ok.image_ref), "{}", ok.image_ref);

    // a policy broken after start: pulls fail with FAILED_PRECONDITION, naming the file
    std::fs::write(conf.join("policy.json"), "{\"default\": [{\"type\": \"maybe\"}]}").expect("policy");
    let err = images.pull_image(pull_request(format!("{reg}/{repo}"))).await.expect_err("broken policy");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("policy.json"), "{}", err.message());

    // and a daemon does not start with a broken policy
    let out = Command::new(env!("CARGO_BIN_EXE_rktlet"))
        .args(["serve", "--socket"])
        .arg(t.path().join("x.sock"))
        .arg("--data-dir")
        .arg(t.path().join("data2"))
        .arg("--registry-config")
        .arg(&registries)
        .output()
        .expect("rktlet serve");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("policy.json"), "{}", String::from_utf8_lossy(&out.stderr));
}
