//! Pod sandboxes the exec way: `status`, `list`, `stop`, `rm` per call.

use super::super::pod_meta;
use super::{ExecMode, ok_if_missing};
use crate::proto::v1 as cri;
use rkt::api_v1::PodInfo;
use rkt::schema::PodManifest;
use tonic::Status;

/// The manifest fields CRI metadata is kept in, as the CLI reported them.
fn manifest_of(info: &PodInfo) -> PodManifest {
    let mut m = PodManifest::mutable();
    m.user_annotations = info.user_annotations.clone();
    m.user_labels = info.user_labels.clone();
    for (k, v) in &info.annotations {
        m.set_annotation(k, v.clone());
    }
    m
}

fn cri_state(info: &PodInfo) -> cri::PodSandboxState {
    if info.ready { cri::PodSandboxState::SandboxReady } else { cri::PodSandboxState::SandboxNotready }
}

fn created_ns(info: &PodInfo) -> i64 {
    info.created_at.and_then(|s| i64::try_from(s).ok()).map_or(0, |s| s.saturating_mul(1_000_000_000))
}

fn sandbox_status(info: &PodInfo) -> cri::PodSandboxStatus {
    let m = manifest_of(info);
    let ns = pod_meta::namespace_options(&m);
    let ips = info.ips();
    let network = (ns.network != cri::NamespaceMode::Node as i32).then(|| cri::PodSandboxNetworkStatus {
        ip: ips.first().cloned().unwrap_or_default(),
        additional_ips: ips.iter().skip(1).map(|ip| cri::PodIp { ip: ip.clone() }).collect(),
    });
    cri::PodSandboxStatus {
        id: info.name.clone(),
        metadata: Some(pod_meta::metadata(&m)),
        state: cri_state(info) as i32,
        created_at: created_ns(info),
        network,
        linux: Some(cri::LinuxPodSandboxStatus { namespaces: Some(cri::Namespace { options: Some(ns) }) }),
        labels: pod_meta::labels(&m),
        annotations: pod_meta::annotations(&m),
        runtime_handler: String::new(),
    }
}

/// Pods kubelet sees: made through CRI, running or exited.
fn listed(info: &PodInfo) -> bool {
    info.user_annotations.contains_key(rkt::schema::USER_ANNOTATION_POD_UID)
        && matches!(info.state.as_str(), "running" | "exited" | "exited garbage" | "exited deleting")
}

/// `rktlet status UUID --format=json`.
async fn status(x: &ExecMode, id: &str) -> Result<PodInfo, Status> {
    x.json(&["status", id, "--format=json"]).await
}

/// `rktlet list --format=json`.
pub(super) async fn list(x: &ExecMode) -> Result<Vec<PodInfo>, Status> {
    // rkt's `null` for no pod
    let pods = x.json::<Option<Vec<PodInfo>>, _>(&["list", "--format=json"]).await?;
    Ok(pods.unwrap_or_default().into_iter().filter(listed).collect())
}

pub(crate) async fn run_pod_sandbox(
    x: &ExecMode,
    req: cri::RunPodSandboxRequest,
) -> Result<cri::RunPodSandboxResponse, Status> {
    let resp = super::super::sandbox_run::run_pod_sandbox(x.runtime(), req).await?;
    let info = status(x, &resp.pod_sandbox_id).await?;
    if !info.ready {
        return Err(Status::internal(format!("pod {} is {}, not ready", info.name, info.state)));
    }
    Ok(resp)
}

pub(crate) async fn stop_pod_sandbox(
    x: &ExecMode,
    req: cri::StopPodSandboxRequest,
) -> Result<cri::StopPodSandboxResponse, Status> {
    crate::cri::required(&req.pod_sandbox_id, "pod_sandbox_id")?;
    x.run(&["stop", &req.pod_sandbox_id]).await?;
    status(x, &req.pod_sandbox_id).await?;
    Ok(cri::StopPodSandboxResponse {})
}

pub(crate) async fn remove_pod_sandbox(
    x: &ExecMode,
    req: cri::RemovePodSandboxRequest,
) -> Result<cri::RemovePodSandboxResponse, Status> {
    crate::cri::required(&req.pod_sandbox_id, "pod_sandbox_id")?;
    ok_if_missing(x.run(&["stop", "--force", &req.pod_sandbox_id]).await)?;
    ok_if_missing(x.run(&["rm", &req.pod_sandbox_id]).await)?;
    Ok(cri::RemovePodSandboxResponse {})
}

pub(crate) async fn pod_sandbox_status(
    x: &ExecMode,
    req: cri::PodSandboxStatusRequest,
) -> Result<cri::PodSandboxStatusResponse, Status> {
    crate::cri::required(&req.pod_sandbox_id, "pod_sandbox_id")?;
    let info = status(x, &req.pod_sandbox_id).await?;
    Ok(cri::PodSandboxStatusResponse { status: Some(sandbox_status(&info)), ..Default::default() })
}

pub(crate) async fn list_pod_sandbox(
    x: &ExecMode,
    req: cri::ListPodSandboxRequest,
) -> Result<cri::ListPodSandboxResponse, Status> {
    let filter = req.filter.unwrap_or_default();
    let items = list(x)
        .await?
        .iter()
        .filter(|i| filter.id.is_empty() || i.name.starts_with(&filter.id))
        .filter(|i| filter.state.as_ref().is_none_or(|s| s.state == cri_state(i) as i32))
        .filter(|i| filter.label_selector.iter().all(|(k, v)| i.user_labels.get(k) == Some(v)))
        .map(|i| {
            let m = manifest_of(i);
            cri::PodSandbox {
                id: i.name.clone(),
                metadata: Some(pod_meta::metadata(&m)),
                state: cri_state(i) as i32,
                created_at: created_ns(i),
                labels: pod_meta::labels(&m),
                annotations: pod_meta::annotations(&m),
                runtime_handler: String::new(),
            }
        })
        .collect();
    Ok(cri::ListPodSandboxResponse { items })
}
