//! Image pulls against real registries (tests/fixtures/seed-registry.sh):
//! contents of every seed image, auth, platform selection, verification,
//! hostile layers, concurrency, crash safety, the CLI and the CRI ImageService.

mod common;

use common::registry::{PASS, USER, raw_tar, registry};
use rkt::pod::DataDir;
use rktlet::image::{Credentials, ImageError, RegistryConfig, Store};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tar::EntryType as T;

fn store() -> (tempfile::TempDir, Store) {
    let t = tempfile::tempdir().expect("tmp");
    let s = Store::open(&DataDir::new(t.path().join("data")), RegistryConfig::default()).expect("open store");
    (t, s)
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).mode() & 0o7777
}

/// Every file under `dir` (relative), for before/after comparisons.
fn snapshot(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in fs::read_dir(&p).into_iter().flatten().flatten() {
            let path = e.path();
            let m = fs::symlink_metadata(&path).expect("meta");
            if m.is_dir() {
                stack.push(path.clone());
            }
            if path.extension().is_some_and(|x| x == "lock") || path.parent().is_some_and(|p| p.ends_with("imagelocks"))
            {
                continue; // key-lock files are created on demand
            }
            out.push((path.strip_prefix(dir).expect("prefix").to_path_buf(), if m.is_file() { m.len() } else { 0 }));
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn every_seed_image_pulls_and_renders() {
    let reg = registry();
    let (_t, store) = store();
    let pull = |name: &str| {
        let r = format!("{}/{name}", reg.main);
        let store = store.clone();
        async move {
            let image = store.pull(&r, Credentials::default(), None).await.unwrap_or_else(|e| panic!("pull {r}: {e}"));
            let tree = tokio::task::spawn_blocking({
                let id = image.id.clone();
                move || store.tree(&id)
            })
            .await
            .expect("join")
            .expect("tree");
            assert!(tree.path.join("rendered").exists());
            assert_eq!(fs::read_to_string(tree.path.join("image")).expect("image file"), image.id);
            (image, tree.rootfs())
        }
    };

    // busybox (OCI) and the same layer as Docker schema2 and as zstd
    for tag in ["busybox:latest", "busybox:v2s2", "busybox:zstd"] {
        let (image, root) = pull(tag).await;
        assert_eq!(mode(&root.join("bin/busybox")), 0o755, "{tag}");
        assert_eq!(fs::read_link(root.join("bin/sh")).expect("sh link"), PathBuf::from("/bin/busybox"));
        assert_eq!(mode(&root.join("tmp")), 0o1777);
        assert_eq!(mode(&root.join("root")), 0o700);
        assert!(fs::read_to_string(root.join("etc/passwd")).expect("passwd").contains("app:x:1000"));
        assert_eq!(image.tags, [format!("{}/{tag}", reg.main)]);
        assert_eq!(image.digests.len(), 1);
        assert_eq!(image.manifest.label("os"), Some("linux"));
        if tag == "busybox:zstd" {
            assert_eq!(fs::read_to_string(root.join("etc/zstd-marker")).expect("marker"), "zstd\n");
        }
    }

    // cfg: a second layer with owned files and a full config
    let (image, root) = pull("cfg:latest").await;
    assert_eq!(fs::read_to_string(root.join("work/hello.txt")).expect("hello"), "hello from cfg image\n");
    let m = fs::metadata(root.join("work/hello.txt")).expect("meta");
    assert_eq!((m.uid(), m.gid()), (1000, 1000));
    let app = image.manifest.app.as_ref().expect("app");
    assert_eq!(app.exec.as_ref().expect("exec")[..2], ["/bin/sh".to_string(), "-c".to_string()]);
    assert_eq!((app.user.as_str(), app.group.as_str(), app.working_directory.as_str()), ("1000", "1000", "/work"));
    assert!(app.environment.iter().any(|e| e.name == "GREETING" && e.value == "hello world"));
    assert_eq!(app.ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["8080-tcp", "9090-udp"]);
    assert_eq!(app.mount_points[0].path, "/data");
    assert_eq!(image.manifest.dependencies.len(), 2);
    assert_eq!(image.user(), (Some(1000), String::new()));

    // edge: whiteouts, opaque whiteout, hard link, long names, setuid, relative symlink removed with its dir
    let (_, root) = pull("edge:latest").await;
    assert!(!root.join("etc/to-delete").exists());
    assert!(!root.join("opt/dir/a").exists() && !root.join("opt/dir/rel-symlink").exists());
    assert_eq!(fs::read_to_string(root.join("opt/dir/c")).expect("c"), "c\n");
    assert!(!root.join("opt/opq/x").exists() && !root.join("opt/opq/y").exists());
    assert_eq!(fs::read_to_string(root.join("opt/opq/z")).expect("z"), "z\n");
    let k = fs::metadata(root.join("opt/keep/k")).expect("k");
    assert_eq!(k.ino(), fs::metadata(root.join("opt/keep/k-hardlink")).expect("link").ino());
    assert_eq!(k.nlink(), 2);
    assert_eq!(mode(&root.join("opt/suid-busybox")), 0o4755);
    let long = root.join(format!("opt/{}/{}", "d".repeat(120), "f".repeat(150)));
    assert_eq!(fs::read_to_string(long).expect("long name"), "long\n");

    // the index: amd64 is chosen, the arm64 entry is not
    let (image, root) = pull("multiarch:latest").await;
    assert!(root.join("bin/busybox").exists());
    assert!(!root.join("etc/ARCH").exists());
    assert_eq!(image.manifest.label("arch"), Some("amd64"));
    assert_eq!(image.digests[0], format!("{}/multiarch@{}", reg.main, reg.env["DIGEST_MULTIARCH_LATEST"]));

    // a plain arm64 manifest (no index) is taken as is
    let (image, root) = pull("arm64only:latest").await;
    assert_eq!(fs::read_to_string(root.join("etc/ARCH")).expect("arch"), "arm64\n");
    assert_eq!(image.manifest.label("arch"), Some("aarch64"));

    // big: 3 layers
    let (image, root) = pull("big:latest").await;
    assert_eq!(image.layer_keys().len(), 3);
    assert_eq!(fs::read_dir(root.join("data/rand")).expect("rand").count(), 4);
    assert_eq!(fs::read_dir(root.join("data/text")).expect("text").count(), 3);

    // shared layers are stored once: busybox's layer serves busybox:latest, v2s2, cfg, edge
    let names: Vec<_> = store.list().expect("list").iter().map(|i| i.id.clone()).collect();
    assert_eq!(names.len(), 8);
    let bb = store.resolve(&format!("{}/busybox:latest", reg.main)).expect("bb");
    let cfg = store.resolve(&format!("{}/cfg:latest", reg.main)).expect("cfg");
    assert_eq!(bb.layer_keys()[0], cfg.layer_keys()[0]);
    // by id prefix and by digest
    assert_eq!(store.resolve(&bb.id[..20]).expect("prefix").id, bb.id);
    assert_eq!(store.resolve(&bb.digests[0]).expect("digest").id, bb.id);
}

#[tokio::test]
async fn basic_auth_right_and_wrong_credentials() {
    let reg = registry();
    let (_t, store) = store();
    let r = format!("{}/busybox:latest", reg.auth);
    let err = store.pull(&r, Credentials::default(), None).await.expect_err("no creds");
    assert_eq!(rktlet::cri::image_error_code(&err), tonic::Code::Unauthenticated, "{err}");
    assert!(err.to_string().contains("requires a username and password"), "{err}");
    let err = store.pull(&r, Credentials::basic(USER, "wrong"), None).await.expect_err("wrong");
    assert_eq!(rktlet::cri::image_error_code(&err), tonic::Code::Unauthenticated, "{err}");
    assert!(err.to_string().contains("rejected the credentials"), "{err}");
    let image = store.pull(&r, Credentials::basic(USER, PASS), None).await.expect("right creds");
    assert!(store.tree(&image.id).expect("tree").rootfs().join("bin/busybox").exists());
}

#[tokio::test]
async fn token_auth_right_and_wrong_credentials() {
    let reg = registry();
    let (_t, store) = store();
    let r = format!("{}/busybox:latest", reg.token);
    let err = store.pull(&r, Credentials::basic(USER, "wrong"), None).await.expect_err("wrong");
    assert_eq!(rktlet::cri::image_error_code(&err), tonic::Code::Unauthenticated, "{err}");
    assert!(err.to_string().contains("token server"), "{err}");
    let bogus = Credentials { registry_token: "not-a-token".into(), ..Default::default() };
    let err = store.pull(&r, bogus, None).await.expect_err("bogus token");
    assert_eq!(rktlet::cri::image_error_code(&err), tonic::Code::Unauthenticated, "{err}");
    let image = store.pull(&r, Credentials::basic(USER, PASS), None).await.expect("token via realm");
    assert!(image.tags[0].ends_with("busybox:latest"));
    let (_t2, store2) = store_pair();
    let direct = Credentials { registry_token: reg.bearer_token(), ..Default::default() };
    store2.pull(&r, direct, None).await.expect("registry token");
}

fn store_pair() -> (tempfile::TempDir, Store) {
    store()
}

#[tokio::test]
async fn corrupted_blob_fails_and_leaves_the_store_unchanged() {
    let reg = registry();
    let (_t, store) = store();
    store.pull(&format!("{}/busybox:latest", reg.main), Credentials::default(), None).await.expect("seed pull");
    // the seed's tree is synced in the background (hash, marker, index): done first
    tokio::task::spawn_blocking(rkt::tree::finish_settling).await.expect("settled");
    let before = snapshot(store.cas().root());
    let repo = format!("corrupt-{}", uuid::Uuid::new_v4().simple());
    // unique content: a blob left corrupted by an earlier run must not be reused
    let mut payload: Vec<u8> = (0..300_000u32).flat_map(|i| i.to_le_bytes()).collect();
    payload.extend_from_slice(repo.as_bytes());
    let layer = raw_tar(&[("data/", T::Directory, b"", ""), ("data/blob", T::Regular, &payload, "")]);
    let digests = reg.push(&repo, &[layer]).await;
    let hex = digests[0].trim_start_matches("sha256:");
    let data = reg.storage().join(format!("docker/registry/v2/blobs/sha256/{}/{hex}/data", &hex[..2]));
    let mut bytes = fs::read(&data).expect("blob data");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff; // same size, different content
    fs::write(&data, &bytes).expect("corrupt");
    let err =
        store.pull(&format!("{}/{repo}:latest", reg.main), Credentials::default(), None).await.expect_err("corrupt");
    assert_eq!(rktlet::cri::image_error_code(&err), tonic::Code::DataLoss, "{err}");
    assert!(err.to_string().contains("digest mismatch"), "{err}");
    assert_eq!(snapshot(store.cas().root()), before, "the store changed");
}

#[tokio::test]
async fn hostile_layers_are_refused() {
    let reg = registry();
    let (t, store) = store();
    let outside = t.path().join("outside");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("traversal", raw_tar(&[("etc/", T::Directory, b"", ""), ("../../../../escaped", T::Regular, b"x", "")])),
        ("symlink", raw_tar(&[("up", T::Symlink, b"", "../../../../../../.."), ("up/escaped", T::Regular, b"x", "")])),
        ("hardlink", raw_tar(&[("l", T::Link, b"", "../../../../etc/passwd")])),
    ];
    let before = snapshot(store.cas().root());
    for (name, layer) in cases {
        let repo = format!("hostile-{name}-{}", uuid::Uuid::new_v4().simple());
        reg.push(&repo, &[layer]).await;
        let err =
            store.pull(&format!("{}/{repo}:latest", reg.main), Credentials::default(), None).await.expect_err(name);
        assert!(matches!(err, ImageError::Extract(_)), "{name}: {err}");
        assert_eq!(rktlet::cri::image_error_code(&err), tonic::Code::FailedPrecondition, "{name}: {err}");
        assert!(err.to_string().contains("refusing layer"), "{name}: {err}");
    }
    assert!(!outside.exists() && !Path::new("/escaped").exists());
    assert_eq!(snapshot(store.cas().root()), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_identical_pulls_download_once() {
    let reg = registry();
    let (_t, store) = store();
    let r = format!("{}/cfg:latest", reg.main);
    let downloaded = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (store, r, downloaded) = (store.clone(), r.clone(), downloaded.clone());
        let last = Arc::new(std::sync::Mutex::new(std::collections::HashMap::<usize, u64>::new()));
        let progress: rktlet::image::Progress = Arc::new(move |layer, got, _size| {
            let mut l = last.lock().expect("lock");
            let prev = l.insert(layer, got).unwrap_or(0);
            downloaded.fetch_add(got - prev, Ordering::SeqCst);
        });
        tasks.push(tokio::spawn(async move { store.pull(&r, Credentials::default(), Some(progress)).await }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.expect("join").expect("pull").id);
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]));
    let image = store.resolve(&ids[0]).expect("image");
    let layer_bytes: u64 = image.manifest.dependencies.iter().map(|d| d.size).sum();
    assert_eq!(downloaded.load(Ordering::SeqCst), layer_bytes, "each layer downloaded exactly once");
    assert_eq!(store.list().expect("list").len(), 1);

    // and across processes: two CLI fetches at once agree
    let dir = tempfile::tempdir().expect("tmp");
    let fetch = || {
        Command::new(common::BIN)
            .args(["fetch", "--dir"])
            .arg(dir.path())
            .arg(format!("docker://{}/edge:latest", reg.main))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn fetch")
    };
    let (a, b) = (fetch(), fetch());
    let (a, b) = (a.wait_with_output().expect("a"), b.wait_with_output().expect("b"));
    assert!(a.status.success() && b.status.success());
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn kill_9_mid_pull_leaves_no_partial_image_and_the_next_pull_completes() {
    let reg = registry();
    let dir = tempfile::tempdir().expect("tmp");
    let r = format!("docker://{}/big:latest", reg.main);
    let fetch = || Command::new(common::BIN).args(["fetch", "--dir"]).arg(dir.path()).arg(&r).output().expect("fetch");
    let list = || {
        let out = Command::new(common::BIN)
            .args(["image", "list", "--format=json", "--dir"])
            .arg(dir.path())
            .output()
            .expect("list");
        serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).expect("json")
    };
    for delay_ms in [5u64, 40, 120] {
        let mut child =
            Command::new(common::BIN).args(["fetch", "--dir"]).arg(dir.path()).arg(&r).spawn().expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let images = list();
        if let Some(i) = images.first() {
            // the pull may have finished before the kill: then it must be complete
            let s = Store::open(&DataDir::new(dir.path()), RegistryConfig::default()).expect("open");
            let tree = s.tree(i["id"].as_str().expect("id")).expect("tree");
            assert!(tree.path.join("rendered").exists());
        }
    }
    let out = fetch();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(list().len(), 1);
    let leftovers: Vec<_> = fs::read_dir(dir.path().join("cas/tmp"))
        .expect("tmp")
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != ".create.lock")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn cli_list_cat_manifest_gc_rerender_and_rm() {
    let reg = registry();
    let dir = tempfile::tempdir().expect("tmp");
    let run = |args: &[&str]| {
        let out = Command::new(common::BIN).args(args).arg("--dir").arg(dir.path()).output().expect("run");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf8")
    };
    let id = run(&["fetch", &format!("docker://{}/cfg:latest", reg.main)]).trim().to_string();
    assert!(id.starts_with("sha512-") && id.len() == 71, "{id}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&run(&["image", "list", "--format=json"])).expect("json");
    assert_eq!(list[0]["id"], id.as_str());
    // the table shows times and sizes as rkt does, not Unix seconds and bytes
    let table = run(&["image", "list"]);
    let row = table.lines().find(|l| l.contains("cfg:latest")).unwrap_or_else(|| panic!("{table}"));
    let cols: Vec<&str> = row.split('\t').collect();
    assert_eq!(cols.len(), 5, "{row}");
    assert!(cols[2].ends_with("B"), "size {row}");
    assert!(cols[3] == "now" || cols[3].ends_with(" ago"), "import time {row}");
    assert!(!cols[3].chars().all(|c| c.is_ascii_digit()), "{row}");
    let manifest: serde_json::Value = serde_json::from_str(&run(&["image", "cat-manifest", &id])).expect("manifest");
    assert_eq!(manifest["acKind"], "ImageManifest");
    assert_eq!(manifest["app"]["workingDirectory"], "/work");

    // gc: the tree goes (no pod uses it), the image stays within the grace period; rendering comes back
    let gc = run(&["image", "gc"]);
    assert!(gc.contains("removed tree"), "{gc}");
    let store = Store::open(&DataDir::new(dir.path()), RegistryConfig::default()).expect("open");
    let tree = store.tree(&id).expect("re-render");
    assert_eq!(fs::read_to_string(tree.rootfs().join("work/hello.txt")).expect("hello"), "hello from cfg image\n");
    assert_eq!(fs::metadata(tree.rootfs().join("bin/busybox")).expect("bb").permissions().mode() & 0o777, 0o755);

    run(&["image", "rm", &format!("{}/cfg:latest", reg.main)]);
    assert_eq!(run(&["image", "list", "--format=json"]).trim(), "[]");
    let out = Command::new(common::BIN).args(["image", "rm", &id, "--dir"]).arg(dir.path()).output().expect("rm");
    assert!(!out.status.success(), "removing a missing image is reported by the CLI");
    let blobs = fs::read_dir(dir.path().join("cas/blob/sha512"))
        .expect("blobs")
        .flatten()
        .flat_map(|d| fs::read_dir(d.path()).into_iter().flatten())
        .count();
    assert_eq!(blobs, 0, "layers of removed images are removed");
    assert_eq!(run(&["image", "gc", "--grace-period=0s"]).lines().count(), 1);
}

#[test]
fn verify_finds_a_corrupted_blob_a_tampered_tree_and_pull_leftovers() {
    let reg = registry();
    let dir = tempfile::tempdir().expect("tmp");
    let verify = |deep: bool| {
        let mut cmd = Command::new(common::BIN);
        cmd.args(["image", "verify", "--format=json", "--dir"]).arg(dir.path());
        if deep {
            cmd.arg("--deep");
        }
        let out = cmd.output().expect("verify");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
        (out.status.success(), report)
    };
    let fetched = Command::new(common::BIN)
        .args(["fetch", &format!("docker://{}/cfg:latest", reg.main), "--dir"])
        .arg(dir.path())
        .output()
        .expect("fetch");
    assert!(fetched.status.success(), "{}", String::from_utf8_lossy(&fetched.stderr));
    let (ok, report) = verify(true);
    assert!(ok, "a fresh store verifies: {report}");
    assert_eq!((report["images"].as_u64(), report["trees_compared"].as_u64()), (Some(1), Some(1)), "{report}");

    // a file of the rendered tree changed behind the store's back: only the deep check sees it
    let store = Store::open(&DataDir::new(dir.path()), RegistryConfig::default()).expect("open");
    let id = store.list().expect("list")[0].id.clone();
    let hello = store.tree(&id).expect("tree").rootfs().join("work/hello.txt");
    fs::write(&hello, "tampered\n").expect("tamper");
    assert!(verify(false).0, "the shallow check trusts rendered trees");
    let (ok, report) = verify(true);
    assert!(!ok);
    assert!(report["problems"].to_string().contains("work/hello.txt"), "{report}");

    // a stored layer blob whose bytes changed no longer has its key
    let layer = store.read_manifest(&id).expect("manifest").dependencies[0].image_id.clone().expect("layer key");
    let blob = dir.path().join("cas/blob/sha512").join(&layer[7..9]).join(&layer);
    let mut bytes = fs::read(&blob).expect("blob");
    let last = bytes.len() - 9; // inside the gzip stream's data, before its trailer
    bytes[last] ^= 0xff;
    fs::write(&blob, &bytes).expect("corrupt");
    let (ok, report) = verify(false);
    assert!(!ok);
    assert!(report["problems"].to_string().contains(&format!("blob {layer}")), "{report}");

    // a pull killed mid-way left its work directory: a problem until gc removes it
    fs::write(&blob, {
        bytes[last] ^= 0xff;
        &bytes
    })
    .expect("restore");
    fs::write(&hello, "hello from cfg image\n").expect("restore file");
    fs::create_dir_all(dir.path().join("cas/tmp/pull-killed/tree")).expect("leftover");
    let (ok, report) = verify(false);
    assert!(!ok && report["problems"].to_string().contains("pull-killed"), "{report}");
    let gc = Command::new(common::BIN).args(["image", "gc", "--dir"]).arg(dir.path()).output().expect("gc");
    assert!(gc.status.success());
    let (ok, report) = verify(false);
    assert!(ok, "after gc: {report}");
}

mod cri {
    use super::*;
    use rktlet::proto::v1 as cri;

    fn spec(image: &str) -> Option<cri::ImageSpec> {
        Some(cri::ImageSpec { image: image.to_string(), ..Default::default() })
    }

    /// An image whose layers were all stored by an earlier pull (here the same
    /// layers and config under Docker schema 2 media types, rkt's second ACI)
    /// has the size of its layers,
    /// as ImageStatus, `crictl images` and kubelet's image gc read it.
    #[tokio::test]
    async fn an_image_made_of_stored_layers_has_its_size() {
        let reg = registry();
        let d = common::Daemon::start(&[]);
        let mut c = d.images().await;
        let mut sizes = Vec::new();
        for tag in ["busybox:latest", "busybox:v2s2"] {
            let image = format!("{}/{tag}", reg.main);
            let pulled = c
                .pull_image(cri::PullImageRequest { image: spec(&image), ..Default::default() })
                .await
                .expect("pull")
                .into_inner();
            let status = c
                .image_status(cri::ImageStatusRequest { image: spec(&pulled.image_ref), verbose: false })
                .await
                .expect("status")
                .into_inner()
                .image
                .expect("image");
            sizes.push((status.id.clone(), status.size));
        }
        // (the same config under another manifest: one content, one CRI image with both tags)
        assert_eq!(sizes[0].0, sizes[1].0, "one content id");
        assert!(sizes[0].1 > 0 && sizes[0].1 == sizes[1].1, "{sizes:?}");
    }

    /// The same image pulled from two registries (here two names of one)
    /// is one CRI image: one id, the tags of both, and RemoveImage of it
    /// removes it from both (critest v1.36's image identifier consistency
    /// and removal across registries). rkt's store keeps an ACI per name.
    #[tokio::test]
    async fn one_image_id_whatever_registry_it_came_from() {
        let reg = registry();
        let d = common::Daemon::start(&[]);
        let mut c = d.images().await;
        let port = reg.main.rsplit_once(':').map(|(_, p)| p.to_string()).expect("port");
        let tags = [format!("127.0.0.1:{port}/busybox:latest"), format!("localhost:{port}/busybox:latest")];
        let mut ids = Vec::new();
        for tag in &tags {
            let pulled = c
                .pull_image(cri::PullImageRequest { image: spec(tag), ..Default::default() })
                .await
                .expect("pull")
                .into_inner();
            ids.push(pulled.image_ref);
        }
        assert_eq!(ids[0], ids[1], "one image, one id");
        assert!(rktlet::image::is_content_id(&ids[0]), "{}", ids[0]);
        let list = c.list_images(cri::ListImagesRequest::default()).await.expect("list").into_inner().images;
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(list[0].id, ids[0]);
        let mut want = tags.to_vec();
        want.sort();
        assert_eq!(list[0].repo_tags, want);
        for name in [&tags[0], &tags[1], &ids[0]] {
            let s = c
                .image_status(cri::ImageStatusRequest { image: spec(name), verbose: false })
                .await
                .expect("status")
                .into_inner();
            assert_eq!(s.image.map(|i| i.id), Some(ids[0].clone()), "{name}");
        }
        // the store keeps rkt's keys: two ACIs, one per name
        let data = rkt::pod::DataDir::new(d.dir.path().join("data"));
        let store = rktlet::image::Store::open(&data, Default::default()).expect("store");
        assert_eq!(store.list().expect("list").len(), 2);
        c.remove_image(cri::RemoveImageRequest { image: spec(&ids[0]) }).await.expect("rm by id");
        assert!(c.list_images(cri::ListImagesRequest::default()).await.expect("list").into_inner().images.is_empty());
        for tag in &tags {
            let s = c.image_status(cri::ImageStatusRequest { image: spec(tag), verbose: false }).await.expect("status");
            assert!(s.into_inner().image.is_none(), "{tag} is gone too");
        }
        // removing by one registry's tag removes the other's too
        for tag in &tags {
            c.pull_image(cri::PullImageRequest { image: spec(tag), ..Default::default() }).await.expect("pull again");
        }
        c.remove_image(cri::RemoveImageRequest { image: spec(&tags[1]) }).await.expect("rm by tag");
        assert!(c.list_images(cri::ListImagesRequest::default()).await.expect("list").into_inner().images.is_empty());
    }

    #[tokio::test]
    async fn image_service_round_trip_over_the_socket() {
        let reg = registry();
        let d = common::Daemon::start(&[]);
        let mut c = d.images().await;
        let tag = format!("{}/cfg:latest", reg.main);
        let pulled = c
            .pull_image(cri::PullImageRequest { image: spec(&tag), ..Default::default() })
            .await
            .expect("pull")
            .into_inner();
        // the CRI id names the content: the config's digest, as containerd's
        assert!(rktlet::image::is_content_id(&pulled.image_ref), "{}", pulled.image_ref);

        let list = c.list_images(cri::ListImagesRequest::default()).await.expect("list").into_inner().images;
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].id, pulled.image_ref);
        assert_eq!(list[0].repo_tags, std::slice::from_ref(&tag));
        assert!(list[0].repo_digests[0].starts_with(&format!("{}/cfg@sha256:", reg.main)));
        assert_eq!(list[0].uid.as_ref().map(|u| u.value), Some(1000));
        assert!(list[0].size > 0);
        let filtered = c
            .list_images(cri::ListImagesRequest { filter: Some(cri::ImageFilter { image: spec("nope:1") }) })
            .await
            .expect("filter")
            .into_inner();
        assert!(filtered.images.is_empty());

        for name in [tag.as_str(), pulled.image_ref.as_str(), list[0].repo_digests[0].as_str()] {
            let s = c
                .image_status(cri::ImageStatusRequest { image: spec(name), verbose: true })
                .await
                .expect("status")
                .into_inner();
            assert_eq!(s.image.as_ref().map(|i| i.id.as_str()), Some(pulled.image_ref.as_str()), "{name}");
            assert!(s.info["info"].contains("treeStoreID"));
        }
        let fs_info = c.image_fs_info(cri::ImageFsInfoRequest {}).await.expect("fsinfo").into_inner();
        let u = &fs_info.image_filesystems[0];
        assert!(u.used_bytes.as_ref().expect("bytes").value > 1_000_000);
        assert!(u.inodes_used.as_ref().expect("inodes").value > 100);

        let bad = c
            .pull_image(cri::PullImageRequest { image: spec("Not/Valid"), ..Default::default() })
            .await
            .expect_err("bad");
        assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
        let missing = c
            .pull_image(cri::PullImageRequest { image: spec(&format!("{}/nope:1", reg.main)), ..Default::default() })
            .await
            .expect_err("missing");
        assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
        let auth = cri::AuthConfig { username: USER.into(), password: "wrong".into(), ..Default::default() };
        let denied = c
            .pull_image(cri::PullImageRequest {
                image: spec(&format!("{}/busybox", reg.auth)),
                auth: Some(auth),
                ..Default::default()
            })
            .await
            .expect_err("denied");
        assert_eq!(denied.code(), tonic::Code::Unauthenticated, "{denied:?}");
        let auth = cri::AuthConfig { username: USER.into(), password: PASS.into(), ..Default::default() };
        c.pull_image(cri::PullImageRequest {
            image: spec(&format!("{}/busybox", reg.auth)),
            auth: Some(auth),
            ..Default::default()
        })
        .await
        .expect("auth pull");

        c.remove_image(cri::RemoveImageRequest { image: spec(&tag) }).await.expect("rm");
        let s = c
            .image_status(cri::ImageStatusRequest { image: spec(&tag), verbose: false })
            .await
            .expect("status")
            .into_inner();
        assert!(s.image.is_none());
        c.remove_image(cri::RemoveImageRequest { image: spec(&tag) }).await.expect("rm is idempotent");
        c.remove_image(cri::RemoveImageRequest { image: spec(&pulled.image_ref) })
            .await
            .expect("rm by id is idempotent");
        assert_eq!(c.list_images(cri::ListImagesRequest::default()).await.expect("list").into_inner().images.len(), 1);
    }
}

