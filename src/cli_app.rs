//! `rktlet app add|start|stop|rm|list|status`: rkt's app-level commands on a
//! running pod, on the same data directory as the daemon. They go through the
//! same code as the CRI verbs (a CRI request built from rkt's flags), so the
//! CLI and the daemon cannot disagree; the CLI is what the exec design of the
//! benchmark runs per call.

use crate::config::Config;
use crate::cri::{container_create, container_start, container_status};
use crate::proto::v1 as cri;
use crate::runtime::Runtime;
use std::path::PathBuf;

/// Flags of `rktlet app add`.
#[derive(Debug, Clone, clap::Args)]
pub struct AddArgs {
    /// Pod UUID (or unique prefix).
    pub uuid: String,
    /// Image reference or id, already in the store (`rktlet fetch`).
    pub image: String,
    /// App name (the app is named `0-<name>` like a CRI container's first attempt).
    #[arg(long)]
    pub name: String,
    /// Program to run instead of the image's entrypoint.
    #[arg(long)]
    pub exec: Option<String>,
    /// `KEY=VALUE` (repeatable).
    #[arg(long)]
    pub environment: Vec<String>,
    #[arg(long)]
    pub working_dir: Option<String>,
    /// Numeric uid to run as.
    #[arg(long)]
    pub user: Option<i64>,
    /// Numeric gid to run as.
    #[arg(long)]
    pub group: Option<i64>,
    /// Memory limit in bytes.
    #[arg(long)]
    pub memory: Option<i64>,
    /// Log file for the app's output (kubelet's format).
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Arguments after `--`.
    #[arg(last = true)]
    pub args: Vec<String>,
}

fn runtime(data_dir: PathBuf) -> Result<(tokio::runtime::Runtime, Runtime), String> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let config = Config { data_dir, ..Config::default() };
    let rt = Runtime::new(config).map_err(|e| e.to_string())?;
    Ok((tokio, rt))
}

fn id(uuid: &str, app: &str) -> String {
    format!("{uuid}:{app}")
}

/// `app add`: prints the container id.
pub fn add(data_dir: PathBuf, a: AddArgs) -> Result<String, String> {
    let (tokio, rt) = runtime(data_dir)?;
    let envs = a
        .environment
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| cri::KeyValue { key: k.into(), value: v.into() })
                .ok_or_else(|| format!("--environment {kv:?} is not KEY=VALUE"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (command, args) = match &a.exec {
        Some(e) => (std::iter::once(e.clone()).chain(a.args.iter().cloned()).collect(), Vec::new()),
        None => (Vec::new(), a.args.clone()),
    };
    let config = cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: a.name.clone(), attempt: 0 }),
        image: Some(cri::ImageSpec { image: a.image.clone(), ..Default::default() }),
        command,
        args,
        envs,
        working_dir: a.working_dir.clone().unwrap_or_default(),
        log_path: a.log_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        linux: Some(cri::LinuxContainerConfig {
            resources: a
                .memory
                .map(|m| cri::LinuxContainerResources { memory_limit_in_bytes: m, ..Default::default() }),
            security_context: Some(cri::LinuxContainerSecurityContext {
                run_as_user: a.user.map(|value| cri::Int64Value { value }),
                run_as_group: a.group.map(|value| cri::Int64Value { value }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    let req =
        cri::CreateContainerRequest { pod_sandbox_id: a.uuid.clone(), config: Some(config), sandbox_config: None };
    tokio
        .block_on(container_create::create_container(&rt, req))
        .map(|r| r.container_id)
        .map_err(|s| s.message().to_string())
}

/// `app start|stop|rm UUID --app=NAME`.
pub fn lifecycle(data_dir: PathBuf, verb: &str, uuid: &str, app: &str, timeout: i64) -> Result<(), String> {
    let (tokio, rt) = runtime(data_dir)?;
    let container_id = id(uuid, app);
    let result = tokio.block_on(async {
        match verb {
            "start" => {
                container_start::start_container(&rt, cri::StartContainerRequest { container_id }).await.map(|_| ())
            }
            "stop" => container_start::stop_container(&rt, cri::StopContainerRequest { container_id, timeout })
                .await
                .map(|_| ()),
            _ => container_start::remove_container(&rt, cri::RemoveContainerRequest { container_id }).await.map(|_| ()),
        }
    });
    result.map_err(|s| s.message().to_string())
}

/// `app list UUID` / `app status UUID --app=NAME`, as JSON or a table.
pub fn show(data_dir: PathBuf, uuid: &str, app: Option<&str>, json: bool) -> Result<String, String> {
    let (tokio, rt) = runtime(data_dir)?;
    // no daemon may be listening to the pod: read exits from its systemd first
    rt.reconcile();
    let filter = cri::ContainerFilter {
        pod_sandbox_id: uuid.to_string(),
        id: app.map(|a| id(uuid, a)).unwrap_or_default(),
        ..Default::default()
    };
    let list = tokio
        .block_on(container_status::list_containers(&rt, cri::ListContainersRequest { filter: Some(filter) }))
        .map_err(|s| s.message().to_string())?;
    let mut rows = Vec::new();
    for c in list.containers {
        let status = tokio
            .block_on(container_status::container_status(
                &rt,
                cri::ContainerStatusRequest { container_id: c.id.clone(), verbose: false },
            ))
            .map_err(|s| s.message().to_string())?
            .status
            .unwrap_or_default();
        let state = cri::ContainerState::try_from(status.state).map(|s| s.as_str_name()).unwrap_or("UNKNOWN");
        rows.push(serde_json::json!({
            "name": c.id.split_once(':').map(|(_, a)| a).unwrap_or(""),
            "state": state.trim_start_matches("CONTAINER_").to_lowercase(),
            "image_id": status.image_ref,
            "created_at": status.created_at,
            "started_at": status.started_at,
            "finished_at": status.finished_at,
            "exit_code": status.exit_code,
        }));
    }
    if app.is_some() && rows.is_empty() {
        return Err(format!("app {} not found in pod {uuid}", app.unwrap_or("")));
    }
    if json {
        return Ok(if app.is_some() { rows[0].to_string() } else { serde_json::Value::Array(rows).to_string() });
    }
    let mut out = String::from("NAME\tSTATE\tEXIT\tIMAGE\n");
    for r in rows {
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            r["name"].as_str().unwrap_or(""),
            r["state"].as_str().unwrap_or(""),
            r["exit_code"],
            r["image_id"].as_str().unwrap_or("")
        ));
    }
    Ok(out)
}
