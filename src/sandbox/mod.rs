//! What the pod verbs do, apart from CRI: a pod sandbox is a pod directory
//! (`pod`) booted by `stage1` with its network (`net`) and its own limits
//! (`cgroup::pod_limits`). `cri` checks and translates the gRPC messages and
//! calls one function here per verb. Nothing here knows gRPC: errors are
//! [`SandboxError`], which `cri` maps to status codes.
//!
//! It sits beside `container` (the container verbs), above `pod` (the pod
//! directory and manifest, which `container` and `stage1` use too) and
//! `stage1` (booting, stopping and tearing down one pod).
//!
//! - `run`: RunPodSandbox, a cold boot, or a pool pod adapted (`pool`)
//! - `stop`: StopPodSandbox and RemovePodSandbox, and the daemon's bus to the pod
//! - `status`: what PodSandboxStatus (verbose) and PortForward read
//! - `resources`: the pod's own limits, recorded and written (UpdatePodSandboxResources)

pub(crate) mod from_cri;
pub(crate) mod pool;
pub(crate) mod resources;
pub(crate) mod run;
pub(crate) mod start;
pub(crate) mod status;
pub(crate) mod stop;

use crate::cgroup::pod_limits::PodLimitsError;
use crate::container::{ErrorKind, pod_kind};
use crate::stage1::boot::BootError;
use crate::stage1::sysctl::SysctlError;
use crate::stage1::teardown::TeardownError;
use rkt::pod::PodError;
use uuid::Uuid;

/// Why a pod verb failed. [`SandboxError::kind`] says which of the CRI's
/// codes a caller answers with; the text is the message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SandboxError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    Internal(String),
    #[error(transparent)]
    Pod(#[from] PodError),
    #[error(transparent)]
    PodLimits(#[from] PodLimitsError),
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
    /// The pod did not boot (or not in time).
    #[error(transparent)]
    Boot(#[from] BootError),
    #[error(transparent)]
    Teardown(#[from] TeardownError),
    /// A failed start, with the last lines of the pod's console log.
    #[error("{source}; sandbox log: {log}")]
    WithLog { source: Box<SandboxError>, log: String },
}

impl SandboxError {
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            SandboxError::InvalidArgument(_) => ErrorKind::InvalidArgument,
            SandboxError::FailedPrecondition(_) => ErrorKind::FailedPrecondition,
            SandboxError::Internal(_) => ErrorKind::Internal,
            SandboxError::Pod(e) => pod_kind(e),
            SandboxError::PodLimits(e) => match e {
                PodLimitsError::Invalid(_) => ErrorKind::InvalidArgument,
                PodLimitsError::BelowUsage { .. } => ErrorKind::FailedPrecondition,
                PodLimitsError::Write { .. } | PodLimitsError::Systemd { .. } => ErrorKind::Internal,
            },
            SandboxError::Sysctl(e) if e.is_invalid_argument() => ErrorKind::InvalidArgument,
            SandboxError::Sysctl(_) => ErrorKind::Internal,
            SandboxError::Boot(BootError::Timeout { .. }) => ErrorKind::DeadlineExceeded,
            SandboxError::Boot(BootError::Failed { .. }) => ErrorKind::Internal,
            SandboxError::Teardown(TeardownError::Stop(crate::stage1::stop::StopError::Pod(p))) => pod_kind(p),
            SandboxError::Teardown(_) => ErrorKind::Internal,
            SandboxError::WithLog { source, .. } => source.kind(),
        }
    }
}

/// An internal error of pod `uuid`'s step `what`.
pub(crate) fn internal(uuid: Uuid, what: &str, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Internal(format!("pod {uuid}: {what}: {e}"))
}
