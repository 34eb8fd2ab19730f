//! rkt's trust store (issue 11, first part): keys made and signatures made
//! by GnuPG (Debian's `gpg`, an independent OpenPGP implementation), trusted
//! with `rktlet trust`, checked by the pure-Rust verifier.

mod common;

use common::aci::{Gpg, aci, aci_tar};
use rktlet::trust::{TrustError, TrustStore};
use std::path::Path;
use std::process::Command;

fn rktlet(local: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(common::BIN).arg("--local-config").arg(local).args(args).output().expect("rktlet");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// `rktlet --dir DATA --local-config LOCAL EXTRA... fetch WHAT`: whether it
/// succeeded, its stdout (the image id) and its stderr.
fn fetch(data: &Path, local: &Path, extra: &[&str], what: impl AsRef<std::ffi::OsStr>) -> (bool, String, String) {
    let out = Command::new(common::BIN)
        .arg("--dir")
        .arg(data)
        .arg("--local-config")
        .arg(local)
        .args(extra)
        .arg("fetch")
        .arg(what)
        .output()
        .expect("fetch");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn keys_are_trusted_by_prefix_and_check_gnupg_signatures() {
    let gpg = Gpg::new(&["Signer <signer@example.com>", "Other <other@example.com>"]);
    let t = tempfile::tempdir().expect("tmp");
    let (local, system) = (t.path().join("etc-rkt"), t.path().join("usr-lib-rkt"));
    let key = t.path().join("signer.asc");
    gpg.export("signer@example.com", &key);
    let fpr = gpg.fingerprint("signer@example.com");

    // rkt's layout: prefix.d/<prefix>/<fingerprint>
    let (ok, out) = rktlet(&local, &["trust", "--prefix", "example.com/app", key.to_str().expect("path")]);
    assert!(ok, "{out}");
    let stored = local.join("trustedkeys/prefix.d/example.com/app").join(&fpr);
    assert!(stored.is_file(), "{out}");
    let (ok, out) = rktlet(&local, &["trust", key.to_str().expect("path")]);
    assert!(!ok && out.contains("--prefix"), "a key needs a prefix or --root: {out}");
    // no prefix covers every name (that is --root), and none leaves prefix.d
    for bad in ["../escape", "/", "", "Example.com"] {
        let (ok, out) = rktlet(&local, &["trust", "--prefix", bad, key.to_str().expect("path")]);
        assert!(!ok && out.contains("invalid name prefix") && out.contains("--root"), "{bad:?}: {out}");
    }
    assert!(!local.join("trustedkeys/prefix.d").join(&fpr).exists(), "a key lies directly in prefix.d");

    let data = t.path().join("image.aci");
    std::fs::write(&data, b"an image's bytes").expect("data");
    let bytes = std::fs::read(&data).expect("read");
    let store = TrustStore::new(&local, &system);
    for armor in [true, false] {
        let sig = gpg.sign("signer@example.com", &data, armor);
        assert_eq!(store.verify("example.com/app", &bytes, &sig).expect("trusted"), fpr);
        assert_eq!(store.verify("example.com/app/worker", &bytes, &sig).expect("below the prefix"), fpr);
        let other_name = store.verify("example.com/apps", &bytes, &sig).expect_err("another prefix");
        assert!(matches!(other_name, TrustError::Untrusted { keys: 0, .. }), "{other_name}");
        let tampered = store.verify("example.com/app", b"other bytes", &sig).expect_err("tampered");
        assert!(matches!(tampered, TrustError::Untrusted { keys: 1, .. }), "{tampered}");
    }
    // a signature by a key nobody trusted
    let other_sig = gpg.sign("other@example.com", &data, true);
    assert!(matches!(store.verify("example.com/app", &bytes, &other_sig), Err(TrustError::Untrusted { .. })));

    // a root key covers every name; listing and removing
    let other_key = t.path().join("other.asc");
    gpg.export("other@example.com", &other_key);
    let (ok, out) = rktlet(&local, &["trust", "--root", other_key.to_str().expect("path")]);
    assert!(ok, "{out}");
    let other_fpr = gpg.fingerprint("other@example.com");
    assert_eq!(store.verify("anything.org/x", &bytes, &other_sig).expect("root key"), other_fpr);
    let (ok, out) = rktlet(&local, &["trust", "list", "--format=json"]);
    assert!(ok, "{out}");
    let listed: Vec<serde_json::Value> = serde_json::from_str(&out).expect("json");
    let mut pairs: Vec<(String, String)> = listed
        .iter()
        .map(|k| {
            (k["prefix"].as_str().unwrap_or("(root)").to_string(), k["fingerprint"].as_str().unwrap_or("").to_string())
        })
        .collect();
    pairs.sort();
    let mut want = vec![("(root)".to_string(), other_fpr.clone()), ("example.com/app".to_string(), fpr.clone())];
    want.sort();
    assert_eq!(pairs, want);
    let (ok, out) = rktlet(&local, &["trust", "rm", &other_fpr]);
    assert!(ok, "{out}");
    assert!(matches!(store.verify("anything.org/x", &bytes, &other_sig), Err(TrustError::Untrusted { keys: 0, .. })));

    // a system key, masked by an empty local file of the same name
    let sys_dir = system.join("trustedkeys/root.d");
    std::fs::create_dir_all(&sys_dir).expect("system dir");
    std::fs::copy(&other_key, sys_dir.join(&other_fpr)).expect("system key");
    assert_eq!(store.verify("anything.org/x", &bytes, &other_sig).expect("system key"), other_fpr);
    let mask_dir = local.join("trustedkeys/root.d");
    std::fs::create_dir_all(&mask_dir).expect("mask dir");
    std::fs::write(mask_dir.join(&other_fpr), b"").expect("mask");
    assert!(matches!(store.verify("anything.org/x", &bytes, &other_sig), Err(TrustError::Untrusted { keys: 0, .. })));
}

#[test]
fn only_bound_subkeys_and_valid_keys_sign() {
    let gpg = Gpg::new(&["Signer <signer@example.com>", "Intruder <intruder@example.com>"]);
    for uid in ["signer@example.com", "intruder@example.com"] {
        gpg.add_signing_subkey(uid);
    }
    let t = tempfile::tempdir().expect("tmp");
    let local = t.path().join("etc-rkt");
    let store = TrustStore::new(&local, t.path().join("usr-lib-rkt"));
    let data = t.path().join("image.aci");
    std::fs::write(&data, b"an image's bytes").expect("data");
    let bytes = std::fs::read(&data).expect("read");
    let trust = |prefix: &str, key: &[u8]| {
        let file = t.path().join("key.asc");
        std::fs::write(&file, key).expect("key file");
        rktlet(&local, &["trust", "--prefix", prefix, file.to_str().expect("path")])
    };

    // a signing subkey bound to the trusted key: gpg signs with it, and that verifies
    let signer = gpg.run(&["--export", "signer@example.com"]);
    let (ok, out) = trust("example.com/app", &signer);
    assert!(ok, "{out}");
    let sig = gpg.sign("signer@example.com", &data, false);
    let sub_fpr = gpg.subkey_fingerprint("signer@example.com");
    let sig_file = t.path().join("image.aci.sig");
    std::fs::write(&sig_file, &sig).expect("sig");
    let issuer = String::from_utf8(gpg.run(&["--list-packets", sig_file.to_str().expect("path")])).expect("utf8");
    assert!(issuer.to_ascii_lowercase().contains(&sub_fpr[sub_fpr.len() - 16..]), "signed by the subkey: {issuer}");
    assert_eq!(
        store.verify("example.com/app", &bytes, &sig).expect("bound subkey"),
        gpg.fingerprint("signer@example.com")
    );

    // the intruder's subkey, with its binding by the intruder's own primary
    // key, appended to the trusted key: trusted as a key, but its subkey's
    // signatures are not the trusted key's
    let intruder = gpg.run(&["--export", "intruder@example.com"]);
    let first_subkey = |key: &[u8]| {
        gpg.packets(key, &t.path().join("packets")).into_iter().find(|(tag, _)| *tag == 14).expect("subkey packet").1
    };
    let mut spliced = signer[..first_subkey(&signer)].to_vec();
    spliced.extend_from_slice(&intruder[first_subkey(&intruder)..]);
    let (ok, out) = trust("example.com/spliced", &spliced);
    assert!(ok, "{out}");
    let forged = gpg.sign("intruder@example.com", &data, true);
    let err = store.verify("example.com/spliced", &bytes, &forged).expect_err("unbound subkey");
    assert!(matches!(err, TrustError::CannotSign { .. }), "{err}");
    assert!(err.to_string().contains("not bound to the primary key"), "{err}");

    // a key whose user id was changed after it was self-signed is not trusted
    let uid_at = signer.windows(18).position(|w| w == b"signer@example.com").expect("user id");
    let mut altered = signer.clone();
    altered[uid_at + 15..uid_at + 18].copy_from_slice(b"org");
    let (ok, out) = trust("example.com/altered", &altered);
    assert!(!ok && out.contains("none of its self-signatures verifies"), "{out}");
    assert!(!local.join("trustedkeys/prefix.d/example.com/altered").exists(), "{out}");

    // a key that expired (made in 2020 for a day) is not trusted, and one
    // stored while it was valid no longer verifies what it signed then
    let old = ["--faked-system-time", "20200101T000000!"];
    gpg.run(
        &[
            &old[..],
            &["--batch", "--passphrase", "", "--quick-gen-key", "Old <old@example.com>", "ed25519", "sign", "1d"],
        ]
        .concat(),
    );
    let old_key = gpg.run(&["--export", "old@example.com"]);
    let (ok, out) = trust("example.com/old", &old_key);
    assert!(!ok && out.contains("expired at 2020-01-02T00:00:00"), "{out}");
    let dir = local.join("trustedkeys/prefix.d/example.com/old");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join(gpg.fingerprint("old@example.com")), &old_key).expect("stored key");
    let old_sig = gpg.run(
        &[&old[..], &["--batch", "-u", "old@example.com", "--detach-sign", "-o", "-", data.to_str().expect("path")]]
            .concat(),
    );
    let err = store.verify("example.com/old", &bytes, &old_sig).expect_err("expired");
    assert!(err.to_string().contains("expired at 2020-01-02T00:00:00"), "{err}");
}

#[test]
fn fetch_imports_a_signed_aci_and_refuses_what_does_not_verify() {
    let gpg = Gpg::new(&["Signer <signer@example.com>"]);
    let t = tempfile::tempdir().expect("tmp");
    let (local, data) = (t.path().join("etc-rkt"), t.path().join("data"));
    let key = t.path().join("signer.asc");
    gpg.export("signer@example.com", &key);
    let (ok, out) = rktlet(&local, &["trust", "--prefix", "example.com/app", key.to_str().expect("path")]);
    assert!(ok, "{out}");
    let fetch = |file: &Path, extra: &[&str]| fetch(&data, &local, extra, file);

    // signed by a key trusted for the name: imported under rkt's key, its tree rendered
    let app = t.path().join("app.aci");
    std::fs::write(&app, aci("example.com/app", "hello from an ACI\n")).expect("aci");
    std::fs::write(t.path().join("app.aci.asc"), gpg.sign("signer@example.com", &app, true)).expect("sig");
    let (ok, id, err) = fetch(&app, &[]);
    assert!(ok, "{err}");
    assert!(id.starts_with("sha512-") && id.len() == 71, "{id}");
    let store = rktlet::image::Store::open(&rkt::pod::DataDir::new(&data), Default::default()).expect("store");
    let image = store.resolve(&id).expect("indexed");
    assert_eq!(image.manifest.name, "example.com/app");
    let tree = store.tree(&id).expect("tree");
    assert_eq!(std::fs::read_to_string(tree.rootfs().join("hello.txt")).expect("file"), "hello from an ACI\n");

    // the same bytes under another name, or changed after signing, or unsigned: refused, nothing stored
    let before = store.list().expect("list").len();
    let other = t.path().join("other.aci");
    std::fs::write(&other, aci("example.org/other", "x")).expect("aci");
    std::fs::write(t.path().join("other.aci.asc"), gpg.sign("signer@example.com", &other, true)).expect("sig");
    let (ok, _, err) = fetch(&other, &[]);
    assert!(!ok && err.contains("no trusted key for example.org/other"), "{err}");
    let tampered = t.path().join("tampered.aci");
    std::fs::write(&tampered, aci("example.com/app", "changed\n")).expect("aci");
    std::fs::copy(t.path().join("app.aci.asc"), t.path().join("tampered.aci.asc")).expect("old sig");
    let (ok, _, err) = fetch(&tampered, &[]);
    assert!(!ok && err.contains("failed verification"), "{err}");
    let unsigned = t.path().join("unsigned.aci");
    std::fs::write(&unsigned, aci("example.com/app", "unsigned\n")).expect("aci");
    let (ok, _, err) = fetch(&unsigned, &[]);
    assert!(!ok && err.contains("no signature"), "{err}");
    assert_eq!(store.list().expect("list").len(), before, "nothing refused was stored");

    // --insecure-options=image is the one way around the check
    let (ok, id2, err) = fetch(&unsigned, &["--insecure-options=image"]);
    assert!(ok, "{err}");
    assert_ne!(id2, id);

    // over HTTP from loopback (https elsewhere), the signature from <url>.asc
    let served = t.path().join("served");
    std::fs::create_dir(&served).expect("dir");
    let web = served.join("web.aci");
    std::fs::write(&web, aci("example.com/app/web", "served\n")).expect("aci");
    std::fs::write(served.join("web.aci.asc"), gpg.sign("signer@example.com", &web, false)).expect("sig");
    let port = common::ports::free_port();
    let mut httpd = Command::new("/bin/busybox")
        .args(["httpd", "-f", "-p", &format!("127.0.0.1:{port}"), "-h"])
        .arg(&served)
        .spawn()
        .expect("busybox httpd");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "httpd did not listen");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let url = format!("http://127.0.0.1:{port}/web.aci");
    let got = Command::new(common::BIN)
        .arg("--dir")
        .arg(&data)
        .arg("--local-config")
        .arg(&local)
        .args(["fetch", &url])
        .output()
        .expect("fetch url");
    let _ = httpd.kill();
    let _ = httpd.wait();
    assert!(got.status.success(), "{}", String::from_utf8_lossy(&got.stderr));
    let web_id = String::from_utf8_lossy(&got.stdout).trim().to_string();
    assert_eq!(store.resolve(&web_id).expect("indexed").manifest.name, "example.com/app/web");
    let plain = Command::new(common::BIN)
        .arg("--dir")
        .arg(&data)
        .args(["fetch", "http://example.com/x.aci"])
        .output()
        .expect("fetch");
    assert!(!plain.status.success() && String::from_utf8_lossy(&plain.stderr).contains("over https"));

    // a tree removed by gc comes back from the stored ACI
    let gc = Command::new(common::BIN).arg("--dir").arg(&data).args(["image", "gc"]).output().expect("gc");
    assert!(gc.status.success());
    let tree = store.tree(&id).expect("rendered again");
    assert_eq!(std::fs::read_to_string(tree.rootfs().join("hello.txt")).expect("file"), "hello from an ACI\n");
    let verify =
        Command::new(common::BIN).arg("--dir").arg(&data).args(["image", "verify", "--deep"]).output().expect("verify");
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
}