/// Trees are written without fsync and marked as such; a background task
/// writes rkt's hash, syncs and drops the marker, leaving rkt's layout
/// (empty `rendered`). A tree in rkt's layout is used as it is; one whose
/// marker names another boot (its files may not have reached the disk
/// before a crash) is rendered again from the stored blobs when next used.
#[tokio::test(flavor = "multi_thread")]
async fn a_tree_from_another_boot_is_rendered_again() {
    use rkt::tree;
    let reg = registry();
    let (_t, store) = store();
    let image = store.pull(&format!("{}/cfg:latest", reg.main), Credentials::default(), None).await.expect("pull");
    let id = image.id.clone();
    let s = store.clone();
    let tree = tokio::task::spawn_blocking(move || s.tree(&id)).await.expect("join").expect("tree");
    assert_eq!(fs::read(tree.path.join("rendered")).expect("rendered"), b"", "rkt's empty rendered");
    tokio::task::spawn_blocking(tree::finish_settling).await.expect("settled");
    assert!(!tree.path.join(tree::UNSYNCED).exists(), "the marker goes once the tree is synced");
    let hash = fs::read_to_string(tree.path.join("hash")).expect("hash");
    assert_eq!(hash, tree::tree_hash(&tree.path, tree::WRITTEN_RULE).expect("rkt's tree hash"));
    let row = store.cas().read_index().expect("index").aciinfo.into_iter().find(|a| a.blobkey == image.id);
    let row = row.expect("row");
    assert!(row.treestoresize > 0, "treestoresize recorded");
    // rkt's size column: the stored blob (the image's own ACI); CRI's size: its layers
    let blob = fs::metadata(store.cas().blob(&image.id)).expect("blob").len();
    assert_eq!(row.size as u64, blob);
    let layers: u64 = image.manifest.dependencies.iter().map(|d| d.size).sum();
    assert!(layers > blob && image.size == layers, "{} {layers} {blob}", image.size);

    // rkt's layout (empty rendered, no marker) is trusted: no render, the
    // (deliberately changed) file stays as it is
    fs::write(tree.rootfs().join("work/hello.txt"), "changed").expect("change");
    let id = image.id.clone();
    let s = store.clone();
    let same = tokio::task::spawn_blocking(move || s.tree(&id)).await.expect("join").expect("tree");
    assert_eq!(fs::read_to_string(same.rootfs().join("work/hello.txt")).expect("hello"), "changed");

    // as after a power loss: the marker of an earlier boot, a file that never reached the disk
    fs::write(tree.path.join(tree::UNSYNCED), "00000000-0000-0000-0000-000000000000\n").expect("old marker");
    fs::write(tree.rootfs().join("work/hello.txt"), "").expect("truncate");
    let id = image.id.clone();
    let s = store.clone();
    let again = tokio::task::spawn_blocking(move || s.tree(&id)).await.expect("join").expect("re-render");
    assert_eq!(again.path, tree.path);
    assert_eq!(fs::read_to_string(again.rootfs().join("work/hello.txt")).expect("hello"), "hello from cfg image\n");
    tokio::task::spawn_blocking(tree::finish_settling).await.expect("settled");
    assert!(!again.path.join(tree::UNSYNCED).exists());
    assert_eq!(fs::read_to_string(again.path.join("hash")).expect("hash"), hash, "the same contents, the same hash");

    // an older release's tree: its boot id in `rendered`, from another boot
    fs::write(tree.path.join("rendered"), "00000000-0000-0000-0000-000000000000").expect("legacy marker");
    fs::write(tree.rootfs().join("work/hello.txt"), "").expect("truncate");
    let id = image.id.clone();
    let s = store.clone();
    let third = tokio::task::spawn_blocking(move || s.tree(&id)).await.expect("join").expect("re-render");
    assert_eq!(fs::read_to_string(third.rootfs().join("work/hello.txt")).expect("hello"), "hello from cfg image\n");
}

