//! The crictl walk-through of docs/crictl.md, one step per crictl command,
//! through the CRI API of a real daemon: the same pod and container files
//! (docs/crictl/*.json; the image comes from the test registry instead of
//! docker.io, the log directory is a temporary one).

mod common;

use common::{Daemon, TestNetwork, assert_no_leaks};
use rktlet::proto::v1 as cri;
use std::time::{Duration, Instant};

fn doc(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/crictl").join(name);
    std::fs::read_to_string(&path).expect("doc file")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_crictl_walkthrough_works_step_by_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni"]);
    let (mut rt, mut img) = (d.runtime().await, d.images().await);
    let (pod_doc, ctr_doc) = (doc("pod.json"), doc("container.json"));
    assert_eq!((pod_doc.as_str(), ctr_doc.as_str()), (rktlet::demo::POD_JSON, rktlet::demo::CONTAINER_JSON));
    let mut ctr_cfg = rktlet::demo::container_config(&ctr_doc).expect("container.json");
    assert_eq!(ctr_cfg.image.as_ref().map(|i| i.image.as_str()), Some("docker.io/library/busybox:latest"));
    let image = format!("{}/busybox:latest", common::registry::registry().main);
    let log_dir = dir.path().join("logs").to_string_lossy().into_owned();

    // crictl info
    let st = rt.status(cri::StatusRequest { verbose: true }).await.expect("Status").into_inner();
    let conditions = st.status.expect("status").conditions;
    assert!(conditions.iter().all(|c| c.status), "{conditions:?}");

    // crictl pull
    img.pull_image(cri::PullImageRequest {
        image: Some(cri::ImageSpec { image: image.clone(), ..Default::default() }),
        ..Default::default()
    })
    .await
    .expect("crictl pull");

    // crictl runp pod.json
    let mut pod_cfg = rktlet::demo::pod_config(&pod_doc).expect("pod.json");
    assert_eq!(pod_cfg.log_directory, "/tmp/rktlet-demo");
    pod_cfg.log_directory = log_dir.clone();
    let pod = common::run_pod(&mut rt, &pod_cfg).await;

    // crictl inspectp POD
    let inspect = rt
        .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: pod.clone(), verbose: true })
        .await
        .expect("crictl inspectp")
        .into_inner();
    assert_eq!(inspect.status.as_ref().map(|s| s.state), Some(cri::PodSandboxState::SandboxReady as i32));
    assert!(inspect.info.get("info").is_some_and(|i| i.contains("sandbox.log")), "{:?}", inspect.info);

    // crictl create POD container.json pod.json; crictl start
    ctr_cfg.image = Some(cri::ImageSpec { image: image.clone(), ..Default::default() });
    let log_name = ctr_cfg.log_path.clone();
    let ctr = common::create_container(&mut rt, &pod, &pod_cfg, ctr_cfg).await;
    rt.start_container(cri::StartContainerRequest { container_id: ctr.clone() }).await.expect("crictl start");

    // crictl exec -s CTR echo hi (ExecSync)
    let out = rt
        .exec_sync(cri::ExecSyncRequest {
            container_id: ctr.clone(),
            cmd: vec!["echo".into(), "hi".into()],
            timeout: 10,
        })
        .await
        .expect("crictl exec")
        .into_inner();
    assert_eq!((out.exit_code, String::from_utf8_lossy(&out.stdout).as_ref()), (0, "hi\n"));

    // crictl ps shows 13 characters of the id; they name the pod's only container
    let short = rt
        .container_status(cri::ContainerStatusRequest { container_id: ctr[..13].to_string(), verbose: false })
        .await
        .expect("status by the id crictl ps shows")
        .into_inner()
        .status
        .expect("status");
    assert_eq!(short.id, ctr);

    // crictl logs CTR: the CRI log file in the pod's log directory
    let log_file = std::path::Path::new(&log_dir).join(log_name);
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = std::fs::read_to_string(&log_file).unwrap_or_default();
        if log.contains("hello") || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(log.lines().any(|l| l.ends_with(" stdout F hello")), "{log}");

    // crictl stats
    let stats = rt
        .list_container_stats(cri::ListContainerStatsRequest::default())
        .await
        .expect("crictl stats")
        .into_inner()
        .stats;
    assert_eq!(stats.len(), 1);
    assert!(stats[0].memory.as_ref().and_then(|m| m.working_set_bytes.as_ref()).is_some_and(|w| w.value > 0));

    // crictl stop CTR; crictl stopp POD; crictl rmp POD
    rt.stop_container(cri::StopContainerRequest { container_id: ctr.clone(), timeout: 10 }).await.expect("crictl stop");
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("crictl stopp");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await.expect("crictl rmp");
    assert_no_leaks(&d.dir.path().join("data"), &[pod]);
}

/// `rktlet demo` (what README's quick start runs) does the same and cleans up.
#[tokio::test(flavor = "multi_thread")]
async fn rktlet_demo_runs_the_walkthrough() {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni"]);
    let image = format!("{}/busybox:latest", common::registry::registry().main);
    let out = std::process::Command::new(common::BIN)
        .arg("demo")
        .arg("--socket")
        .arg(&d.socket)
        .arg("--image")
        .arg(&image)
        .arg("--log-dir")
        .arg(dir.path().join("logs"))
        .output()
        .expect("rktlet demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    let after = |cmd: &str| lines.iter().position(|l| l.starts_with(cmd)).and_then(|i| lines.get(i + 1)).copied();
    assert_eq!(after("$ crictl exec"), Some("demo"), "{stdout}");
    assert_eq!(after("$ crictl logs"), Some("hello"), "{stdout}");
    assert!(stdout.contains("Removed sandbox"), "{stdout}");
    let mut rt = d.runtime().await;
    assert!(
        rt.list_pod_sandbox(cri::ListPodSandboxRequest::default()).await.expect("list").into_inner().items.is_empty()
    );
    assert_no_leaks(&d.dir.path().join("data"), &[]);
}
