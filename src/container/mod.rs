//! What the container verbs do, apart from CRI: a container is an app of a
//! running pod (`stage1::app`), its process a transient unit of the pod's
//! systemd, driven over the pod's bus (`stage1::bus`). `cri` checks and
//! translates the gRPC messages and calls one function here per verb; the
//! CLI's app commands (`cli_app`) call the same functions. Nothing here
//! knows gRPC: errors are [`ContainerError`], which `cri` maps to status codes.
//!
//! - `create`: CreateContainer, the app added to the pod
//! - `start`: StartContainer, the app's unit described and started
//! - `checkpoint`: CheckpointContainer, the CRIU dump and the archive
//! - `restore`: CreateContainer from a checkpoint archive (its start is `start`'s)
//! - `stop`: StopContainer, the unit stopped (a host-PID app signalled itself)
//! - `remove`: RemoveContainer
//! - `resources`: UpdateContainerResources, the app's limits
//! - `log`: ReopenContainerLog
//! - `attach`: where Attach's output, exit and stdin are
//! - `exec`: ExecSync's command, and the main process a streaming exec copies
//! - `stats`: the usage of pods and their running containers, CPU rates
//! - `status`: an app as `rktlet app status` and ContainerStatus see it, its usage
//! - `pod_resources`: the pod's own limits as its apps change
//! - `meta`: container ids and what CreateContainer records in the app's annotations

pub(crate) mod attach;
pub mod checkpoint;
pub(crate) mod create;
pub(crate) mod exec;
pub(crate) mod from_cri;
pub(crate) mod log;
pub(crate) mod meta;
pub(crate) mod pod_resources;
pub(crate) mod remove;
pub(crate) mod resources;
pub(crate) mod restore;
pub(crate) mod start;
pub(crate) mod stats;
pub(crate) mod status;
pub(crate) mod stop;

use crate::cgroup::pod_limits::PodLimitsError;
use crate::runtime::Runtime;
use crate::stage1::app::AppError;
use crate::stage1::bus::{BusError, PodBus};
use rkt::pod::{Pod, PodError, PodState};
use rkt::schema::RuntimeApp;
use std::sync::Arc;

/// Why a container verb failed. [`ContainerError::kind`] says which of the
/// CRI's codes a caller answers with; the text is the message.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    FailedPrecondition(String),
    /// The pod's bus cannot be reached.
    #[error("{0}")]
    Unavailable(String),
    /// Not done within the time the caller gave.
    #[error("{0}")]
    DeadlineExceeded(String),
    /// More than rktlet keeps (ExecSync's output).
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("{0}")]
    Internal(String),
    /// A system call or file failed.
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error(transparent)]
    Pod(#[from] PodError),
    #[error(transparent)]
    App(#[from] AppError),
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error(transparent)]
    PodLimits(#[from] PodLimitsError),
    /// The image store's answer (with what it was asked for, if not the container's image).
    #[error("{}", match context { Some(c) => format!("{c}: {source}"), None => source.to_string() })]
    Image { context: Option<String>, source: crate::image::ImageError },
    /// A command run in container `id` failed.
    #[error("{}", exec_message(id, source))]
    Exec { id: String, source: crate::stage1::exec::ExecError },
}

/// The message of an exec's failure in container `id`.
fn exec_message(id: &str, e: &crate::stage1::exec::ExecError) -> String {
    use crate::stage1::exec::ExecError;
    match e {
        ExecError::TargetGone { .. } => format!("container {id} is not running"),
        ExecError::EmptyCommand | ExecError::Nul => e.to_string(),
        ExecError::Timeout { .. } | ExecError::Setup { .. } | ExecError::Target { .. } | ExecError::Io(_) => {
            format!("exec in container {id}: {e}")
        }
    }
}

/// The class of a [`ContainerError`], as gRPC's codes name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    NotFound,
    InvalidArgument,
    AlreadyExists,
    FailedPrecondition,
    Unavailable,
    /// A command did not finish in time.
    DeadlineExceeded,
    /// More than rktlet keeps.
    ResourceExhausted,
    /// What went wrong is not known to rktlet (a command that could not start).
    Unknown,
    Internal,
}

