//! The real binary serving CRI on a real unix socket.

mod common;

use common::{BIN, Daemon, wait_timeout};
use nix::sys::signal::Signal;
use rktlet::proto::v1 as cri;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

fn condition(status: &cri::StatusResponse, kind: &str) -> cri::RuntimeCondition {
    status
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.r#type == kind))
        .cloned()
        .unwrap_or_else(|| panic!("no {kind} condition in {status:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn version_status_and_runtime_config_over_the_socket() {
    let d = Daemon::start(&["--cni-bin-dir", "/usr/lib/cni"]);
    let mode = std::fs::metadata(&d.socket).expect("socket").permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    let mut rt = d.runtime().await;

    let v = rt.version(cri::VersionRequest { version: "v1".into() }).await.expect("Version").into_inner();
    assert_eq!(v.runtime_name, "rktlet");
    assert_eq!(v.runtime_api_version, "v1");
    assert_eq!(v.runtime_version, env!("CARGO_PKG_VERSION"));

    // no CNI config yet: runtime ready (systemd-nspawn is installed), network not
    let s = rt.status(cri::StatusRequest { verbose: false }).await.expect("Status").into_inner();
    assert!(condition(&s, "RuntimeReady").status, "{s:?}");
    let net = condition(&s, "NetworkReady");
    assert!(!net.status);
    assert_eq!(net.reason, "NetworkPluginNotReady");
    assert!(net.message.contains("no network config found"), "{}", net.message);
    assert!(s.info.is_empty(), "info only when verbose");
    // the default runtime handler, announcing only what works
    let handlers: Vec<(String, Option<cri::RuntimeHandlerFeatures>)> =
        s.runtime_handlers.iter().map(|h| (h.name.clone(), h.features)).collect();
    // recursive read-only mounts where the kernel has mount_setattr (5.12)
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let mut numbers = release.trim().split(['.', '-']).map(|n| n.parse::<u32>().unwrap_or(0));
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    // user namespaces where overlayfs takes id-mapped layers (5.19)
    let features = cri::RuntimeHandlerFeatures {
        recursive_read_only_mounts: version >= (5, 12),
        user_namespaces: version >= (5, 19),
    };
    assert_eq!(handlers, vec![(String::new(), Some(features))], "kernel {release}");
    assert_eq!(s.features.map(|f| f.supplemental_groups_policy), Some(true));
    // a pod in a user namespace has a network namespace of its own
    assert_eq!(s.features.map(|f| f.user_namespaces_host_network), Some(false));

    let conf_dir = d.dir.path().join("net.d");
    std::fs::create_dir_all(&conf_dir).expect("net.d");
    std::fs::write(
        conf_dir.join("10-pods.conflist"),
        br#"{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge","bridge":"rkt0"},{"type":"portmap"}]}"#,
    )
    .expect("conflist");
    let s = rt.status(cri::StatusRequest { verbose: true }).await.expect("Status").into_inner();
    assert!(condition(&s, "NetworkReady").status, "{s:?}");
    let info: serde_json::Value = serde_json::from_str(&s.info["config"]).expect("verbose info is JSON");
    assert_eq!(info["socket"], d.socket.display().to_string());

    let c = rt.runtime_config(cri::RuntimeConfigRequest {}).await.expect("RuntimeConfig").into_inner();
    let expected = if rktlet::stage1::host::pid1_is_systemd(std::path::Path::new("/")) {
        cri::CgroupDriver::Systemd
    } else {
        cri::CgroupDriver::Cgroupfs
    };
    assert_eq!(c.linux.expect("linux").cgroup_driver, expected as i32);

    rt.update_runtime_config(cri::UpdateRuntimeConfigRequest {
        runtime_config: Some(cri::RuntimeConfig {
            network_config: Some(cri::NetworkConfig { pod_cidr: "10.88.0.0/16".into() }),
        }),
    })
    .await
    .expect("UpdateRuntimeConfig");
    let s = rt.status(cri::StatusRequest { verbose: true }).await.expect("Status").into_inner();
    assert!(s.info["config"].contains("10.88.0.0/16"));
}

#[tokio::test(flavor = "multi_thread")]
async fn rpcs_built_last_refuse_requests_without_their_ids() {
    let d = Daemon::start(&[]);
    let mut rt = d.runtime().await;
    // built now: a request without a container id is refused as such (tests/checkpoint.rs has the rest)
    let err = rt.checkpoint_container(cri::CheckpointContainerRequest::default()).await.expect_err("no id");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    // built now: a request without a pod is refused as such (tests/resize.rs has the rest)
    let err =
        rt.update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest::default()).await.expect_err("no pod id");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    // the streaming List forms are built: an empty store is one empty chunk
    use tokio_stream::StreamExt;
    let mut img = d.images().await;
    let chunks: Vec<_> = img
        .stream_images(cri::StreamImagesRequest::default())
        .await
        .expect("StreamImages")
        .into_inner()
        .collect()
        .await;
    assert_eq!(chunks.len(), 1);
    assert!(chunks[0].as_ref().expect("chunk").images.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn second_server_is_refused_and_sigterm_removes_the_socket() {
    let mut d = Daemon::start(&[]);
    let second_dir = tempfile::tempdir().expect("tempdir");
    let mut second = Daemon::spawn(&d.socket, second_dir.path(), &[]);
    let status = wait_timeout(&mut second, Duration::from_secs(20)).expect("second server must exit");
    assert!(!status.success());
    let err = std::fs::read_to_string(second_dir.path().join("daemon.log")).expect("log");
    assert!(err.contains("already serving"), "{err}");
    // naming who holds the socket's lock: the first daemon
    assert!(err.contains(&format!("is locked by pid {} (rktlet)", d.child.id())), "{err}");
    assert!(!second_dir.path().join("data").exists(), "refused before its data dir was made");

    // another socket on the first one's data dir: refused, naming the holder
    let third_dir = tempfile::tempdir().expect("tempdir");
    let mut third = Command::new(BIN)
        .arg("serve")
        .arg("--socket")
        .arg(third_dir.path().join("third.sock"))
        .arg("--data-dir")
        .arg(d.dir.path().join("data"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("third serve");
    let status = wait_timeout(&mut third, Duration::from_secs(20)).expect("third server must exit");
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut third.stderr.take().expect("stderr"), &mut err).expect("stderr");
    let first_pid = d.child.id().to_string();
    assert!(err.contains("uses the data dir") && err.contains(&first_pid), "{err}");
    assert!(!third_dir.path().join("third.sock").exists(), "its socket is removed again");

    // the first server is untouched
    let mut rt = d.runtime().await;
    rt.version(cri::VersionRequest::default()).await.expect("first server still answers");

    let status = d.signal_and_wait(Signal::SIGTERM);
    assert!(status.success(), "clean exit on SIGTERM: {status}");
    assert!(!d.socket.exists(), "socket removed on shutdown");
}

#[tokio::test(flavor = "multi_thread")]
async fn stale_socket_is_replaced_and_other_files_are_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("rktlet.sock");
    // a socket file nobody listens on, as left by a crashed daemon
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    assert!(std::fs::symlink_metadata(&socket).expect("stat").file_type().is_socket());
    let cni_conf_dir = Daemon::cni_conf_dir(dir.path(), &[]);
    let mut d = Daemon { child: Daemon::spawn(&socket, dir.path(), &[]), socket: socket.clone(), dir, cni_conf_dir };
    d.wait_ready();
    let mut rt = d.runtime().await;
    rt.version(cri::VersionRequest::default()).await.expect("serves on the reclaimed socket");
    let status = d.signal_and_wait(Signal::SIGINT);
    assert!(status.success(), "clean exit on SIGINT: {status}");

    let file = d.dir.path().join("not-a-socket");
    std::fs::write(&file, b"precious").expect("write");
    let out = Command::new(BIN)
        .arg("serve")
        .arg("--socket")
        .arg(&file)
        .arg("--data-dir")
        .arg(d.dir.path().join("data"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a socket"));
    assert_eq!(std::fs::read(&file).expect("still there"), b"precious");
}

#[test]
fn bad_config_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, "socket = 5\n").expect("write");
    let out = Command::new(BIN).arg("serve").arg("--config").arg(&cfg).output().expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid config file"), "{err}");
}

/// Each key of the config file counts unless the flag is given (the global
/// `--cni-conf-dir`'s default used to override the file's `cni_conf_dir`).
#[test]
fn config_file_keys_count_and_flags_override_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (sock, data, net) = (dir.path().join("r.sock"), dir.path().join("data"), dir.path().join("from-file"));
    std::fs::create_dir_all(&net).expect("net.d");
    let cfg = dir.path().join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "socket = {:?}\ndata_dir = {:?}\ncni_conf_dir = {:?}\ncni_bin_dirs = [\"/usr/lib/cni\"]\npod_pool_size = 0\n",
            sock, data, net
        ),
    )
    .expect("write");
    let info_of = |extra: &[&str]| -> serde_json::Value {
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--config")
            .arg(&cfg)
            .args(extra)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("serve");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let out = loop {
            let out = Command::new(BIN).arg("info").arg("--socket").arg(&sock).output().expect("info");
            if out.status.success() || std::time::Instant::now() > deadline {
                break out;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let _ = child.wait();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("info json");
        assert!(info["config"].is_object(), "no config in {info}");
        info["config"].clone()
    };
    let from_file = info_of(&[]);
    assert_eq!(from_file["cniConfDir"], net.display().to_string(), "{from_file}");
    assert_eq!(from_file["dataDir"], data.display().to_string());
    assert_eq!(from_file["podPoolSize"], 0);
    let flag = dir.path().join("from-flag");
    let from_flag = info_of(&["--cni-conf-dir", flag.to_str().expect("utf8")]);
    assert_eq!(from_flag["cniConfDir"], flag.display().to_string(), "{from_flag}");
}

/// A CNI config directory that does not exist: the daemon starts (as
/// containerd does: a CNI daemonset may write it later), says so at start
/// naming the flag or config key, and Status says why the network is not ready.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_cni_conf_dir_is_said_at_start_and_in_status() {
    let d = Daemon::start(&["--cni-conf-dir", "/nonexistent/rktlet-net.d"]);
    let mut rt = d.runtime().await;
    let status = rt.status(cri::StatusRequest { verbose: false }).await.expect("Status").into_inner();
    let conditions = status.status.expect("status").conditions;
    let net = conditions.iter().find(|c| c.r#type == "NetworkReady").expect("NetworkReady");
    assert!(!net.status, "{net:?}");
    assert!(net.message.contains("/nonexistent/rktlet-net.d: the directory does not exist"), "{net:?}");
    let log = d.log();
    let line = log.lines().find(|l| l.contains("the CNI config directory")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("/nonexistent/rktlet-net.d (set by --cni-conf-dir) does not exist"), "{line}");

    // set by the config file: the warning names the file and the key
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, "cni_conf_dir = \"/nonexistent/from-file\"\npod_pool_size = 0\n").expect("write");
    let socket = dir.path().join("r.sock");
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .arg("--socket")
        .arg(&socket)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("serve");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(std::time::Instant::now() < deadline, "serve did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("kill");
    let out = wait_timeout(&mut child, Duration::from_secs(20)).expect("exit");
    assert!(out.success(), "{out}");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err).expect("stderr");
    let expected = format!("/nonexistent/from-file (set by cni_conf_dir in {}) does not exist", cfg.display());
    assert!(err.contains(&expected), "{err}");

    // a pool size refused from the file names the file and the key
    std::fs::write(&cfg, "pod_pool_size = 1000\n").expect("write");
    let out = Command::new(BIN).arg("serve").arg("--config").arg(&cfg).output().expect("serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("pod pool size 1000 (pod_pool_size in {})", cfg.display())), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line() {
    let mut d = Daemon::start(&["--log-format", "json"]);
    let mut rt = d.runtime().await;
    rt.version(cri::VersionRequest::default()).await.expect("Version");
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    let log = d.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "nothing logged");
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }
    assert!(lines.iter().any(|l| l.contains("rktlet serving CRI")), "{log}");
}
