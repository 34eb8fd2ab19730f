//! The crictl walk-through of docs/crictl.md, one step per crictl command,
//! through the CRI API of a real daemon: the same pod and container files
//! (docs/crictl/*.json; the image comes from the test registry instead of
//! docker.io, the log directory is a temporary one).

mod common;

use common::{Daemon, TestNetwork, assert_no_leaks};
use rktlet::proto::v1 as cri;
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

fn doc_json(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/crictl").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).expect("doc file")).expect("doc json")
}

fn map(v: &Value) -> HashMap<String, String> {
    v.as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
        .unwrap_or_default()
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// pod.json as crictl reads it (snake_case fields of PodSandboxConfig).
fn pod_config(v: &Value, log_dir: &str) -> cri::PodSandboxConfig {
    let m = &v["metadata"];
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: text(&m["name"]),
            namespace: text(&m["namespace"]),
            uid: text(&m["uid"]),
            attempt: m["attempt"].as_u64().unwrap_or(0) as u32,
        }),
        hostname: text(&v["hostname"]),
        log_directory: log_dir.to_string(),
        labels: map(&v["labels"]),
        linux: Some(cri::LinuxPodSandboxConfig::default()),
        ..Default::default()
    }
}

/// container.json as crictl reads it.
fn container_config(v: &Value, image: &str) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: text(&v["metadata"]["name"]), attempt: 0 }),
        image: Some(cri::ImageSpec { image: image.to_string(), ..Default::default() }),
        command: v["command"].as_array().map(|a| a.iter().map(text).collect()).unwrap_or_default(),
        log_path: text(&v["log_path"]),
        labels: map(&v["labels"]),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_crictl_walkthrough_works_step_by_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = TestNetwork::new(dir.path());
    let conf = net.conf_dir.to_string_lossy().to_string();
    let d = Daemon::start(&["--cni-conf-dir", &conf, "--cni-bin-dir", "/usr/lib/cni"]);
    let (mut rt, mut img) = (d.runtime().await, d.images().await);
    let pod_doc = doc_json("pod.json");
    let ctr_doc = doc_json("container.json");
    assert_eq!(text(&ctr_doc["image"]["image"]), "docker.io/library/busybox:latest");
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
    let pod_cfg = pod_config(&pod_doc, &log_dir);
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
    let ctr = common::create_container(&mut rt, &pod, &pod_cfg, container_config(&ctr_doc, &image)).await;
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

    // crictl logs CTR: the CRI log file in the pod's log directory
    let log_file = std::path::Path::new(&log_dir).join(text(&ctr_doc["log_path"]));
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
