//! The rkt-style CLI on its own data dir, no daemon: fetch, app sandbox,
//! app add/start/status/list/stop/rm, list/status/rm.

mod common;

use common::{BIN, assert_no_leaks};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn rktlet(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(BIN).arg("--dir").arg(dir).args(args).output().expect("run rktlet");
    assert!(out.status.success(), "rktlet {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn json(dir: &Path, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&rktlet(dir, args)).expect("JSON output")
}

fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "{what} did not happen in 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `rktlet app sandbox` on the node's network, with `hostname`, writing its
/// uuid to `uuid_file`: the sandbox process and the pod's uuid.
fn sandbox(dir: &Path, hostname: &str, uuid_file: &Path) -> (std::process::Child, String) {
    let child = Command::new(BIN)
        .arg("--dir")
        .arg(dir)
        .args(["app", "sandbox", "--net=host", &format!("--hostname={hostname}")])
        .arg(format!("--uuid-file-save={}", uuid_file.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("app sandbox");
    wait("uuid file", || uuid_file.exists());
    // read as soon as it is there: the sandbox writes it whole or not at all
    let uuid = std::fs::read_to_string(uuid_file).expect("uuid");
    assert_eq!(uuid.len(), 36, "a whole UUID in the file at once: {uuid:?}");
    (child, uuid)
}

#[test]
fn cli_runs_a_pod_and_an_app_without_the_daemon() {
    let reg = common::registry::registry();
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("data");
    let image = format!("docker://{}/busybox:latest", reg.main);
    let id = rktlet(&dir, &["fetch", &image]);
    assert!(id.starts_with("sha512-"), "{id}");

    let uuid_file = t.path().join("uuid");
    let (mut sandbox, uuid) = sandbox(&dir, "clipod", &uuid_file);
    wait("pod ready", || json(&dir, &["status", &uuid, "--format=json"])["ready"] == true);
    let pods = json(&dir, &["list", "--format=json"]);
    assert_eq!(pods[0]["state"], "running");

    let log = t.path().join("app.log");
    let log_arg = format!("--log-file={}", log.display());
    let cid = rktlet(
        &dir,
        &[
            "app",
            "add",
            &uuid,
            &id,
            "--name=hello",
            // CreateContainer's naming: `<attempt>-<name>`
            "--attempt=0",
            "--exec=/bin/sh",
            "--environment=WHO=cli",
            &log_arg,
            "--",
            "-c",
            "echo hi $WHO; exit 5",
        ],
    );
    assert_eq!(cid, format!("{uuid}:0-hello"));
    assert_eq!(json(&dir, &["app", "status", &uuid, "--app=0-hello", "--format=json"])["state"], "created");
    rktlet(&dir, &["app", "start", &uuid, "--app=hello"]);
    wait("app exit", || json(&dir, &["app", "status", &uuid, "--app=0-hello", "--format=json"])["state"] == "exited");
    let status = json(&dir, &["app", "status", &uuid, "--app=0-hello", "--format=json"]);
    assert_eq!(status["exit_code"], 5);
    wait("log line", || std::fs::read_to_string(&log).unwrap_or_default().contains("stdout F hi cli"));
    let apps = json(&dir, &["app", "list", &uuid, "--format=json"]);
    assert_eq!(apps.as_array().map(Vec::len), Some(1));
    rktlet(&dir, &["app", "rm", &uuid, "--app=0-hello"]);
    assert_eq!(json(&dir, &["app", "list", &uuid, "--format=json"]).as_array().map(Vec::len), Some(0));
    // removing an app that is not there (again, or never added) fails and says so
    for app in ["--app=0-hello", "--app=0-nosuch"] {
        let out = Command::new(BIN).arg("--dir").arg(&dir).args(["app", "rm", &uuid, app]).output().expect("app rm");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "app rm {app} of a missing app succeeded");
        assert!(err.contains("not found") && err.contains(app.trim_start_matches("--app=")), "{err}");
    }

    // rkt's names: an ACI by its name (and version label), an app by the name it was added as
    let aci = t.path().join("named.aci");
    std::fs::write(&aci, common::aci::aci("example.com/named", "hi")).expect("aci");
    let aci_id = rktlet(&dir, &["--insecure-options=image", "fetch", &aci.display().to_string()]);
    for image in ["example.com/named:1.0", "example.com/named"] {
        let cid = rktlet(&dir, &["app", "add", &uuid, image, "--name=named", "--exec=/bin/true"]);
        assert_eq!(cid, format!("{uuid}:named"), "{image}: the app is named as rkt names it");
        let status = json(&dir, &["app", "status", &uuid, "--app=named", "--format=json"]);
        assert_eq!((status["state"].as_str(), status["image_id"].as_str()), (Some("created"), Some(aci_id.as_str())));
        rktlet(&dir, &["app", "rm", &uuid, "--app=named"]);
    }
    let out = Command::new(BIN)
        .arg("--dir")
        .arg(&dir)
        .args(["app", "add", &uuid, "example.com/named:2.0", "--name=v2"])
        .output()
        .expect("app add");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("not found"), "{out:?}");

    // a running app's status shows what it uses: a 1 MB file in its writable layer, CPU, memory
    let script = "head -c 1000000 /dev/zero > /tmp/f; exec sleep 100";
    rktlet(&dir, &["app", "add", &uuid, &id, "--name=user", "--exec=/bin/sh", "--", "-c", script]);
    rktlet(&dir, &["app", "start", &uuid, "--app=user"]);
    let usage =
        |d: &std::path::Path| json(d, &["app", "status", &uuid, "--app=user", "--format=json"])["usage"].clone();
    wait("usage", || usage(&dir)["writable_layer_bytes"].as_u64().is_some_and(|b| b >= 1_000_000));
    let u = usage(&dir);
    assert!(u["cpu_total_ns"].as_u64().is_some_and(|n| n > 0), "{u}");
    assert!(u["memory_usage_bytes"].as_u64().is_some_and(|n| n > 0), "{u}");
    let table = rktlet(&dir, &["app", "status", &uuid, "--app=user"]);
    assert!(table.contains("\nwritable_layer_bytes=") && table.contains("\ncpu_total_ns="), "{table}");
    rktlet(&dir, &["app", "stop", &uuid, "--app=user"]);
    assert!(json(&dir, &["app", "status", &uuid, "--app=user", "--format=json"]).get("usage").is_none());
    rktlet(&dir, &["app", "rm", &uuid, "--app=user"]);

    rktlet(&dir, &["stop", &uuid]);
    assert_eq!(json(&dir, &["status", &uuid, "--format=json"])["state"], "exited");
    let _ = sandbox.wait();
    rktlet(&dir, &["rm", &uuid]);
    assert_no_leaks(&dir, &[uuid]);
}

/// Runs the CLI in zone `tz`; its stdout, untrimmed.
fn rktlet_tz(dir: &Path, tz: &str, args: &[&str]) -> String {
    let out = Command::new(BIN).env("TZ", tz).arg("--dir").arg(dir).args(args).output().expect("run rktlet");
    assert!(out.status.success(), "rktlet {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `key=value` lines as a script reads rkt's `status`/`app status`: split
/// at the first `=`, lines without one skipped.
fn key_values(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A file's mtime as rkt prints it in UTC (layout `2006-01-02 15:04:05.999
/// -0700 MST`), worked out with date(1), and its seconds since the epoch.
fn rkt_time_utc(path: &Path) -> (String, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).expect("stat");
    let out = Command::new("date").env("TZ", "UTC").arg("-d").arg(format!("@{}", m.mtime())).arg("+%F %T").output();
    let wall = String::from_utf8_lossy(&out.expect("date").stdout).trim().to_string();
    let millis = format!("{:03}", m.mtime_nsec() / 1_000_000);
    let millis = millis.trim_end_matches('0');
    let frac = if millis.is_empty() { String::new() } else { format!(".{millis}") };
    (format!("{wall}{frac} +0000 UTC"), m.mtime())
}

/// What a script written for rkt 1.30 reads from `status` (key=value lines),
/// `list` (the table and `--format=json`), `app list` and `app status`,
/// against a real pod with an app that exits 3.
#[test]
fn scripts_written_for_rkt_read_list_and_status() {
    let reg = common::registry::registry();
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("data");
    let image = format!("docker://{}/busybox:latest", reg.main);
    let id = rktlet(&dir, &["fetch", &image]);
    let uuid_file = t.path().join("uuid");
    let (mut sandbox, uuid) = sandbox(&dir, "scripted", &uuid_file);
    let pod_dir = dir.join("pods/run").join(&uuid);

    // `rkt status --wait-ready=30s --uuid-file=F`, read as key=value
    let uuid_arg = format!("--uuid-file={}", uuid_file.display());
    let kv = key_values(&rktlet_tz(&dir, "UTC", &["status", "--wait-ready=30s", &uuid_arg]));
    assert_eq!(kv["state"], "running", "{kv:?}");
    let (created, created_secs) = rkt_time_utc(&pod_dir.join("pod-created"));
    assert_eq!(kv["created"], created);
    let (started, _) = rkt_time_utc(&pod_dir.join("ppid"));
    assert_eq!(kv["started"], started);
    let ppid = std::fs::read_to_string(pod_dir.join("ppid")).expect("ppid");
    assert_eq!(kv["pid"], ppid.trim());
    assert_eq!(kv["exited"], "false");
    assert_eq!(kv["networks"], "", "a host-network pod has none");
    assert_eq!(kv.len(), 6, "{kv:?}");
    // the local zone is the process's, as Go reads TZ
    if Path::new("/usr/share/zoneinfo/Asia/Kolkata").exists() {
        let ist = key_values(&rktlet_tz(&dir, "Asia/Kolkata", &["status", &uuid]));
        assert!(ist["created"].ends_with(" +0530 IST"), "{ist:?}");
        assert_ne!(ist["created"][..19], created[..19]);
    } else {
        println!("SKIPPED: no zoneinfo for Asia/Kolkata; only UTC times checked");
    }

    // an app that exits 3
    rktlet(&dir, &["app", "add", &uuid, &id, "--name=three", "--exec=/bin/sh", "--", "-c", "exit 3"]);
    rktlet(&dir, &["app", "start", &uuid, "--app=three"]);
    wait("app exit", || key_values(&rktlet(&dir, &["app", "status", &uuid, "--app=three"]))["state"] == "exited");
    let app = key_values(&rktlet_tz(&dir, "UTC", &["app", "status", &uuid, "--app=three"]));
    assert_eq!((app["name"].as_str(), app["exit_code"].as_str()), ("three", "3"), "{app:?}");
    assert!(app["image_id"].starts_with("sha512-") && app["finished_at"].ends_with(" +0000 UTC"), "{app:?}");
    // `rkt app list --no-legend | awk '{print $1, $2}'`
    let apps = rktlet_tz(&dir, "UTC", &["app", "list", &uuid, "--no-legend"]);
    let rows: Vec<Vec<&str>> = apps.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows, [["three", "exited"]], "{apps:?}");
    assert!(rktlet(&dir, &["app", "list", &uuid]).starts_with("NAME\tSTATE\n"));

    // `rkt list --format=json | jq '.[] | select(.name == UUID)'`
    let pods: serde_json::Value = serde_json::from_str(&rktlet(&dir, &["list", "--format=json"])).expect("JSON");
    let pod = pods.as_array().expect("an array").iter().find(|p| p["name"] == uuid.as_str()).expect("listed");
    assert_eq!(pod["state"], "running");
    assert_eq!(pod["created_at"], created_secs, "seconds, as rkt");
    assert!(pod["started_at"].as_i64().is_some_and(|s| s >= created_secs), "{pod}");
    assert_eq!(pod["app_names"], serde_json::json!(["three"]));
    assert_eq!(pod["apps"][0]["exit_code"], 3, "{pod}");
    assert_eq!(pod["apps"][0]["state"], "exited");
    assert!(pod.get("networks").is_none(), "omitted when empty, as rkt: {pod}");
    // `rkt list --no-legend | awk '{print $1}'`; --full prints the whole UUID
    let short = rktlet(&dir, &["list", "--no-legend"]);
    assert_eq!(short.split_whitespace().next(), Some(&uuid[..8]), "{short}");
    let full = rktlet(&dir, &["list", "--full", "--no-legend"]);
    let cells: Vec<&str> = full.split('\t').filter(|c| !c.is_empty()).collect();
    assert_eq!(cells[..2], [uuid.as_str(), "three"], "{full}");
    assert!(cells[3].starts_with("sha512-") && cells[3].len() == 19, "{full}");
    // IMAGE NAME: the image manifest's name and its version label
    let manifest: serde_json::Value =
        serde_json::from_str(&rktlet(&dir, &["image", "cat-manifest", &id])).expect("manifest");
    let labels = manifest["labels"].as_array().cloned().unwrap_or_default();
    let version = labels.iter().find(|l| l["name"] == "version").and_then(|l| l["value"].as_str());
    let name = manifest["name"].as_str().expect("name");
    assert_eq!(cells[2], version.map_or(name.to_string(), |v| format!("{name}:{v}")), "{full}");

    // stopped: exited=true and the app's exit code as app-NAME=CODE
    rktlet(&dir, &["stop", &uuid]);
    let _ = sandbox.wait();
    let kv = key_values(&rktlet_tz(&dir, "UTC", &["status", &uuid, "--wait=10s"]));
    assert_eq!((kv["state"].as_str(), kv["exited"].as_str()), ("exited", "true"), "{kv:?}");
    assert_eq!(kv["app-three"], "3");
    assert_eq!(kv["created"], created);
    let json: serde_json::Value =
        serde_json::from_str(&rktlet(&dir, &["status", &uuid, "--format=json"])).expect("JSON");
    assert_eq!((json["state"].as_str(), json["apps"][0]["exit_code"].as_i64()), (Some("exited"), Some(3)), "{json}");
    rktlet(&dir, &["rm", &uuid]);
    assert_eq!(rktlet(&dir, &["list", "--format=json"]), "null", "rkt's empty list");
    // rkt's status fails with 254 (a script's `[ $? -eq 254 ]`)
    let gone = Command::new(BIN).arg("--dir").arg(&dir).args(["status", &uuid]).output().expect("status");
    assert_eq!(gone.status.code(), Some(254), "{}", String::from_utf8_lossy(&gone.stderr));
    assert_no_leaks(&dir, &[uuid]);
}

/// A reader that goes away (`rktlet config default | head -1`) ends the
/// command quietly by SIGPIPE, as Unix tools end, instead of a panic.
#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    // close-on-exec: a command another test spawns meanwhile must not
    // inherit the read end and keep the pipe open (the write then succeeds)
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    drop(read);
    let out = Command::new(BIN)
        .args(["config", "default"])
        .stdout(Stdio::from(std::fs::File::from(write)))
        .stderr(Stdio::piped())
        .output()
        .expect("run rktlet");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{stderr}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
}

/// The help text of `rktlet ARGS... --help`: its option names and their descriptions.
fn options(args: &[&str]) -> Vec<(String, String)> {
    let out = Command::new(BIN).args(args).arg("--help").output().expect("help");
    assert!(out.status.success(), "{args:?} --help");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut opts: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("--") || trimmed.starts_with("-h, --help") || trimmed.starts_with("-V, ") {
            let name = trimmed.trim_start_matches("-h, ").trim_start_matches("-V, ");
            let name = name.split_whitespace().next().unwrap_or_default().to_string();
            opts.push((name, String::new()));
        } else if let Some(last) = opts.last_mut()
            && !trimmed.is_empty()
            && line.starts_with("          ")
        {
            last.1.push_str(trimmed);
        }
    }
    opts
}

