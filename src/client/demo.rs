//! `rktlet demo`: the crictl walk-through of docs/crictl.md run through a
//! daemon's CRI socket by rktlet itself (crictl is not packaged everywhere):
//! pull, run a pod, create and start a container, exec into it, read its
//! log and stats, stop and remove. The pod and container come from the
//! guide's own files (docs/crictl/*.json), so the guide, this demo and the
//! test that checks both (tests/walkthrough.rs) cannot drift apart.

use crate::proto::v1 as cri;
use serde_json::Value;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// The guide's pod file.
pub const POD_JSON: &str = include_str!("../../docs/crictl/pod.json");
/// The guide's container file.
pub const CONTAINER_JSON: &str = include_str!("../../docs/crictl/container.json");

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn map(v: &Value) -> HashMap<String, String> {
    v.as_object().map(|o| o.iter().map(|(k, v)| (k.clone(), text(v))).collect()).unwrap_or_default()
}

/// A crictl pod file (snake_case PodSandboxConfig fields: metadata,
/// hostname, log_directory, labels, annotations) as a CRI config.
pub(crate) fn pod_config(json: &str) -> Result<cri::PodSandboxConfig, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("pod file: {e}"))?;
    let m = &v["metadata"];
    Ok(cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: text(&m["name"]),
            namespace: text(&m["namespace"]),
            uid: text(&m["uid"]),
            attempt: m["attempt"].as_u64().and_then(|a| u32::try_from(a).ok()).unwrap_or(0),
        }),
        hostname: text(&v["hostname"]),
        log_directory: text(&v["log_directory"]),
        labels: map(&v["labels"]),
        annotations: map(&v["annotations"]),
        linux: Some(cri::LinuxPodSandboxConfig::default()),
        ..Default::default()
    })
}

/// A crictl container file (metadata, image, command, args, log_path,
/// labels) as a CRI config.
pub(crate) fn container_config(json: &str) -> Result<cri::ContainerConfig, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("container file: {e}"))?;
    let list = |v: &Value| v.as_array().map(|a| a.iter().map(text).collect()).unwrap_or_default();
    Ok(cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: text(&v["metadata"]["name"]), attempt: 0 }),
        image: Some(cri::ImageSpec { image: text(&v["image"]["image"]), ..Default::default() }),
        command: list(&v["command"]),
        args: list(&v["args"]),
        log_path: text(&v["log_path"]),
        labels: map(&v["labels"]),
        ..Default::default()
    })
}

/// Runs the walk-through against `socket` with `image` (instead of the
/// guide's docker.io one) and the pod logs in `log_dir`, printing each step
/// as the crictl command it stands for. Removes the pod at the end, also
/// after a failed step.
pub(crate) async fn run(socket: &Path, image: &str, log_dir: &Path, out: &mut impl Write) -> Result<(), String> {
    let call = |what: &'static str| move |e: tonic::Status| format!("{what}: {}", e.message());
    let mut rt =
        crate::client::runtime(socket).await.map_err(|e| format!("connecting to {}: {e}", socket.display()))?;
    let mut img = crate::client::images(socket).await.map_err(|e| e.to_string())?;
    let mut pod_cfg = pod_config(POD_JSON)?;
    pod_cfg.log_directory = log_dir.display().to_string();
    let mut ctr_cfg = container_config(CONTAINER_JSON)?;
    ctr_cfg.image = Some(cri::ImageSpec { image: image.to_string(), ..Default::default() });
    let mut say = |line: String| {
        let _ = writeln!(out, "{line}");
    };

    say(format!("$ crictl pull {image}"));
    let spec = cri::ImageSpec { image: image.to_string(), ..Default::default() };
    let pulled = img
        .pull_image(cri::PullImageRequest { image: Some(spec), ..Default::default() })
        .await
        .map_err(call("PullImage"))?
        .into_inner();
    say(format!("Image is up to date for {}", pulled.image_ref));

    say("$ crictl runp docs/crictl/pod.json".into());
    let started = Instant::now();
    let pod = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(pod_cfg.clone()), runtime_handler: String::new() })
        .await
        .map_err(call("RunPodSandbox"))?
        .into_inner()
        .pod_sandbox_id;
    say(format!("{pod}    (ready in {:.1} ms)", started.elapsed().as_secs_f64() * 1e3));
    let result = in_pod(&mut rt, &pod, &pod_cfg, ctr_cfg, log_dir, &mut say).await;

    say(format!("$ crictl stopp {pod} && crictl rmp {pod}"));
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: pod.clone() })
        .await
        .map_err(call("StopPodSandbox"))?;
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() })
        .await
        .map_err(call("RemovePodSandbox"))?;
    say(format!("Removed sandbox {pod}"));
    result
}

/// The container steps inside a running pod.
async fn in_pod(
    rt: &mut crate::proto::v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    pod: &str,
    pod_cfg: &cri::PodSandboxConfig,
    ctr_cfg: cri::ContainerConfig,
    log_dir: &Path,
    say: &mut impl FnMut(String),
) -> Result<(), String> {
    let call = |what: &'static str| move |e: tonic::Status| format!("{what}: {}", e.message());
    let log_file = log_dir.join(&ctr_cfg.log_path);
    say(format!("$ crictl create {pod} docs/crictl/container.json docs/crictl/pod.json"));
    let ctr = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.to_string(),
            config: Some(ctr_cfg),
            sandbox_config: Some(pod_cfg.clone()),
        })
        .await
        .map_err(call("CreateContainer"))?
        .into_inner()
        .container_id;
    say(ctr.clone());
    say(format!("$ crictl start {ctr}"));
    rt.start_container(cri::StartContainerRequest { container_id: ctr.clone() })
        .await
        .map_err(call("StartContainer"))?;
    say(ctr.clone());

    say(format!("$ crictl exec -s {ctr} sh -c 'hostname; id'"));
    let cmd = ["sh", "-c", "hostname; id"].map(String::from).to_vec();
    let exec = rt
        .exec_sync(cri::ExecSyncRequest { container_id: ctr.clone(), cmd, timeout: 10 })
        .await
        .map_err(call("ExecSync"))?
        .into_inner();
    say(String::from_utf8_lossy(&exec.stdout).trim_end().to_string());

    say(format!("$ crictl logs {ctr}    ({})", log_file.display()));
    let deadline = Instant::now() + Duration::from_secs(5);
    let log = loop {
        let log = std::fs::read_to_string(&log_file).unwrap_or_default();
        if !log.is_empty() || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for line in log.lines() {
        // CRI format: time stream tag message
        say(line.splitn(4, ' ').nth(3).unwrap_or(line).to_string());
    }

    say(format!("$ crictl stats {ctr}"));
    let stats = rt
        .container_stats(cri::ContainerStatsRequest { container_id: ctr.clone() })
        .await
        .map_err(call("ContainerStats"))?
        .into_inner()
        .stats
        .unwrap_or_default();
    let mem = stats.memory.and_then(|m| m.working_set_bytes).map(|v| v.value).unwrap_or(0);
    let disk = stats.writable_layer.and_then(|w| w.used_bytes).map(|v| v.value).unwrap_or(0);
    say(format!("memory working set {:.1} MiB, writable layer {disk} bytes", mem as f64 / 1048576.0));

    say(format!("$ crictl stop -t 10 {ctr}"));
    rt.stop_container(cri::StopContainerRequest { container_id: ctr.clone(), timeout: 10 })
        .await
        .map_err(call("StopContainer"))?;
    say(ctr);
    Ok(())
}