impl ContainerError {
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            ContainerError::NotFound(_) => ErrorKind::NotFound,
            ContainerError::InvalidArgument(_) => ErrorKind::InvalidArgument,
            ContainerError::FailedPrecondition(_) => ErrorKind::FailedPrecondition,
            ContainerError::Unavailable(_) => ErrorKind::Unavailable,
            ContainerError::DeadlineExceeded(_) => ErrorKind::DeadlineExceeded,
            ContainerError::ResourceExhausted(_) => ErrorKind::ResourceExhausted,
            ContainerError::Internal(_) | ContainerError::Io { .. } => ErrorKind::Internal,
            ContainerError::Pod(e) => pod_kind(e),
            ContainerError::App(e) => match e {
                AppError::Pod(p) => pod_kind(p),
                AppError::Exists { .. } => ErrorKind::AlreadyExists,
                AppError::NotFound { .. } => ErrorKind::NotFound,
                AppError::PodNotRunning { .. } => ErrorKind::FailedPrecondition,
                AppError::Invalid(_) => ErrorKind::InvalidArgument,
                AppError::Io { .. } => ErrorKind::Internal,
            },
            ContainerError::Bus(e) if e.is_not_found() => ErrorKind::NotFound,
            ContainerError::Bus(_) => ErrorKind::Internal,
            // (the store's own code is finer: `cri` asks it)
            ContainerError::Image { source: crate::image::ImageError::NotFound(_), .. } => ErrorKind::NotFound,
            ContainerError::Image { .. } => ErrorKind::Internal,
            ContainerError::Exec { source, .. } => {
                use crate::stage1::exec::ExecError;
                match source {
                    ExecError::Timeout { .. } => ErrorKind::DeadlineExceeded,
                    ExecError::TargetGone { .. } => ErrorKind::FailedPrecondition,
                    ExecError::EmptyCommand | ExecError::Nul => ErrorKind::InvalidArgument,
                    ExecError::Setup { .. } => ErrorKind::Unknown,
                    ExecError::Target { .. } | ExecError::Io(_) => ErrorKind::Internal,
                }
            }
            ContainerError::PodLimits(e) => match e {
                PodLimitsError::Invalid(_) => ErrorKind::InvalidArgument,
                PodLimitsError::BelowUsage { .. } => ErrorKind::FailedPrecondition,
                PodLimitsError::Write { .. } | PodLimitsError::Systemd { .. } => ErrorKind::Internal,
            },
        }
    }

    pub(crate) fn is_not_found(&self) -> bool {
        self.kind() == ErrorKind::NotFound
    }

    /// An [`ContainerError::Io`] with its context.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ContainerError {
        let context = context.into();
        move |source| ContainerError::Io { context, source }
    }
}

/// The class of a pod directory's error: an id that names no pod, whatever
/// its form, is not found (RemovePodSandbox of it succeeds, as
/// RemoveContainer does).
pub(crate) fn pod_kind(e: &PodError) -> ErrorKind {
    match e {
        PodError::NotFound(_) | PodError::InvalidId(_) => ErrorKind::NotFound,
        PodError::Ambiguous(_) => ErrorKind::InvalidArgument,
        PodError::Exists(_) => ErrorKind::AlreadyExists,
        PodError::WrongState { .. } | PodError::Busy(_) => ErrorKind::FailedPrecondition,
        PodError::Manifest { .. } | PodError::Io { .. } => ErrorKind::Internal,
    }
}

/// A container id resolved to its pod and app.
pub(crate) struct Target {
    pub pod: Pod,
    pub app: RuntimeApp,
    pub running: bool,
}