#[test]
fn fetch_refuses_what_a_masked_system_key_signed_and_takes_root_keys() {
    let gpg = Gpg::new(&["Vendor <vendor@example.com>", "Root <root@example.com>"]);
    let t = tempfile::tempdir().expect("tmp");
    let (local, system, data) = (t.path().join("etc-rkt"), t.path().join("usr-lib-rkt"), t.path().join("data"));
    let system_config = ["--system-config", system.to_str().expect("path")];
    let signed = |file: &str, name: &str, hello: &str, uid: &str| {
        let path = t.path().join(file);
        std::fs::write(&path, aci(name, hello)).expect("aci");
        std::fs::write(t.path().join(format!("{file}.asc")), gpg.sign(uid, &path, true)).expect("sig");
        path
    };

    // the vendor's key shipped as a system key for example.com/app
    let vendor_fpr = gpg.fingerprint("vendor@example.com");
    let shipped = system.join("trustedkeys/prefix.d/example.com/app");
    std::fs::create_dir_all(&shipped).expect("system dir");
    gpg.export("vendor@example.com", &shipped.join(&vendor_fpr));
    let v1 = signed("v1.aci", "example.com/app", "v1\n", "vendor@example.com");
    let (ok, id, err) = fetch(&data, &local, &system_config, &v1);
    assert!(ok && id.starts_with("sha512-"), "{err}");
    let store = rktlet::image::Store::open(&rkt::pod::DataDir::new(&data), Default::default()).expect("store");
    assert_eq!(store.resolve(&id).expect("indexed").manifest.name, "example.com/app");

    // masked by an empty local file of the same name: what it signs is refused, nothing stored
    let mask = local.join("trustedkeys/prefix.d/example.com/app");
    std::fs::create_dir_all(&mask).expect("mask dir");
    std::fs::write(mask.join(&vendor_fpr), b"").expect("mask");
    let (ok, out) = rktlet(&local, &["--system-config", system.to_str().expect("path"), "trust", "list"]);
    assert!(ok && !out.contains(&vendor_fpr), "a masked key is listed: {out}");
    let before = store.list().expect("list").len();
    let v2 = signed("v2.aci", "example.com/app", "v2\n", "vendor@example.com");
    let (ok, _, err) = fetch(&data, &local, &system_config, &v2);
    assert!(!ok && err.contains("no trusted key for example.com/app verifies its signature (0 keys tried)"), "{err}");
    assert!(err.contains("nothing was stored"), "{err}");
    assert_eq!(store.list().expect("list").len(), before, "a refused image was stored");

    // a --root key verifies images of any name
    let root_key = t.path().join("root.asc");
    gpg.export("root@example.com", &root_key);
    let (ok, out) = rktlet(&local, &["trust", "--root", root_key.to_str().expect("path")]);
    assert!(ok, "{out}");
    assert!(local.join("trustedkeys/root.d").join(gpg.fingerprint("root@example.com")).is_file(), "{out}");
    let anywhere = signed("anywhere.aci", "example.org/anywhere", "anywhere\n", "root@example.com");
    let (ok, id, err) = fetch(&data, &local, &system_config, &anywhere);
    assert!(ok, "{err}");
    let image = store.resolve(&id).expect("indexed");
    assert_eq!(image.manifest.name, "example.org/anywhere");
    let rootfs = store.tree(&id).expect("tree").rootfs();
    assert_eq!(std::fs::read_to_string(rootfs.join("hello.txt")).expect("file"), "anywhere\n");
    // and still nothing by the masked vendor key
    let (ok, _, err) = fetch(&data, &local, &system_config, &v2);
    assert!(!ok && err.contains("no trusted key for example.com/app verifies its signature (1 keys tried)"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_image_takes_signed_acis() {
    use rktlet::proto::v1 as cri;
    let gpg = Gpg::new(&["Signer <signer@example.com>"]);
    let t = tempfile::tempdir().expect("tmp");
    let local = t.path().join("etc-rkt");
    let key = t.path().join("signer.asc");
    gpg.export("signer@example.com", &key);
    let (ok, out) = rktlet(&local, &["trust", "--prefix", "example.com", key.to_str().expect("path")]);
    assert!(ok, "{out}");
    let app = t.path().join("app.aci");
    std::fs::write(&app, aci("example.com/cri", "from CRI\n")).expect("aci");
    std::fs::write(t.path().join("app.aci.asc"), gpg.sign("signer@example.com", &app, true)).expect("sig");
    let unsigned = t.path().join("unsigned.aci");
    std::fs::write(&unsigned, aci("example.com/cri", "unsigned\n")).expect("aci");

    let d = common::Daemon::start(&["--trust-dir", local.to_str().expect("path")]);
    let mut img = d.images().await;
    let reference = format!("aci:{}", app.display());
    let spec = |r: &str| Some(cri::ImageSpec { image: r.to_string(), ..Default::default() });
    let pulled = img
        .pull_image(cri::PullImageRequest { image: spec(&reference), ..Default::default() })
        .await
        .expect("PullImage of a signed ACI")
        .into_inner();
    assert!(pulled.image_ref.starts_with("sha512-"), "{pulled:?}");
    let status = img
        .image_status(cri::ImageStatusRequest { image: spec(&reference), verbose: false })
        .await
        .expect("ImageStatus")
        .into_inner()
        .image
        .expect("found by the reference it was pulled as");
    assert_eq!(status.id, pulled.image_ref);
    assert!(status.repo_tags.contains(&reference), "{:?}", status.repo_tags);
    common::aci::assert_unsigned_aci_refused(&mut img, &unsigned).await;
}

/// A plain HTTP server on `<ip>:80` for discovery pages and ACIs: paths
/// (query strings ignored) to (body, extra headers); `ETag` answered with
/// 304 on `If-None-Match`. Counts full (200) answers per path.
/// A body and its extra headers.
type Served = (Vec<u8>, Vec<(String, String)>);

struct Site {
    ip: String,
    files: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Served>>>,
    served: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

impl Site {
    async fn start(ip: &str) -> Site {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind((ip, 80)).await.expect("bind :80 on a loopback address");
        let site = Site { ip: ip.to_string(), files: Default::default(), served: Default::default() };
        let (files, served) = (site.files.clone(), site.served.clone());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (files, served) = (files.clone(), served.clone());
                tokio::spawn(async move {
                    let Some(req) = common::http::read_request(&mut conn).await else { return };
                    let path = req.path().to_string();
                    let if_none_match =
                        Some(req.header("if-none-match").to_ascii_lowercase()).filter(|v| !v.is_empty());
                    let found = files.lock().expect("files").get(&path).cloned();
                    let head = |status: &str, headers: &[(String, String)], len: usize| {
                        let mut h = format!("HTTP/1.1 {status}\r\nContent-Length: {len}\r\nConnection: close\r\n");
                        for (k, v) in headers {
                            h.push_str(&format!("{k}: {v}\r\n"));
                        }
                        h + "\r\n"
                    };
                    let reply = match found {
                        Some((_, headers))
                            if if_none_match.is_some()
                                && headers
                                    .iter()
                                    .any(|(k, v)| k == "ETag" && Some(v.to_ascii_lowercase()) == if_none_match) =>
                        {
                            head("304 Not Modified", &headers, 0).into_bytes()
                        }
                        Some((body, headers)) => {
                            *served.lock().expect("served").entry(path).or_default() += 1;
                            let mut r = head("200 OK", &headers, body.len()).into_bytes();
                            r.extend_from_slice(&body);
                            r
                        }
                        None => head("404 Not Found", &[], 0).into_bytes(),
                    };
                    let _ = conn.write_all(&reply).await;
                });
            }
        });
        site
    }

    fn put(&self, path: &str, body: Vec<u8>, headers: &[(&str, &str)]) {
        let headers = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.files.lock().expect("files").insert(path.to_string(), (body, headers));
    }

    fn served(&self, path: &str) -> usize {
        self.served.lock().expect("served").get(path).copied().unwrap_or(0)
    }
}

fn compress(tar: &[u8], how: &str) -> Vec<u8> {
    let tool = match how {
        "bzip2" => "bzip2",
        _ => "xz",
    };
    let mut child = Command::new(tool)
        .arg("-c")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("compressor");
    let mut stdin = child.stdin.take().expect("stdin");
    let data = tar.to_vec();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &data));
    let out = child.wait_with_output().expect("compress");
    writer.join().expect("writer").expect("write");
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_fetches_signed_acis_with_dependencies_and_caches() {
    let gpg = Gpg::new(&["Signer <signer@example.com>", "Other <other@example.com>"]);
    let t = tempfile::tempdir().expect("tmp");
    let (local, data) = (t.path().join("etc-rkt"), t.path().join("data"));
    // a loopback address of this test's own, port 80 (appc names have no port)
    let ip = format!("127.77.{}.{}", std::process::id() % 250 + 1, 7);
    let site = Site::start(&ip).await;
    let host = site.ip.clone();
    let key = t.path().join("signer.asc");
    gpg.export("signer@example.com", &key);
    let (ok, out) = rktlet(&local, &["trust", "--prefix", &host, key.to_str().expect("path")]);
    assert!(ok, "{out}");

    // the discovery page sits at the host root: names below it walk up to it
    let page = format!(
        r#"<html><head><meta name="ac-discovery" content="{host}/ http://{host}/acis/{{name}}-{{version}}-{{os}}-{{arch}}.{{ext}}"></head></html>"#
    );
    site.put("/", page.into_bytes(), &[]);
    let arch = rktlet::image::discovery::host_arch();
    let labels = |v: &str| serde_json::json!([{"name":"version","value":v},{"name":"os","value":"linux"},{"name":"arch","value":arch}]);
    let publish = |name: &str, version: &str, packed: &[u8], signer: &str, headers: &[(&str, &str)]| {
        let path = format!("/acis/{host}/{name}-{version}-linux-{arch}.aci");
        let file = t.path().join(format!("{name}.bin"));
        std::fs::write(&file, packed).expect("aci");
        site.put(&path, packed.to_vec(), headers);
        site.put(&format!("{path}.asc"), gpg.sign(signer, &file, true), &[]);
        path
    };
    // base 1.0 (bzip2) and an app 2.0 (xz) that depends on it by name and version
    let base = aci_tar(
        serde_json::json!({"acKind":"ImageManifest","acVersion":"0.8.11","name":format!("{host}/base"),"labels":labels("1.0")}),
        &[("etc/base", "base\n"), ("etc/shared", "from base\n")],
    );
    let base_path =
        publish("base", "1.0", &compress(&base, "bzip2"), "signer@example.com", &[("Cache-Control", "max-age=3600")]);
    let app = aci_tar(
        serde_json::json!({"acKind":"ImageManifest","acVersion":"0.8.11","name":format!("{host}/app"),"labels":labels("2.0"),
            "app":{"exec":["/bin/true"],"user":"0","group":"0"},
            "dependencies":[{"imageName":format!("{host}/base"),"labels":[{"name":"version","value":"1.0"}]}]}),
        &[("etc/app", "app\n"), ("etc/shared", "from app\n")],
    );
    let app_path = publish(
        "app",
        "2.0",
        &compress(&app, "xz"),
        "signer@example.com",
        &[("ETag", "\"app-v2\""), ("Cache-Control", "no-cache")],
    );

    let fetch = |what: &str| fetch(&data, &local, &[], what);
    // the base imported first without its signature checked: that copy must
    // not stand in for the verified fetch of the app's dependency
    let unchecked = Command::new(common::BIN)
        .arg("--dir")
        .arg(&data)
        .args(["--insecure-options=image", "fetch", &format!("aci:{host}/base:1.0")])
        .output()
        .expect("fetch");
    assert!(unchecked.status.success(), "{}", String::from_utf8_lossy(&unchecked.stderr));
    let (ok, id, err) = tokio::task::block_in_place(|| fetch(&format!("aci:{host}/app:2.0")));
    assert!(ok, "{err}");
    let store = rktlet::image::Store::open(&rkt::pod::DataDir::new(&data), Default::default()).expect("store");
    let image = store.resolve(&id).expect("app indexed");
    assert_eq!(image.manifest.name, format!("{host}/app"));
    let base_id = image.dependency_keys().pop().expect("the dependency is pinned in the stored manifest");
    assert_eq!(store.resolve(&base_id).expect("base indexed").manifest.name, format!("{host}/base"));
    // the tree: the dependency below, the app's files over it
    let rootfs = store.tree(&id).expect("tree").rootfs();
    let read = |f: &str| std::fs::read_to_string(rootfs.join("etc").join(f)).unwrap_or_default();
    assert_eq!((read("base"), read("app"), read("shared")), ("base\n".into(), "app\n".into(), "from app\n".into()));
    // the name it was asked by resolves to it
    assert_eq!(store.resolve(&format!("aci:{host}/app:2.0")).expect("by name").id, id);
    assert_eq!((site.served(&app_path), site.served(&base_path)), (1, 2), "the unverified base was trusted");

    // again: the app is asked for with If-None-Match (304, not re-sent), the
    // base is fresh for an hour and not asked for at all
    let (ok, again, err) = tokio::task::block_in_place(|| fetch(&format!("aci:{host}/app:2.0")));
    assert!(ok && again == id, "{err}");
    let (ok, base_again, err) = tokio::task::block_in_place(|| fetch(&format!("aci:{host}/base:1.0")));
    assert!(ok && base_again == base_id, "{err}");
    assert_eq!((site.served(&app_path), site.served(&base_path)), (1, 2), "cached copies were downloaded again");

    // a dependency pinned by appc's full-length imageID (SHA-512, 128 hex) is the stored base
    let full_id = {
        use sha2::Digest;
        let h = sha2::Sha512::digest(&base);
        format!("sha512-{}", h.iter().map(|b| format!("{b:02x}")).collect::<String>())
    };
    let pinned = aci_tar(
        serde_json::json!({"acKind":"ImageManifest","acVersion":"0.8.11","name":format!("{host}/pinned"),"labels":labels("1.0"),
            "dependencies":[{"imageName":format!("{host}/base"),"imageID":full_id}]}),
        &[("etc/pinned", "pinned\n")],
    );
    publish("pinned", "1.0", &compress(&pinned, "xz"), "signer@example.com", &[]);
    let (ok, pinned_id, err) = tokio::task::block_in_place(|| fetch(&format!("aci:{host}/pinned:1.0")));
    assert!(ok, "{err}");
    assert_eq!(store.resolve(&pinned_id).expect("pinned").dependency_keys(), std::slice::from_ref(&base_id));

    // the dependency cannot go while the app needs it
    let (ok, _, err) = tokio::task::block_in_place(|| {
        let out =
            Command::new(common::BIN).arg("--dir").arg(&data).args(["image", "rm", &base_id]).output().expect("rm");
        (out.status.success(), String::new(), String::from_utf8_lossy(&out.stderr).into_owned())
    });
    assert!(!ok && err.contains("dependency of image"), "{err}");

    // refused, nothing stored: a name whose URL serves another image, an
    // untrusted signer, a dependency discovery cannot find
    let before = store.list().expect("list").len();
    site.put(&format!("/acis/{host}/evil-latest-linux-{arch}.aci"), compress(&app, "xz"), &[]);
    let evil_sig = site.files.lock().expect("files")[&format!("{app_path}.asc")].0.clone();
    site.put(&format!("/acis/{host}/evil-latest-linux-{arch}.aci.asc"), evil_sig, &[]);
    let (ok, _, err) = tokio::task::block_in_place(|| fetch(&format!("aci:{host}/evil")));
    assert!(!ok && err.contains(&format!("asked for {host}/evil")), "{err}");
    let other = aci_tar(
        serde_json::json!({"acKind":"ImageManifest","acVersion":"0.8.11","name":format!("{host}/other"),"labels":labels("1.0")}),
        &[("etc/other", "x\n")],
    );
    publish("other", "1.0", &compress(&other, "xz"), "other@example.com", &[]);
    let (ok, _, err) = tokio::task::block_in_place(|| fetch(&format!("aci:{host}/other:1.0")));
    assert!(!ok && err.contains("failed verification"), "{err}");
    let orphan = aci_tar(
        serde_json::json!({"acKind":"ImageManifest","acVersion":"0.8.11","name":format!("{host}/orphan"),"labels":labels("1.0"),
            "dependencies":[{"imageName":format!("{host}/missing")}]}),
        &[("etc/orphan", "x\n")],
    );
    publish("orphan", "1.0", &compress(&orphan, "bzip2"), "signer@example.com", &[]);
    let (ok, _, err) = tokio::task::block_in_place(|| fetch(&format!("aci:{host}/orphan:1.0")));
    assert!(!ok && err.contains(&format!("{host}/missing-latest")) && err.contains("not found"), "{err}");
    assert_eq!(store.list().expect("list").len(), before, "a refused fetch stored an image");

    // an ACI whose rootfs is a symlink (to the host's root) is refused, even unchecked
    let mut b = tar::Builder::new(Vec::new());
    let m = serde_json::to_vec(
        &serde_json::json!({"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/escape"}),
    )
    .expect("manifest");
    let mut h = tar::Header::new_gnu();
    h.set_size(m.len() as u64);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    b.append_data(&mut h, "manifest", &m[..]).expect("manifest entry");
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    h.set_uid(0);
    h.set_gid(0);
    b.append_link(&mut h, "rootfs", "/").expect("symlink entry");
    let escape = t.path().join("escape.aci");
    std::fs::write(&escape, b.into_inner().expect("tar")).expect("aci");
    let out = Command::new(common::BIN)
        .arg("--dir")
        .arg(&data)
        .args(["--insecure-options=image", "fetch"])
        .arg(&escape)
        .output()
        .expect("fetch");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("rootfs is not a directory"), "{err}");

    // gc removes the app before the base it needs, so both go
    let out = Command::new(common::BIN)
        .arg("--dir")
        .arg(&data)
        .args(["image", "gc", "--grace-period", "0s"])
        .output()
        .expect("gc");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(store.list().expect("list").is_empty());
}
