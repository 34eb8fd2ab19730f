//! ContainerStatus and ListContainers: read from rkt's status files in the
//! pod (created/started markers, the recorded exit code) and the manifest;
//! no exec, and no bus round trip: exits are recorded by the pod's exit
//! recorder as systemd reports them.

use super::{container_meta as meta, pod_status};
use crate::container::{app_index, container_not_found, split_container_id};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use crate::stage1::app::AppPaths;
use crate::stage1::inject::Propagation;
use rkt::api_v1::AppInfo;
use rkt::pod::Pod;
use rkt::schema::{App, RuntimeApp, RuntimeImage};
use tonic::Status;

pub(crate) use crate::container::status::app_info;

/// The CRI status of an app of pod `pod_id`, from what `app status` reports.
pub(crate) fn status_from_info(pod_id: &str, info: AppInfo) -> cri::ContainerStatus {
    let state = match info.state.as_str() {
        "created" => cri::ContainerState::ContainerCreated,
        "running" => cri::ContainerState::ContainerRunning,
        "exited" => cri::ContainerState::ContainerExited,
        _ => cri::ContainerState::ContainerUnknown,
    };
    let mounts = info
        .mounts
        .iter()
        .map(|m| cri::Mount {
            container_path: m.container_path.clone(),
            host_path: m.host_path.clone(),
            readonly: m.read_only,
            selinux_relabel: m.selinux_relabel,
            propagation: match Propagation::parse(Some(&m.propagation)) {
                Propagation::Private => cri::MountPropagation::PropagationPrivate,
                Propagation::Slave => cri::MountPropagation::PropagationHostToContainer,
                Propagation::Shared => cri::MountPropagation::PropagationBidirectional,
            } as i32,
            recursive_read_only: m.recursive_read_only,
            ..Default::default()
        })
        .collect();
    let app = RuntimeApp {
        name: info.name,
        image: RuntimeImage { name: info.image_name, id: info.image_id, labels: Vec::new() },
        app: Some(App {
            user_annotations: info.user_annotations,
            user_labels: info.user_labels,
            user: info.user,
            group: info.group,
            supplementary_gids: info.supplementary_gids,
            ..Default::default()
        }),
        read_only_root_fs: false,
        mounts: Vec::new(),
        annotations: Vec::new(),
    };
    cri::ContainerStatus {
        id: meta::container_id(pod_id, &app.name),
        metadata: Some(meta::metadata(&app)),
        state: state as i32,
        created_at: info.created_at,
        started_at: info.started_at,
        finished_at: info.finished_at,
        exit_code: info.exit_code,
        image: Some(cri::ImageSpec { image: meta::image(&app), ..Default::default() }),
        image_ref: meta::image_id(&app),
        reason: info.reason,
        message: info.message,
        labels: meta::labels(&app),
        annotations: meta::annotations(&app),
        mounts,
        log_path: meta::log_path(&app),
        resources: meta::resources(&app),
        stop_signal: meta::stop_signal(&app).1 as i32,
        image_id: meta::image_id(&app),
        user: app.app.as_ref().and_then(|a| {
            Some(cri::ContainerUser {
                linux: Some(cri::LinuxContainerUser {
                    uid: a.user.parse().ok()?,
                    gid: a.group.parse().ok()?,
                    supplemental_groups: a.supplementary_gids.iter().map(|g| i64::from(*g)).collect(),
                }),
            })
        }),
    }
}

pub(super) fn status_of(pod: &Pod, app: &RuntimeApp, running: bool) -> cri::ContainerStatus {
    status_from_info(&pod.uuid().to_string(), app_info(pod, app, running))
}

/// What the daemon's pod table keeps of each app: its CRI status.
impl crate::pod::table::AppStatus for cri::ContainerStatus {
    fn read(pod: &Pod, app: &RuntimeApp, running: bool) -> Self {
        status_of(pod, app, running)
    }
}

/// The statuses of every container of one pod (none if the pod is gone).
pub(super) fn pod_container_statuses(rt: &Runtime, pod_id: &str) -> Vec<cri::ContainerStatus> {
    rt.pods.view_of(&rt.manifests, pod_id).map(|v| v.containers.clone()).unwrap_or_default()
}

pub(crate) async fn container_status(
    rt: &Runtime,
    req: cri::ContainerStatusRequest,
) -> Result<cri::ContainerStatusResponse, Status> {
    let id = &req.container_id;
    let (pod_id, name) = split_container_id(id)?;
    rt.wait_reconciled().await;
    let view = rt.pods.view_of(&rt.manifests, pod_id).map_err(|e| container_not_found(id, e))?;
    let pod = &view.sandbox.pod;
    let i = app_index(&view.sandbox.manifest, &pod.uuid().to_string(), id, name)?;
    let (Some(status), Some(app)) = (view.containers.get(i), view.sandbox.manifest.apps.get(i)) else {
        return Err(Status::not_found(format!("container {id} not found")));
    };
    let mut info = std::collections::HashMap::new();
    if req.verbose {
        let paths = AppPaths::new(pod, &app.name);
        let detail = serde_json::json!({
            "pod": pod.uuid().to_string(),
            "app": app.name,
            "rootfs": paths.rootfs(),
            "exec": app.app.as_ref().and_then(|a| a.exec.clone()),
            "user": app.app.as_ref().map(|a| (a.user.clone(), a.group.clone())),
        });
        info.insert("info".to_string(), detail.to_string());
    }
    Ok(cri::ContainerStatusResponse { status: Some(status.clone()), info })
}

pub(crate) fn matches(s: &cri::ContainerStatus, pod_id: &str, f: &cri::ContainerFilter) -> bool {
    (f.id.is_empty() || s.id.starts_with(&f.id))
        && (f.pod_sandbox_id.is_empty() || pod_id.starts_with(&f.pod_sandbox_id))
        && f.state.as_ref().is_none_or(|st| st.state == s.state)
        && f.label_selector.iter().all(|(k, v)| s.labels.get(k) == Some(v))
}

pub(crate) async fn list_containers(
    rt: &Runtime,
    req: cri::ListContainersRequest,
) -> Result<cri::ListContainersResponse, Status> {
    let filter = req.filter.unwrap_or_default();
    rt.wait_reconciled().await;
    let views = rt
        .pods
        .views(&rt.manifests, |pods| {
            Ok(pods
                .iter()
                .filter(|(uuid, dir)| {
                    dir.is_listed()
                        && (filter.pod_sandbox_id.is_empty() || uuid.to_string().starts_with(&filter.pod_sandbox_id))
                })
                .copied()
                .collect())
        })
        .map_err(pod_status)?;
    let mut containers = Vec::new();
    for (uuid, view) in views {
        let Ok(view) = view else { continue };
        let pod_id = uuid.to_string();
        for s in &view.containers {
            if matches(s, &pod_id, &filter) {
                containers.push(container_from_status(&pod_id, s.clone()));
            }
        }
    }
    Ok(cri::ListContainersResponse { containers })
}

/// The ListContainers entry of a container.
pub(crate) fn container_from_status(pod_id: &str, s: cri::ContainerStatus) -> cri::Container {
    cri::Container {
        id: s.id,
        pod_sandbox_id: pod_id.to_string(),
        metadata: s.metadata,
        image: s.image,
        image_ref: s.image_ref,
        state: s.state,
        created_at: s.created_at,
        labels: s.labels,
        annotations: s.annotations,
        image_id: s.image_id,
    }
}