/// Finds a container by `<pod>:<app>` (the pod id may be a prefix). An id
/// without `:` is a prefix of one (crictl shows 13 characters): it names
/// the only container of the pod it is a prefix of.
pub(crate) fn open(rt: &Runtime, id: &str) -> Result<Target, ContainerError> {
    let (pod_id, name) = split_container_id(id)?;
    let mut pod = Pod::open(&rt.data, pod_id).map_err(|e| container_not_found(id, e))?;
    let running = pod.state()? == PodState::Running;
    let manifest = rt.manifests.read(&pod)?;
    let app = manifest.apps[app_index(&manifest, &pod.uuid().to_string(), id, name)?].clone();
    Ok(Target { pod, app, running })
}

/// The pod id (or prefix) and app name of a container id (no name: the pod's only app).
pub(crate) fn split_container_id(id: &str) -> Result<(&str, Option<&str>), ContainerError> {
    match meta::split_id(id) {
        Some((p, a)) => Ok((p, Some(a))),
        None if !id.is_empty() && !id.contains(':') => Ok((id, None)),
        None => Err(ContainerError::InvalidArgument(format!("container id {id:?} is not <pod>:<app>"))),
    }
}

/// A pod that cannot be found means its container cannot be.
pub(crate) fn container_not_found(id: &str, e: PodError) -> ContainerError {
    match e {
        PodError::NotFound(_) | PodError::InvalidId(_) => ContainerError::NotFound(format!("container {id} not found")),
        e => ContainerError::Pod(e),
    }
}

/// The index of container `id`'s app in its pod's manifest.
pub(crate) fn app_index(
    manifest: &rkt::schema::PodManifest,
    pod_id: &str,
    id: &str,
    name: Option<&str>,
) -> Result<usize, ContainerError> {
    let found = match name {
        Some(name) => manifest.apps.iter().position(|a| a.name == name),
        None if manifest.apps.len() == 1 => Some(0),
        None if manifest.apps.is_empty() => None,
        None => {
            let ids: Vec<String> = manifest.apps.iter().map(|a| meta::container_id(pod_id, &a.name)).collect();
            return Err(ContainerError::InvalidArgument(format!(
                "container id {id:?} is ambiguous: {}",
                ids.join(", ")
            )));
        }
    };
    found.ok_or_else(|| ContainerError::NotFound(format!("container {id} not found")))
}

/// The pod's bus, reconnecting once if the cached connection went away.
fn with_bus<T>(rt: &Runtime, pod: &Pod, f: impl Fn(&PodBus) -> Result<T, BusError>) -> Result<T, ContainerError> {
    let bus: Arc<PodBus> = rt.pod_bus(pod).map_err(ContainerError::Unavailable)?;
    match f(&bus) {
        Err(BusError::Disconnected { .. }) => {
            rt.drop_pod_bus(pod.uuid());
            let bus = rt.pod_bus(pod).map_err(ContainerError::Unavailable)?;
            Ok(f(&bus)?)
        }
        other => Ok(other?),
    }
}

/// [`with_bus`] for what any [`crate::stage1::bus::UnitBus`] answers: the
/// runtime's double where it has one (the handler tests), else the pod's bus.
fn with_unit_bus<T>(
    rt: &Runtime,
    pod: &Pod,
    f: impl Fn(&dyn crate::stage1::bus::UnitBus) -> Result<T, BusError>,
) -> Result<T, ContainerError> {
    match rt.unit_bus_double() {
        Some(bus) => Ok(f(bus)?),
        None => with_bus(rt, pod, |bus| f(bus)),
    }
}

/// The unit of an app in its pod's systemd.
fn unit(app: &str) -> String {
    format!("{app}.service")
}

/// The app's cgroups on the host (below its pod's), if the pod has a cgroup.
pub(crate) fn app_cgroup(pod: &Pod, app: &str) -> Option<crate::cgroup::app::AppCgroup> {
    let subs = pod.subcgroups().ok().flatten()?;
    let layout = crate::cgroup::Layout::cached().ok()?;
    Some(crate::cgroup::app::AppCgroup::new(layout, &subs, app))
}

/// Whether the app of `t` has been started and not seen to exit.
fn app_running(t: &Target) -> bool {
    use crate::stage1::app::{self, AppPaths, AppState};
    t.running && app::facts(&AppPaths::new(&t.pod, &t.app.name), true).state == AppState::Running
}
