//! The real rkt 1.30.0 and rktlet on one data directory, both ways (issue
//! 37): rkt lists, shows, exports and removes the images of a directory
//! rktlet alone created (ACIs and docker images), and reads, stops and
//! collects the pods rktlet runs; rktlet lists, shows and runs the images
//! rkt fetched (by rkt's image strings), checks ACIs with the keys rkt
//! trusts, and leaves the removal of rkt's images to rkt.
//! `RKT` names a rkt binary; otherwise the one shipped xz-compressed in the
//! shared tools (`../shared/tools/rkt/rkt-1.30.0.xz` beside the project) is
//! unpacked once under the target dir. Without either, each test prints a
//! counted SKIPPED line.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const BIN: &str = env!("CARGO_BIN_EXE_rktlet");

/// The rkt binary, or why there is none.
fn rkt_binary() -> Result<&'static Path, String> {
    static RKT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    RKT.get_or_init(|| {
        if let Some(path) = std::env::var_os("RKT") {
            return Ok(PathBuf::from(path));
        }
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/rkt/rkt-1.30.0.xz");
        let dest = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rkt-1.30.0");
        if dest.exists() {
            return Ok(dest);
        }
        if !shipped.exists() {
            return Err(format!("no rkt: set RKT=path or provide {}", shipped.display()));
        }
        let out = Command::new("xz").arg("-dc").arg(&shipped).output().map_err(|e| format!("xz: {e}"))?;
        if !out.status.success() {
            return Err(format!("unpacking {}: {}", shipped.display(), String::from_utf8_lossy(&out.stderr)));
        }
        let tmp = dest.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &out.stdout).map_err(|e| e.to_string())?;
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, &dest).map_err(|e| e.to_string())?;
        Ok(dest)
    })
    .as_deref()
    .map_err(Clone::clone)
}

/// The rkt binary, or None after a counted SKIPPED line for `test`.
fn rkt_or_skip(test: &str) -> Option<&'static Path> {
    rkt_binary().map_err(|why| common::skipped(test, &why)).ok()
}

/// Runs `program` on data directory `dir` (`--dir=`, which both take);
/// its stdout, or a panic with what it said.
fn run(program: &Path, dir: &Path, args: &[&str]) -> String {
    let out = Command::new(program).arg(format!("--dir={}", dir.display())).args(args).output().expect("run");
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn write_aci(dir: &Path, file: &str, name: &str) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, common::aci::aci(name, "hello")).expect("write aci");
    path
}

#[test]
fn rkt_reads_and_removes_the_images_of_a_directory_rktlet_created() {
    let Some(rkt) = rkt_or_skip("rkt_reads_and_removes_the_images_of_a_directory_rktlet_created") else { return };
    let t = tempfile::tempdir().expect("tempdir");
    let data = t.path().join("data");
    let aci = write_aci(t.path(), "made.aci", "example.com/rktlet-made");
    let id = run(Path::new(BIN), &data, &["--insecure-options=image", "fetch", &aci.display().to_string()]);
    let id = id.trim().to_string();
    assert!(id.starts_with("sha512-"), "{id}");

    // rkt never opened this directory: it lists rktlet's image all the same
    let list = run(rkt, &data, &["image", "list", "--no-legend", "--full"]);
    let line = list.lines().find(|l| l.starts_with(&id)).unwrap_or_else(|| panic!("rkt lists no {id}: {list}"));
    assert!(line.contains("example.com/rktlet-made"), "{line}");
    let manifest: serde_json::Value =
        serde_json::from_str(&run(rkt, &data, &["image", "cat-manifest", &id])).expect("rkt prints the manifest");
    assert_eq!(manifest["name"], "example.com/rktlet-made");
    let exported = t.path().join("exported.aci");
    run(rkt, &data, &["image", "export", &id, &exported.display().to_string()]);
    assert!(std::fs::metadata(&exported).is_ok_and(|m| m.len() > 0), "rkt exported nothing");

    // removed by rkt: gone for rktlet too
    run(rkt, &data, &["image", "rm", &id]);
    let left = run(Path::new(BIN), &data, &["image", "list"]);
    assert!(!left.contains(&id[..19]), "rktlet still lists the image rkt removed: {left}");
    let left = run(rkt, &data, &["image", "list", "--no-legend", "--full"]);
    assert!(!left.contains(&id), "{left}");
}

