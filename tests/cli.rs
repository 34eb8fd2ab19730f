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

#[test]
fn cli_runs_a_pod_and_an_app_without_the_daemon() {
    let reg = common::registry::registry();
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("data");
    let image = format!("docker://{}/busybox:latest", reg.main);
    let id = rktlet(&dir, &["fetch", &image]);
    assert!(id.starts_with("sha512-"), "{id}");

    let uuid_file = t.path().join("uuid");
    let mut sandbox = Command::new(BIN)
        .arg("--dir")
        .arg(&dir)
        .args(["app", "sandbox", "--net=host", "--hostname=clipod"])
        .arg(format!("--uuid-file-save={}", uuid_file.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("app sandbox");
    wait("uuid file", || uuid_file.exists());
    let uuid = std::fs::read_to_string(&uuid_file).expect("uuid");
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
    rktlet(&dir, &["app", "start", &uuid, "--app=0-hello"]);
    wait("app exit", || json(&dir, &["app", "status", &uuid, "--app=0-hello", "--format=json"])["state"] == "exited");
    let status = json(&dir, &["app", "status", &uuid, "--app=0-hello", "--format=json"]);
    assert_eq!(status["exit_code"], 5);
    wait("log line", || std::fs::read_to_string(&log).unwrap_or_default().contains("stdout F hi cli"));
    let apps = json(&dir, &["app", "list", &uuid, "--format=json"]);
    assert_eq!(apps.as_array().map(Vec::len), Some(1));
    rktlet(&dir, &["app", "rm", &uuid, "--app=0-hello"]);
    assert_eq!(json(&dir, &["app", "list", &uuid, "--format=json"]).as_array().map(Vec::len), Some(0));

    // a running app's status shows what it uses: a 1 MB file in its writable layer, CPU, memory
    let script = "head -c 1000000 /dev/zero > /tmp/f; exec sleep 100";
    rktlet(&dir, &["app", "add", &uuid, &id, "--name=user", "--exec=/bin/sh", "--", "-c", script]);
    rktlet(&dir, &["app", "start", &uuid, "--app=0-user"]);
    let usage =
        |d: &std::path::Path| json(d, &["app", "status", &uuid, "--app=0-user", "--format=json"])["usage"].clone();
    wait("usage", || usage(&dir)["writable_layer_bytes"].as_u64().is_some_and(|b| b >= 1_000_000));
    let u = usage(&dir);
    assert!(u["cpu_total_ns"].as_u64().is_some_and(|n| n > 0), "{u}");
    assert!(u["memory_usage_bytes"].as_u64().is_some_and(|n| n > 0), "{u}");
    let table = rktlet(&dir, &["app", "status", &uuid, "--app=0-user"]);
    assert!(table.contains("writable layer: ") && table.contains("cpu: "), "{table}");
    rktlet(&dir, &["app", "stop", &uuid, "--app=0-user"]);
    assert!(json(&dir, &["app", "status", &uuid, "--app=0-user", "--format=json"]).get("usage").is_none());
    rktlet(&dir, &["app", "rm", &uuid, "--app=0-user"]);

    rktlet(&dir, &["stop", &uuid]);
    assert_eq!(json(&dir, &["status", &uuid, "--format=json"])["state"], "exited");
    let _ = sandbox.wait();
    rktlet(&dir, &["rm", &uuid]);
    assert_no_leaks(&dir, &[uuid]);
}

/// A reader that goes away (`rktlet config default | head -1`) ends the
/// command quietly by SIGPIPE, as Unix tools end, instead of a panic.
#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    let (read, write) = nix::unistd::pipe().expect("pipe");
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
