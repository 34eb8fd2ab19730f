//! Attach: a running container's output and exit, and its stdin pipe from
//! the pod's log writer, for the streaming server (`stream::attach`).

use super::{ContainerError, Target, meta, open};
use crate::runtime::Runtime;

/// A running container that can be attached to (with a stdin if `stdin`
/// is asked for), with its stdin mode. Blocking.
pub(crate) fn attachable(
    rt: &Runtime,
    id: &str,
    stdin: bool,
) -> Result<(Target, Option<meta::StdinMode>), ContainerError> {
    let t = open(rt, id)?;
    let paths = crate::stage1::app::AppPaths::new(&t.pod, &t.app.name);
    if !t.running || crate::stage1::app::facts(&paths, t.running).state != crate::stage1::app::AppState::Running {
        return Err(ContainerError::FailedPrecondition(format!("container {id} is not running")));
    }
    let mode = meta::stdin(&t.app);
    if stdin && mode.is_none() {
        return Err(ContainerError::FailedPrecondition(format!("container {id} was not created with stdin")));
    }
    Ok((t, mode.filter(|_| stdin)))
}

/// Where a running container's output and exit are, and with `stdin` a
/// copy of its stdin pipe from the pod's log writer (for an attach
/// session). Blocking.
pub(crate) fn source(rt: &Runtime, id: &str, stdin: bool) -> Result<crate::stream::attach::Source, ContainerError> {
    let (t, mode) = attachable(rt, id, stdin)?;
    let paths = crate::stage1::app::AppPaths::new(&t.pod, &t.app.name);
    let log_socket = t.pod.path().join(crate::stage1::crilog::SOCKET_FILE);
    let origin = match crate::stage1::crilog::subscribe(&log_socket, &t.app.name) {
        Ok(conn) => crate::stream::attach::Origin::Live(conn),
        // a pod booted by an older rktlet: its log writer has no
        // subscriptions, the container's CRI log is followed instead
        Err(e) if e.to_string().starts_with("unknown command") => {
            let log = meta::log_path(&t.app);
            if log.is_empty() {
                return Err(ContainerError::FailedPrecondition(format!(
                    "container {id} runs in a pod started by an older rktlet, and has no log path to follow"
                )));
            }
            crate::stream::attach::Origin::Log(log.into())
        }
        Err(e) => return Err(ContainerError::FailedPrecondition(format!("output of container {id}: {e}"))),
    };
    let stdin = match mode {
        None => None,
        Some(mode) => {
            let pipe = crate::stage1::crilog::stdin_of(&log_socket, &t.app.name)
                .map_err(|e| ContainerError::FailedPrecondition(format!("stdin of container {id}: {e}")))?;
            let once = mode == meta::StdinMode::Once;
            Some(crate::stream::attach::Stdin { pipe, once, log_socket, app: t.app.name.clone() })
        }
    };
    Ok(crate::stream::attach::Source { origin, exit_file: paths.status_file(""), stdin })
}
