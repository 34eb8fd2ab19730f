//! `serve --exec-mode` (the original rktlet's exec design) against the
//! in-process daemon: both serve the same data directory at once, every call
//! goes to the exec-mode daemon, and both must give the same answers.

mod common;

use common::aci::{Gpg, aci};
use common::{BIN, Daemon, TestNetwork, assert_no_leaks, pod_config};
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::image_service_client::ImageServiceClient;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// An exec-mode daemon on the data dir of another daemon.
struct ExecDaemon {
    child: Child,
    socket: PathBuf,
}

impl ExecDaemon {
    fn start(other: &Daemon, cni_conf_dir: &std::path::Path, extra: &[&str]) -> ExecDaemon {
        let socket = other.dir.path().join("run/exec.sock");
        let log = std::fs::File::create(other.dir.path().join("exec-daemon.log")).expect("log");
        let child = Command::new(BIN)
            .arg("serve")
            .arg("--exec-mode")
            .arg("--socket")
            .arg(&socket)
            .arg("--data-dir")
            .arg(other.dir.path().join("data"))
            .arg("--cni-conf-dir")
            .arg(cni_conf_dir)
            .args(extra)
            .env("RUST_LOG", "rktlet=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn exec-mode daemon");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "exec-mode daemon did not listen");
            std::thread::sleep(Duration::from_millis(10));
        }
        ExecDaemon { child, socket }
    }

    async fn clients(&self) -> (RuntimeServiceClient<Channel>, ImageServiceClient<Channel>) {
        let ch = common::channel(&self.socket).await;
        (RuntimeServiceClient::new(ch.clone()), ImageServiceClient::new(ch))
    }
}

impl Drop for ExecDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pod creation times: the CLI reports seconds, the daemon nanoseconds.
fn same_second(a: i64, b: i64) -> bool {
    a / 1_000_000_000 == b / 1_000_000_000
}

async fn pod_status(rt: &mut RuntimeServiceClient<Channel>, id: &str) -> cri::PodSandboxStatus {
    common::pod_status(rt, id).await
}

async fn container_status(rt: &mut RuntimeServiceClient<Channel>, id: &str) -> cri::ContainerStatus {
    rt.container_status(cri::ContainerStatusRequest { container_id: id.into(), verbose: false })
        .await
        .expect("ContainerStatus")
        .into_inner()
        .status
        .expect("status")
}

async fn containers(rt: &mut RuntimeServiceClient<Channel>) -> Vec<cri::Container> {
    let mut v = rt
        .list_containers(cri::ListContainersRequest::default())
        .await
        .expect("ListContainers")
        .into_inner()
        .containers;
    v.sort_by(|a, b| a.id.cmp(&b.id));
    v
}