/// Each setting has one name, and a command's help lists only the flags it
/// uses (`serve --help` listed `--dir` and `--data-dir` with one text, and
/// every command listed rkt's global flags).
#[test]
fn each_command_lists_the_flags_it_uses_once() {
    let names = |args: &[&str]| options(args).into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    let serve = names(&["serve"]);
    assert!(serve.contains(&"--data-dir".to_string()), "{serve:?}");
    for absent in ["--dir", "--insecure-options", "--local-config", "--system-config", "--debug"] {
        assert!(!serve.contains(&absent.to_string()), "serve lists {absent}: {serve:?}");
    }
    assert_eq!(names(&["info"]), ["--socket", "--help"]);
    assert_eq!(names(&["config", "default"]), ["--help"]);
    let list = names(&["list"]);
    assert!(list.contains(&"--dir".to_string()) && !list.contains(&"--insecure-options".to_string()), "{list:?}");
    let fetch = names(&["fetch"]);
    for present in ["--dir", "--insecure-options", "--local-config", "--system-config"] {
        assert!(fetch.contains(&present.to_string()), "fetch lacks {present}: {fetch:?}");
    }
    assert!(names(&["rm"]).contains(&"--cni-conf-dir".to_string()));
    assert!(!names(&["app", "add"]).contains(&"--cni-conf-dir".to_string()));
    // no two flags of any command share a description (one setting, two names)
    let commands: &[&[&str]] = &[
        &[],
        &["serve"],
        &["doctor"],
        &["info"],
        &["list"],
        &["status"],
        &["stop"],
        &["rm"],
        &["gc"],
        &["fetch"],
        &["trust"],
        &["stats"],
        &["image", "list"],
        &["image", "rm"],
        &["app", "add"],
        &["app", "sandbox"],
        &["app", "exec"],
        &["bench"],
        &["demo"],
    ];
    for args in commands {
        let opts = options(args);
        for (i, (name, text)) in opts.iter().enumerate() {
            let twin = opts[i + 1..].iter().find(|(_, t)| !t.is_empty() && t == text);
            assert!(twin.is_none(), "rktlet {args:?}: {name} and {:?} say the same: {text}", twin.map(|t| &t.0));
        }
    }
}

