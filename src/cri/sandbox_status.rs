//! PodSandboxStatus, ListPodSandbox and PortForward: the pods' views
//! (`pod::table`: state = directory + lock probe, identity = the pod
//! manifest, kept warm by the verbs) in CRI's terms; the verbose details and
//! the network namespace are `sandbox::status`'s.

use super::{pod_meta, pod_status, sandbox_error};
use crate::pod::table::SandboxView;
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use tonic::Status;

pub(crate) use crate::container::stats::{PodView, list_views};

fn cri_state(view: &SandboxView) -> cri::PodSandboxState {
    if view.ready { cri::PodSandboxState::SandboxReady } else { cri::PodSandboxState::SandboxNotready }
}

fn to_sandbox(view: &SandboxView) -> cri::PodSandbox {
    cri::PodSandbox {
        id: view.pod.uuid().to_string(),
        metadata: Some(pod_meta::metadata(&view.manifest)),
        state: cri_state(view) as i32,
        created_at: view.created_at,
        labels: pod_meta::labels(&view.manifest),
        annotations: pod_meta::annotations(&view.manifest),
        runtime_handler: String::new(),
    }
}

pub(crate) async fn pod_sandbox_status(
    rt: &Runtime,
    req: cri::PodSandboxStatusRequest,
) -> Result<cri::PodSandboxStatusResponse, Status> {
    super::required(&req.pod_sandbox_id, "pod_sandbox_id")?;
    let pod_view = crate::sandbox::status::view(rt, &req.pod_sandbox_id).map_err(sandbox_error)?;
    let view = &pod_view.sandbox;
    let network = if pod_meta::namespace_options(&view.manifest).network == cri::NamespaceMode::Node as i32 {
        None
    } else {
        Some(cri::PodSandboxNetworkStatus {
            ip: view.ips.first().cloned().unwrap_or_default(),
            additional_ips: view.ips.iter().skip(1).map(|ip| cri::PodIp { ip: ip.clone() }).collect(),
        })
    };
    let status = cri::PodSandboxStatus {
        id: view.pod.uuid().to_string(),
        metadata: Some(pod_meta::metadata(&view.manifest)),
        state: cri_state(view) as i32,
        created_at: view.created_at,
        network,
        linux: Some(cri::LinuxPodSandboxStatus {
            namespaces: Some(cri::Namespace { options: Some(pod_meta::namespace_options(&view.manifest)) }),
        }),
        labels: pod_meta::labels(&view.manifest),
        annotations: pod_meta::annotations(&view.manifest),
        runtime_handler: String::new(),
    };
    let mut info = std::collections::HashMap::new();
    if req.verbose {
        info.insert("info".to_string(), crate::sandbox::status::verbose_info(rt, &pod_view).to_string());
    }
    Ok(cri::PodSandboxStatusResponse { status: Some(status), info, ..Default::default() })
}

/// PortForward: checks the pod, then hands out a URL of the streaming server.
pub(crate) async fn port_forward(
    rt: &Runtime,
    req: cri::PortForwardRequest,
) -> Result<cri::PortForwardResponse, Status> {
    super::required(&req.pod_sandbox_id, "pod_sandbox_id")?;
    let mut ports = Vec::new();
    for p in &req.port {
        let port = u16::try_from(*p).ok().filter(|p| *p != 0);
        ports.push(port.ok_or_else(|| Status::invalid_argument(format!("port {p} is not a TCP port")))?);
    }
    tokio::task::block_in_place(|| crate::sandbox::status::running_netns(rt, &req.pod_sandbox_id))
        .map_err(sandbox_error)?;
    let url = rt
        .streams
        .url(crate::stream::token::StreamRequest::PortForward { pod_id: req.pod_sandbox_id, ports })
        .map_err(Status::unavailable)?;
    Ok(cri::PortForwardResponse { url })
}

fn matches(view: &SandboxView, filter: &cri::PodSandboxFilter) -> bool {
    if !filter.id.is_empty() && !view.pod.uuid().to_string().starts_with(&filter.id) {
        return false;
    }
    if let Some(s) = &filter.state
        && s.state != cri_state(view) as i32
    {
        return false;
    }
    filter.label_selector.iter().all(|(k, v)| view.manifest.user_labels.get(k) == Some(v))
}

pub(crate) async fn list_pod_sandbox(
    rt: &Runtime,
    req: cri::ListPodSandboxRequest,
) -> Result<cri::ListPodSandboxResponse, Status> {
    let filter = req.filter.unwrap_or_default();
    let items = list_views(rt)
        .map_err(pod_status)?
        .iter()
        .filter(|v| matches(&v.sandbox, &filter))
        .map(|v| to_sandbox(&v.sandbox))
        .collect();
    Ok(cri::ListPodSandboxResponse { items })
}