async fn images(img: &mut ImageServiceClient<Channel>) -> Vec<cri::Image> {
    let mut v = img.list_images(cri::ListImagesRequest::default()).await.expect("ListImages").into_inner().images;
    v.sort_by(|a, b| a.id.cmp(&b.id));
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_mode_serves_the_same_answers_as_in_process() {
    let scratch = tempfile::tempdir().expect("tmp");
    let net = TestNetwork::new(scratch.path());
    let conf = net.conf_dir.display().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf]);
    let x = ExecDaemon::start(&d, &net.conf_dir, &[]);
    let (mut rt, mut img) = (d.runtime().await, d.images().await);
    let (mut xrt, mut ximg) = x.clients().await;

    // images: fetch by exec, then list and status agree
    let image = format!("{}/busybox:latest", common::registry::registry().main);
    let spec = || Some(cri::ImageSpec { image: image.clone(), ..Default::default() });
    let image_ref = ximg
        .pull_image(cri::PullImageRequest { image: spec(), ..Default::default() })
        .await
        .expect("PullImage (exec)")
        .into_inner()
        .image_ref;
    assert!(rktlet::image::is_content_id(&image_ref), "{image_ref}");
    assert_eq!(images(&mut ximg).await, images(&mut img).await);
    let xs = ximg.image_status(cri::ImageStatusRequest { image: spec(), verbose: false }).await.expect("status");
    let s = img.image_status(cri::ImageStatusRequest { image: spec(), verbose: false }).await.expect("status");
    assert_eq!(xs.into_inner().image.expect("found by exec").id, image_ref);
    assert_eq!(s.into_inner().image.map(|i| i.id), Some(image_ref.clone()));

    // a pod on the pod network, started through the exec-mode daemon
    let logs = tempfile::tempdir().expect("logs");
    let mut config = pod_config("execpod", &[("tier", "bench")]);
    config.log_directory = logs.path().display().to_string();
    let pod = xrt
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() })
        .await
        .expect("RunPodSandbox (exec)")
        .into_inner()
        .pod_sandbox_id;
    let (mut a, b) = (pod_status(&mut xrt, &pod).await, pod_status(&mut rt, &pod).await);
    assert!(same_second(a.created_at, b.created_at), "{} vs {}", a.created_at, b.created_at);
    a.created_at = b.created_at;
    assert_eq!(a, b);
    assert_eq!(a.state, cri::PodSandboxState::SandboxReady as i32);
    assert!(a.network.as_ref().is_some_and(|n| n.ip.starts_with(&net.subnet_prefix)), "{a:?}");
    assert_eq!(a.labels.get("tier").map(String::as_str), Some("bench"));
    let mut xl = xrt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner().items;
    let l = rt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner().items;
    assert_eq!(xl.len(), 1);
    xl[0].created_at = l[0].created_at;
    assert_eq!(xl, l);

    // a container with the CRI fields rktlet passed as flags
    let host_dir = tempfile::tempdir().expect("host dir");
    std::fs::write(host_dir.path().join("hello"), "from the host").expect("write");
    let container = |name: &str, command: &[&str]| cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 1 }),
        image: spec(),
        command: command.iter().map(|s| s.to_string()).collect(),
        envs: vec![cri::KeyValue { key: "GREETING".into(), value: "hi there".into() }],
        labels: [("app".to_string(), name.to_string())].into(),
        annotations: [("note".to_string(), "a=b,c".to_string())].into(),
        log_path: format!("{name}.log"),
        working_dir: "/tmp".into(),
        mounts: vec![cri::Mount {
            container_path: "/data".into(),
            host_path: host_dir.path().display().to_string(),
            readonly: true,
            ..Default::default()
        }],
        ..Default::default()
    };
    let create = |c: cri::ContainerConfig| cri::CreateContainerRequest {
        pod_sandbox_id: pod.clone(),
        config: Some(c),
        sandbox_config: Some(config.clone()),
    };
    let script = "echo $GREETING; pwd; cat /data/hello; exit 3";
    let job = xrt
        .create_container(create(container("job", &["sh", "-c", script])))
        .await
        .expect("CreateContainer (exec)")
        .into_inner()
        .container_id;
    assert_eq!(job, format!("{pod}:1-job"));
    let created = container_status(&mut xrt, &job).await;
    assert_eq!(created, container_status(&mut rt, &job).await);
    assert_eq!(created.state, cri::ContainerState::ContainerCreated as i32);
    assert_eq!(created.metadata, Some(cri::ContainerMetadata { name: "job".into(), attempt: 1 }));
    assert_eq!(created.annotations.get("note").map(String::as_str), Some("a=b,c"));
    assert_eq!(created.mounts.len(), 1);
    assert!(created.mounts[0].readonly);

    xrt.start_container(cri::StartContainerRequest { container_id: job.clone() }).await.expect("start (exec)");
    let deadline = Instant::now() + Duration::from_secs(20);
    let exited = loop {
        let s = container_status(&mut xrt, &job).await;
        if s.state == cri::ContainerState::ContainerExited as i32 {
            break s;
        }
        assert!(Instant::now() < deadline, "job did not exit: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(exited.exit_code, 3);
    assert_eq!(exited, container_status(&mut rt, &job).await);
    let log = std::fs::read_to_string(logs.path().join("job.log")).unwrap_or_default();
    for want in ["hi there", "/tmp", "from the host"] {
        assert!(log.contains(want), "{want:?} not in the log: {log}");
    }

    let sleeper = xrt
        .create_container(create(container("sleeper", &["sleep", "1000"])))
        .await
        .expect("create sleeper")
        .into_inner()
        .container_id;
    xrt.start_container(cri::StartContainerRequest { container_id: sleeper.clone() }).await.expect("start sleeper");
    assert_eq!(containers(&mut xrt).await, containers(&mut rt).await);
    assert_eq!(containers(&mut xrt).await.len(), 2);
    xrt.stop_container(cri::StopContainerRequest { container_id: sleeper.clone(), timeout: 5 }).await.expect("stop");
    let stopped = container_status(&mut xrt, &sleeper).await;
    assert_eq!(stopped.state, cri::ContainerState::ContainerExited as i32);

    // errors keep their codes through the CLI
    let missing = format!("{pod}:0-nothing");
    let e = xrt
        .container_status(cri::ContainerStatusRequest { container_id: missing.clone(), verbose: false })
        .await
        .expect_err("unknown container");
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    let e = xrt
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: "00000000-0000-4000-8000-000000000000".into(),
            verbose: false,
        })
        .await
        .expect_err("unknown pod");
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    xrt.remove_container(cri::RemoveContainerRequest { container_id: missing }).await.expect("idempotent remove");

    for id in [&job, &sleeper] {
        xrt.remove_container(cri::RemoveContainerRequest { container_id: id.clone() }).await.expect("remove");
    }
    assert!(containers(&mut rt).await.is_empty());
    xrt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("stop pod");
    assert_eq!(pod_status(&mut rt, &pod).await.state, cri::PodSandboxState::SandboxNotready as i32);
    xrt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("rm pod");
    assert!(
        rt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner().items.is_empty()
    );
    assert_no_leaks(&d.dir.path().join("data"), std::slice::from_ref(&pod));
    assert!(net.allocated().is_empty(), "addresses left: {:?}", net.allocated());

    ximg.remove_image(cri::RemoveImageRequest { image: spec() }).await.expect("RemoveImage (exec)");
    assert!(images(&mut img).await.is_empty());

    // every call above went through the CLI
    let log = std::fs::read_to_string(d.dir.path().join("exec-daemon.log")).expect("exec daemon log");
    for call in ["fetch", "image cat-manifest", "status", "list", "app add", "app start", "app status", "app stop"] {
        assert!(log.contains(&format!("call=\"{call}")), "no exec of {call:?} in the log:\n{log}");
    }
}