#[test]
fn rktlet_lists_rkts_images_and_leaves_their_removal_to_rkt() {
    let Some(rkt) = rkt_or_skip("rktlet_lists_rkts_images_and_leaves_their_removal_to_rkt") else { return };
    let t = tempfile::tempdir().expect("tempdir");
    let data = t.path().join("data");
    let aci = write_aci(t.path(), "theirs.aci", "example.com/rkt-made");
    let id = run(rkt, &data, &["--insecure-options=image", "fetch", &aci.display().to_string()]);
    let id = id.trim().to_string();
    assert!(id.starts_with("sha512-"), "{id}");
    let list = run(Path::new(BIN), &data, &["image", "list"]);
    assert!(list.contains("example.com/rkt-made"), "rktlet does not list rkt's image: {list}");
    let manifest: serde_json::Value =
        serde_json::from_str(&run(Path::new(BIN), &data, &["image", "cat-manifest", &id]))
            .expect("rktlet prints the manifest");
    assert_eq!(manifest["name"], "example.com/rkt-made");
    // an image rktlet fetches into rkt's directory reaches rkt's database beside rkt's own
    let mine = write_aci(t.path(), "mine.aci", "example.com/rktlet-made");
    let my_id = run(Path::new(BIN), &data, &["--insecure-options=image", "fetch", &mine.display().to_string()]);
    let list = run(rkt, &data, &["image", "list", "--no-legend", "--full"]);
    assert!(list.contains(my_id.trim()) && list.contains(&id), "{list}");
    // rkt's own image is rkt's to remove: rktlet says so and keeps it
    let refused = Command::new(BIN).arg(format!("--dir={}", data.display())).args(["image", "rm", &id]).output();
    let refused = refused.expect("run rktlet");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("rkt image rm"), "{said}");
    run(rkt, &data, &["image", "rm", &id]);
    let list = run(Path::new(BIN), &data, &["image", "list"]);
    assert!(!list.contains("example.com/rkt-made") && list.contains(my_id.trim()), "{list}");
}

/// A docker image rktlet pulled into a directory rkt never opened: rkt
/// lists it and prints its manifest (rktlet's first fetch makes the
/// database rkt reads).
#[test]
fn rkt_lists_a_docker_image_rktlet_pulled_into_an_empty_directory() {
    let Some(rkt) = rkt_or_skip("rkt_lists_a_docker_image_rktlet_pulled_into_an_empty_directory") else { return };
    let reg = common::registry::registry();
    let t = tempfile::tempdir().expect("tempdir");
    let data = t.path().join("data");
    let id = run(Path::new(BIN), &data, &["fetch", &format!("docker://{}/busybox:latest", reg.main)]);
    let id = id.trim().to_string();
    assert!(id.starts_with("sha512-"), "{id}");
    let list = run(rkt, &data, &["image", "list", "--no-legend", "--full"]);
    let line = list.lines().find(|l| l.starts_with(&id)).unwrap_or_else(|| panic!("rkt lists no {id}: {list}"));
    assert!(line.contains("busybox"), "{line}");
    let manifest: serde_json::Value =
        serde_json::from_str(&run(rkt, &data, &["image", "cat-manifest", &id])).expect("rkt prints the manifest");
    assert!(manifest["name"].as_str().is_some_and(|n| n.ends_with("/busybox")), "{manifest:#}");
}