/// Tree ids follow rkt's order (an image's layers top first). A tree an
/// older release rendered under its id (layers bottom first) stays in use by
/// the pod that names it; a new use renders the tree under rkt's id; gc
/// removes the old tree once no pod names it.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_releases_tree_id_keeps_its_pods_and_gc_removes_it_after() {
    let reg = registry();
    let (t, store) = store();
    let repo = format!("two-layers-{}", uuid::Uuid::new_v4().simple());
    let bottom = raw_tar(&[("etc/", T::Directory, b"", ""), ("etc/which", T::Regular, b"bottom", "")]);
    let top = raw_tar(&[("etc/", T::Directory, b"", ""), ("etc/which", T::Regular, b"top", "")]);
    reg.push(&repo, &[bottom, top]).await;
    let image = store.pull(&format!("{}/{repo}:latest", reg.main), Credentials::default(), None).await.expect("pull");
    let layers = image.layer_keys();
    assert_eq!(layers.len(), 2);
    let mut rkt_order = vec![image.id.clone()];
    rkt_order.extend(layers.iter().rev().cloned());
    let new_id = rktlet::image::convert::tree_id(&rkt_order);
    assert_eq!(store.tree_id(&image).expect("id"), new_id);
    let old_id = image.legacy_tree_id();
    assert_ne!(old_id, new_id);
    // the layout an older release left: the tree under the old id, a pod naming it
    let new_path = store.cas().tree(&new_id);
    let old_path = store.cas().tree(&old_id);
    fs::rename(&new_path, &old_path).expect("old tree");
    let app = t.path().join("data/pods/run/11111111-2222-3333-4444-555555555555/appsinfo/app");
    fs::create_dir_all(&app).expect("pod");
    fs::write(app.join("treeStoreID"), &old_id).expect("treeStoreID");

    let s = store.clone();
    let id = image.id.clone();
    let tree = tokio::task::spawn_blocking(move || s.tree(&id)).await.expect("join").expect("tree");
    assert_eq!(tree.id, new_id, "a new use renders under rkt's id");
    assert_eq!(fs::read_to_string(tree.rootfs().join("etc/which")).expect("which"), "top");
    let report = store.gc(std::time::Duration::from_secs(3600)).expect("gc");
    assert!(old_path.join("rootfs/etc/which").exists(), "the pod's tree stays: {report:?}");
    assert_eq!(report.trees, [new_id], "the tree no pod names goes");
    fs::remove_dir_all(t.path().join("data/pods/run")).expect("pod gone");
    let report = store.gc(std::time::Duration::from_secs(3600)).expect("gc");
    assert_eq!(report.trees, [old_id], "then the old tree goes");
    assert!(!old_path.exists());
}