/// rkt's global flags work before the command, as rkt's callers pass them
/// (`--insecure-options` to every command, exec mode does so), and a
/// command's own flags after it; the command's own wins.
#[test]
fn rkt_global_flags_work_before_the_command_and_after_it() {
    let t = tempfile::tempdir().expect("tempdir");
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(BIN).args(args).output().expect("run");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    // `image list` makes the store it opens: which dir it made shows which --dir counted
    run(&[os("--dir"), a.as_os_str(), os("--insecure-options=image,ondisk"), os("image"), os("list")]);
    assert!(a.join("cas").is_dir(), "the global --dir was not used");
    run(&[os("image"), os("list"), os("--dir"), b.as_os_str()]);
    assert!(b.join("cas").is_dir(), "the command's --dir was not used");
    // the command's own --dir wins over the global one
    let c = t.path().join("c");
    run(&[os("--dir"), t.path().join("d").as_os_str(), os("image"), os("list"), os("--dir"), c.as_os_str()]);
    assert!(c.join("cas").is_dir() && !t.path().join("d").exists(), "the command's --dir did not win");
    // rkt's global flags are taken before any command, as rkt's callers pass them all
    let listed = run(&[os("--dir"), a.as_os_str(), os("--insecure-options=image,ondisk"), os("list")]);
    assert!(listed.starts_with("UUID"), "{listed}");
    run(&[os("--dir"), a.as_os_str(), os("--local-config"), t.path().as_os_str(), os("image"), os("list")]);
}