/// PullImage of an `aci:` reference through the exec design: the ACI is
/// fetched with its signature checked against the daemon's trust store (not
/// skipped like docker images' by `--insecure-options=image`), and then found
/// by that reference by both daemons.
#[tokio::test(flavor = "multi_thread")]
async fn exec_mode_pulls_signed_acis_only() {
    let gpg = Gpg::new(&["Signer <signer@example.com>"]);
    let t = tempfile::tempdir().expect("tmp");
    let trust_dir = t.path().join("etc-rkt");
    let key = t.path().join("signer.asc");
    gpg.export("signer@example.com", &key);
    let store = rktlet::trust::TrustStore::new(&trust_dir, t.path().join("usr-lib-rkt"));
    store.add(Some("example.com"), &std::fs::read(&key).expect("key")).expect("trusted");
    let app = t.path().join("app.aci");
    std::fs::write(&app, aci("example.com/exec", "through the CLI\n")).expect("aci");
    std::fs::write(t.path().join("app.aci.asc"), gpg.sign("signer@example.com", &app, true)).expect("sig");
    let unsigned = t.path().join("unsigned.aci");
    std::fs::write(&unsigned, aci("example.com/exec", "unsigned\n")).expect("aci");

    let trust = ["--trust-dir", trust_dir.to_str().expect("path")];
    let d = Daemon::start(&trust);
    let x = ExecDaemon::start(&d, &d.cni_conf_dir, &trust);
    let (_, mut ximg) = x.clients().await;
    let mut img = d.images().await;
    let reference = format!("aci:{}", app.display());
    let spec = |r: &str| Some(cri::ImageSpec { image: r.to_string(), ..Default::default() });
    let image_ref = ximg
        .pull_image(cri::PullImageRequest { image: spec(&reference), ..Default::default() })
        .await
        .expect("PullImage of a signed ACI (exec)")
        .into_inner()
        .image_ref;
    // (an ACI has no docker config: its id is its key)
    assert!(image_ref.starts_with("sha512-"), "{image_ref}");
    for (daemon, client) in [("exec", &mut ximg), ("in-process", &mut img)] {
        let found = client
            .image_status(cri::ImageStatusRequest { image: spec(&reference), verbose: false })
            .await
            .expect("ImageStatus")
            .into_inner()
            .image
            .unwrap_or_else(|| panic!("{daemon}: not found by the reference it was pulled as"));
        assert_eq!(found.id, image_ref, "{daemon}");
        assert!(found.repo_tags.contains(&reference), "{daemon}: {:?}", found.repo_tags);
    }

    common::aci::assert_unsigned_aci_refused(&mut ximg, &unsigned).await;
    assert_eq!(images(&mut img).await.len(), 1, "the unsigned ACI was stored");
}

