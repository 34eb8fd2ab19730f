//! Containers the exec way: `app add|start|stop|rm|status` per call, and
//! ListContainers as one `list` plus one `app status` per app.

use super::super::container_status::{container_from_status, matches, status_from_info};
use super::app_add::AddArgs;
use super::{ExecMode, failure, ok_if_missing, pods};
use crate::container::meta::split_id;
use crate::proto::v1 as cri;
use rkt::api_v1::AppInfo;
use tonic::Status;

fn split(id: &str) -> Result<(&str, &str), Status> {
    split_id(id).ok_or_else(|| Status::invalid_argument(format!("container id {id:?} is not <pod>:<app>")))
}

async fn app_status(x: &ExecMode, pod: &str, app: &str) -> Result<AppInfo, Status> {
    x.json(&["app", "status", pod, &format!("--app={app}"), "--format=json"]).await
}

pub(crate) async fn create_container(
    x: &ExecMode,
    req: cri::CreateContainerRequest,
) -> Result<cri::CreateContainerResponse, Status> {
    let config = req.config.ok_or_else(|| Status::invalid_argument("config is required"))?;
    crate::cri::required(&req.pod_sandbox_id, "pod_sandbox_id")?;
    let mut argv = vec!["app".to_string(), "add".to_string()];
    argv.extend(AddArgs::from_cri(&req.pod_sandbox_id, &config).to_argv());
    let out = x.run(&argv).await?;
    let container_id = out.lines().last().unwrap_or_default().trim().to_string();
    Ok(cri::CreateContainerResponse { container_id })
}

pub(crate) async fn start_container(
    x: &ExecMode,
    req: cri::StartContainerRequest,
) -> Result<cri::StartContainerResponse, Status> {
    let (pod, app) = split(&req.container_id)?;
    x.run(&["app", "start", pod, &format!("--app={app}")]).await?;
    Ok(cri::StartContainerResponse {})
}

pub(crate) async fn stop_container(
    x: &ExecMode,
    req: cri::StopContainerRequest,
) -> Result<cri::StopContainerResponse, Status> {
    let (pod, app) = split(&req.container_id)?;
    x.run(&["app", "stop", pod, &format!("--app={app}"), &format!("--timeout={}", req.timeout)]).await?;
    Ok(cri::StopContainerResponse {})
}

pub(crate) async fn remove_container(
    x: &ExecMode,
    req: cri::RemoveContainerRequest,
) -> Result<cri::RemoveContainerResponse, Status> {
    let (pod, app) = split(&req.container_id)?;
    ok_if_missing(x.run(&["app", "rm", pod, &format!("--app={app}")]).await)?;
    Ok(cri::RemoveContainerResponse {})
}

pub(crate) async fn container_status(
    x: &ExecMode,
    req: cri::ContainerStatusRequest,
) -> Result<cri::ContainerStatusResponse, Status> {
    let (pod, app) = split(&req.container_id)?;
    let info = app_status(x, pod, app).await?;
    Ok(cri::ContainerStatusResponse { status: Some(status_from_info(pod, info)), ..Default::default() })
}

pub(crate) async fn list_containers(
    x: &ExecMode,
    req: cri::ListContainersRequest,
) -> Result<cri::ListContainersResponse, Status> {
    let filter = req.filter.unwrap_or_default();
    let mut containers = Vec::new();
    for pod in pods::list(x).await? {
        for app in &pod.app_names {
            // the app may go between the list and its status
            let Ok(info) = app_status(x, &pod.name, app).await else { continue };
            let s = status_from_info(&pod.name, info);
            if matches(&s, &pod.name, &filter) {
                containers.push(container_from_status(&pod.name, s));
            }
        }
    }
    Ok(cri::ListContainersResponse { containers })
}

/// ExecSync as rktlet did it: one exec of the CLI (`app exec`), whose
/// stdout, stderr and exit code are the command's; the CLI's own failures
/// exit with [`super::app_add::EXEC_FAILED`] and say why on stderr.
pub(crate) async fn exec_sync(x: &ExecMode, req: cri::ExecSyncRequest) -> Result<cri::ExecSyncResponse, Status> {
    let (pod, app) = split(&req.container_id)?;
    if req.cmd.is_empty() {
        return Err(Status::invalid_argument("cmd is required"));
    }
    let mut argv = vec![
        "app".to_string(),
        "exec".to_string(),
        pod.to_string(),
        format!("--app={app}"),
        format!("--timeout={}", req.timeout),
        "--".to_string(),
    ];
    argv.extend(req.cmd);
    let out = x.output(&argv).await?;
    match out.status.code() {
        Some(super::app_add::EXEC_FAILED) | None => Err(failure(&argv, &out)),
        Some(exit_code) => Ok(cri::ExecSyncResponse { stdout: out.stdout, stderr: out.stderr, exit_code }),
    }
}