/// `rm` of a pod that is not there names it once, and fails.
#[test]
fn rm_of_an_unknown_pod_names_it_once() {
    let t = tempfile::tempdir().expect("tempdir");
    let uuid = "2b7e6f0e-1111-2222-3333-444455556666";
    let out = Command::new(BIN).arg("--dir").arg(t.path()).args(["rm", uuid]).output().expect("rm");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.matches(uuid).count(), 1, "{err}");
    assert!(err.contains("not found"), "{err}");
}

/// `info` without a daemon says what is at the socket's path: nothing, not a
/// socket, or a socket nobody listens on (no daemon running).
#[test]
fn info_without_a_daemon_says_why() {
    let t = tempfile::tempdir().expect("tempdir");
    let info = |socket: &Path| {
        let out = Command::new(BIN).arg("info").arg("--socket").arg(socket).output().expect("info");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let missing = info(&t.path().join("none.sock"));
    assert!(missing.contains("no such file") && missing.contains("no daemon"), "{missing}");
    let file = t.path().join("file");
    std::fs::write(&file, b"x").expect("write");
    let not_socket = info(&file);
    assert!(not_socket.contains("is not a socket (a regular file)"), "{not_socket}");
    let stale = t.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind"));
    let refused = info(&stale);
    assert!(refused.contains("connection refused") && refused.contains("daemon is not running"), "{refused}");
    assert!(!refused.contains("transport error"), "{refused}");
}
