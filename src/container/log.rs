//! ReopenContainerLog: the pod's log writer reopens the app's CRI log file.

use super::{ContainerError, app_running, open};
use crate::runtime::Runtime;
use crate::stage1::crilog;

/// Has the log writer reopen the log of container `id`, which must be running.
pub(crate) fn reopen(rt: &Runtime, id: &str) -> Result<(), ContainerError> {
    let t = open(rt, id)?;
    if !app_running(&t) {
        return Err(ContainerError::FailedPrecondition(format!("container {id} is not running")));
    }
    crilog::reopen(&t.pod.path().join(crilog::SOCKET_FILE), &t.app.name)
        .map_err(|e| ContainerError::Internal(format!("reopening the log of {id}: {e}")))
}