/// Mirrors from `registries.toml` against live registries: an upstream that
/// cannot be reached is served by its mirror and the image keeps the name it
/// was asked by; a dead mirror is skipped for the next endpoint; with
/// `skip_upstream` and only dead mirrors the pull fails instead of going out.
#[tokio::test(flavor = "multi_thread")]
async fn mirrors_serve_an_unreachable_upstream_and_dead_ones_are_skipped() {
    let reg = registry();
    let main = &reg.main;
    // a port nothing listens on
    let dead = format!("127.0.0.1:{}", common::ports::free_port());
    let config: RegistryConfig = toml::from_str(&format!(
        r#"
[hosts."upstream.invalid"]
mirrors = [{{ endpoint = "http://{dead}" }}, {{ endpoint = "http://{main}" }}]
[hosts."{main}"]
mirrors = [{{ endpoint = "http://{dead}" }}]
[hosts."closed.invalid"]
mirrors = [{{ endpoint = "http://{dead}" }}]
skip_upstream = true
"#
    ))
    .expect("registries.toml");
    let t = tempfile::tempdir().expect("tmp");
    let store = Store::open(&DataDir::new(t.path().join("data")), config).expect("open store");

    let image =
        store.pull("upstream.invalid/busybox:latest", Credentials::default(), None).await.expect("pull via the mirror");
    assert_eq!(image.tags, ["upstream.invalid/busybox:latest"], "the name asked for, not the mirror's");
    let s = store.clone();
    let id = image.id.clone();
    let tree = tokio::task::spawn_blocking(move || s.tree(&id)).await.expect("join").expect("tree");
    assert_eq!(mode(&tree.rootfs().join("bin/busybox")), 0o755);

    let image = store
        .pull(&format!("{main}/cfg:latest"), Credentials::default(), None)
        .await
        .expect("the upstream after its dead mirror");
    assert_eq!(image.tags, [format!("{main}/cfg:latest")]);

    let e = store
        .pull("closed.invalid/busybox:latest", Credentials::default(), None)
        .await
        .expect_err("only a dead mirror and no upstream");
    assert!(e.to_string().contains(&dead), "the error names the endpoint tried: {e}");
}