/// A key rkt trusts (`rkt trust --prefix`) checks the ACIs rktlet fetches
/// from then on: an ACI it signed is imported without
/// `--insecure-options=image`, one signed by a key nobody trusted is refused.
#[test]
fn rktlet_checks_acis_with_the_keys_rkt_trusts() {
    let Some(rkt) = rkt_or_skip("rktlet_checks_acis_with_the_keys_rkt_trusts") else { return };
    let t = tempfile::tempdir().expect("tempdir");
    let (data, local) = (t.path().join("data"), t.path().join("local"));
    let gpg =
        common::aci::Gpg::with_algorithm(&["Signer <signer@example.com>", "Other <other@example.com>"], "rsa2048");
    let key = t.path().join("signer.asc");
    gpg.export("Signer <signer@example.com>", &key);
    let local_arg = format!("--local-config={}", local.display());
    let trusted = run(
        rkt,
        &data,
        &[&local_arg, "trust", "--prefix=example.com/signed", "--skip-fingerprint-review", &key.display().to_string()],
    );
    assert!(local.join("trustedkeys/prefix.d/example.com/signed").is_dir(), "rkt trusted nothing: {trusted}");
    let listed = run(Path::new(BIN), &data, &[&local_arg, "trust", "list"]);
    assert!(listed.contains(&gpg.fingerprint("Signer <signer@example.com>")), "rktlet lists rkt's key: {listed}");

    // (two images of the same name, different content: two ids)
    let signed_by = |signer: &str, file: &str, content: &str| -> PathBuf {
        let aci = t.path().join(file);
        std::fs::write(&aci, common::aci::aci("example.com/signed", content)).expect("aci");
        std::fs::write(t.path().join(format!("{file}.asc")), gpg.sign(signer, &aci, true)).expect("signature");
        aci
    };
    let good = signed_by("Signer <signer@example.com>", "good.aci", "the signer's");
    let id = run(Path::new(BIN), &data, &[&local_arg, "fetch", &good.display().to_string()]);
    assert!(id.trim().starts_with("sha512-"), "{id}");
    let bad = signed_by("Other <other@example.com>", "bad.aci", "another's");
    let refused = Command::new(BIN)
        .arg(format!("--dir={}", data.display()))
        .args([&local_arg, "fetch", &bad.display().to_string()])
        .output()
        .expect("run rktlet");
    let said = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(!refused.status.success(), "an ACI signed by an untrusted key was imported");
    assert!(said.contains("key") || said.contains("signature"), "refused for its signature: {said}");
    let list = run(Path::new(BIN), &data, &["image", "list"]);
    assert_eq!(list.matches("example.com/signed").count(), 1, "only the trusted signer's image: {list}");
}

/// An ACI of the node's static busybox that sleeps, as `name` version 1.0.
fn sleeper_aci(dir: &Path, name: &str) -> PathBuf {
    let busybox = std::fs::read("/bin/busybox").expect("the static busybox (busybox-static, scripts/install-deps.sh)");
    let manifest = serde_json::json!({
        "acKind": "ImageManifest", "acVersion": "0.8.11", "name": name,
        "labels": [{"name": "version", "value": "1.0"}, {"name": "os", "value": "linux"}, {"name": "arch", "value": "amd64"}],
        "app": {"exec": ["/bin/busybox", "sleep", "1000"], "user": "0", "group": "0"}
    });
    let mut tar = tar::Builder::new(Vec::new());
    let mut add = |path: &str, kind: tar::EntryType, mode: u32, data: &[u8]| {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(data.len() as u64);
        h.set_cksum();
        tar.append_data(&mut h, path, data).expect("tar entry");
    };
    add("manifest", tar::EntryType::Regular, 0o644, &serde_json::to_vec(&manifest).expect("json"));
    for d in ["rootfs", "rootfs/bin"] {
        add(d, tar::EntryType::Directory, 0o755, &[]);
    }
    add("rootfs/bin/busybox", tar::EntryType::Regular, 0o755, &busybox);
    let path = dir.join("sleeper.aci");
    std::fs::write(&path, tar.into_inner().expect("tar")).expect("write aci");
    path
}