/// `rktlet bench` against both designs on one data dir: every critest-style
/// operation is measured on both endpoints, the three renderings are written,
/// and nothing the run made is left behind.
#[tokio::test(flavor = "multi_thread")]
async fn bench_harness_measures_both_designs_and_cleans_up() {
    let scratch = tempfile::tempdir().expect("tmp");
    let net = TestNetwork::new(scratch.path());
    let conf = net.conf_dir.display().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf]);
    let x = ExecDaemon::start(&d, &net.conf_dir, &[]);
    // a third daemon with a pod pool, measured on pod starts only
    let mut pool = Daemon::start(&["--cni-conf-dir", &conf, "--pod-pool-size", "1"]);
    let registry = &common::registry::registry().main;
    let out = scratch.path().join("out");
    let run = Command::new(BIN)
        .arg("bench")
        .arg(format!("--endpoint=in-process={}", d.socket.display()))
        .arg(format!("--endpoint=exec-mode=unix://{}", x.socket.display()))
        .arg(format!("--endpoint=pool={}", pool.socket.display()))
        .args(["--pods-only", "pool", "--rounds", "2", "--list-pods", "2", "--warmup", "1"])
        .arg(format!("--image={registry}/busybox:latest"))
        .arg(format!("--pull-image={registry}/cfg:latest"))
        .arg("--log-dir")
        .arg(scratch.path().join("logs"))
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run rktlet bench");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "bench failed: {stdout}\n{}", String::from_utf8_lossy(&run.stderr));

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("bench.json")).expect("bench.json")).expect("json");
    for op in [
        "Version (gRPC floor)",
        "PullImage",
        "ImageStatus",
        "ListImages",
        "RemoveImage",
        "RunPodSandbox",
        "PodSandboxStatus",
        "StopPodSandbox",
        "RemovePodSandbox",
        "CreateContainer",
        "StartContainer",
        "ContainerStatus",
        "StopContainer",
        "RemoveContainer",
        "ExecSync",
        "ListPodSandbox (2 pods)",
        "ListContainers (2 pods)",
        "ListPodSandboxStats (2 pods)",
        "ListContainerStats (2 containers)",
    ] {
        for endpoint in ["in-process", "exec-mode"] {
            let p50 = &json["results"][op][endpoint]["p50"];
            assert!(p50.as_f64().is_some_and(|v| v > 0.0), "no {op} figure for {endpoint}: {json}");
        }
        assert!(stdout.contains(&format!("| {op} |")), "no {op} row in the table:\n{stdout}");
    }
    for endpoint in ["in-process", "exec-mode"] {
        let mem = &json["memory"][endpoint];
        for pods in ["0", "2"] {
            assert!(mem["daemon_rss_mib"][pods].as_f64().is_some_and(|v| v > 1.0), "{endpoint} RSS at {pods}: {mem}");
        }
        // each pod is at least its nspawn and its systemd
        assert!(mem["pod_processes"].as_f64().is_some_and(|v| v >= 2.0), "{endpoint}: {mem}");
    }
    assert!(stdout.contains("exec-mode / in-process (p50)"), "{stdout}");
    // the warm-up ran untimed: the pool endpoint's pod starts are its 2 rounds only
    assert!(json["context"]["warm-up"].as_str().is_some_and(|w| w.starts_with("1 untimed")), "{json}");
    // the pool endpoint: pod starts only, each one a take (the bench spaces them), and what the pool costs
    assert_eq!(json["results"]["RunPodSandbox"]["pool"]["n"].as_u64(), Some(2), "{json}");
    assert!(json["results"]["CreateContainer"]["pool"].is_null(), "pods only: {json}");
    let note = json["context"]["pool note"].as_str().unwrap_or_default();
    // the warm-up's pod was a take too (its start untimed)
    assert!(note.starts_with("pod pool of 1: 3 takes, 0 misses"), "{note}");
    assert!(note.contains("MiB private"), "{note}");
    assert_eq!(std::fs::read_to_string(out.join("bench.md")).expect("bench.md"), stdout);
    let svg = std::fs::read_to_string(out.join("bench.svg")).expect("bench.svg");
    assert!(svg.starts_with("<svg") && svg.contains("ListContainers (2 pods)"), "{svg}");

    // the pods and the pulled image are gone; the containers' image stays
    let (mut rt, mut img) = (d.runtime().await, d.images().await);
    assert!(
        rt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner().items.is_empty()
    );
    let left: Vec<String> = images(&mut img).await.into_iter().flat_map(|i| i.repo_tags).collect();
    assert_eq!(left, vec![format!("{registry}/busybox:latest")]);
    assert_no_leaks(&d.dir.path().join("data"), &[]);
    let run_dir = d.dir.path().join("data/pods/run");
    assert_eq!(std::fs::read_dir(&run_dir).map(|d| d.count()).unwrap_or(0), 0, "pods left in {}", run_dir.display());
    // the pool daemon's idle pod holds an address (wired ahead) until it drains on SIGTERM
    assert!(pool.signal_and_wait(nix::sys::signal::Signal::SIGTERM).success(), "{}", pool.log());
    assert!(net.allocated().is_empty(), "addresses left: {:?}", net.allocated());
    // the pods' cgroup parents (as kubelet would give) are removed too
    let left: Vec<_> = std::fs::read_dir("/sys/fs/cgroup")
        .expect("cgroup mounts")
        .flatten()
        .map(|h| h.path().join("rktlet-bench"))
        .filter(|p| p.exists())
        .collect();
    assert!(left.is_empty(), "cgroup parents left: {left:?}");
}