/// A pod and app rktlet's CLI made, read and driven by rkt: `list`,
/// `status`, `cat-manifest`, `app list`, `app status`, then `stop` and `gc`,
/// which leave nothing behind.
#[test]
fn rkt_reads_stops_and_collects_a_pod_rktlet_runs() {
    let test = "rkt_reads_stops_and_collects_a_pod_rktlet_runs";
    let Some(rkt) = rkt_or_skip(test) else { return };
    let t = tempfile::tempdir().expect("tempdir");
    let data = t.path().join("data");
    let aci = sleeper_aci(t.path(), "example.com/sleeper");
    // the image is rkt's: fetched by rkt into the directory rktlet then runs pods in
    let image = run(rkt, &data, &["--insecure-options=image", "fetch", &aci.display().to_string()]);
    let uuid_file = t.path().join("uuid");
    let mut sandbox = Command::new(BIN)
        .arg(format!("--dir={}", data.display()))
        .args(["app", "sandbox", "--net=host", "--hostname=rktread"])
        .arg(format!("--uuid-file-save={}", uuid_file.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("app sandbox");
    // the uuid written whole, then the pod ready (its systemd up), as `rktlet status` says
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what} did not happen in 20 s");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    wait("the pod's uuid", &|| std::fs::read_to_string(&uuid_file).is_ok_and(|u| u.trim().len() == 36));
    let uuid = std::fs::read_to_string(&uuid_file).expect("uuid").trim().to_string();
    wait("the pod ready", &|| {
        let status = run(Path::new(BIN), &data, &["status", &uuid, "--format=json"]);
        serde_json::from_str::<serde_json::Value>(&status).is_ok_and(|s| s["ready"] == true)
    });
    // by rkt's image strings (name:version, and the bare name) and app names
    let added = run(Path::new(BIN), &data, &["app", "add", &uuid, "example.com/sleeper:1.0", "--name=sl"]);
    assert_eq!(added.trim(), format!("{uuid}:sl"), "the app is named as rkt names it");
    run(Path::new(BIN), &data, &["app", "start", &uuid, "--app=sl"]);
    run(Path::new(BIN), &data, &["app", "add", &uuid, "example.com/sleeper", "--name=bare"]);
    run(Path::new(BIN), &data, &["app", "start", &uuid, "--app=bare"]);

    let list = run(rkt, &data, &["list", "--no-legend", "--full"]);
    assert!(list.contains(&uuid) && list.contains("example.com/sleeper:1.0") && list.contains("running"), "{list}");
    let status = run(rkt, &data, &["status", &uuid]);
    assert!(status.contains("state=running"), "{status}");
    let manifest: serde_json::Value =
        serde_json::from_str(&run(rkt, &data, &["cat-manifest", &uuid])).expect("rkt prints the pod manifest");
    // (rkt's fetch printed the key as rkt shortens it)
    let app_image = manifest["apps"][0]["image"]["id"].as_str().unwrap_or_default();
    assert!(app_image.starts_with(image.trim()) && app_image.len() == 71, "{manifest:#}");
    let app = |args: &[&str]| {
        let out = Command::new(rkt)
            .arg(format!("--dir={}", data.display()))
            .args(args)
            .env("RKT_EXPERIMENT_APP", "true")
            .output()
            .expect("run rkt");
        assert!(out.status.success(), "rkt {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let apps = app(&["app", "list", &uuid]);
    for name in ["sl", "bare"] {
        assert!(
            apps.lines().any(|l| l.split_whitespace().next() == Some(name) && l.contains("running")),
            "{name}: {apps}"
        );
        let one = app(&["app", "status", &uuid, &format!("--app={name}")]);
        assert!(one.contains("state=running") && one.contains(image.trim()), "{one}");
    }

    run(rkt, &data, &["stop", &uuid]);
    let status = sandbox.wait().expect("the sandbox process ends with its pod");
    assert!(status.code().is_some(), "{status:?}");
    let list = run(rkt, &data, &["list", "--no-legend", "--full"]);
    assert!(list.contains("exited"), "{list}");
    run(rkt, &data, &["gc", "--grace-period=0s"]);
    let list = run(Path::new(BIN), &data, &["list"]);
    assert!(!list.contains(&uuid[..8]), "rktlet still lists the pod rkt collected: {list}");
    common::assert_no_leaks(&data, &[uuid]);
}
