//! RemoveContainer: the app stopped at once, its unit forgotten by the
//! pod's systemd, its mounts and files removed (`stage1::app::remove`).

use super::{ContainerError, open, stop::stop_app, unit, with_bus};
use crate::runtime::{EventKind, Runtime};
use crate::stage1::app;
use std::sync::Arc;
use std::time::Duration;

/// Removes container `id`; removing a removed (or never made) one succeeds.
pub(crate) async fn remove(rt: &Arc<Runtime>, id: &str) -> Result<(), ContainerError> {
    let mut steps = crate::base::steps::Steps::new();
    let mut t = match open(rt, id) {
        Ok(t) => t,
        // removing a removed container succeeds
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    };
    steps.mark("open");
    tokio::task::block_in_place(|| {
        stop_app(rt, &t, Duration::ZERO)?;
        steps.mark("stop");
        if t.running {
            let name = unit(&t.app.name);
            // looked at, stopped where still active, then unloaded: an app
            // that ended on its own successfully keeps its unit "active
            // (exited)" (RemainAfterExit), a host-PID app's template outlives
            // the app, and a failed one stays loaded until reset
            let _ = with_bus(rt, &t.pod, |bus| match bus.reset_unit(&name) {
                Err(e) if e.is_not_found() => Ok(()),
                other => other,
            });
            steps.mark("reset");
        }
        let removed = app::remove(&mut t.pod, &t.app.name, &rt.manifests).map_err(ContainerError::from);
        steps.mark("app");
        removed
    })?;
    rt.emit(t.pod.uuid(), &t.app.name, EventKind::Deleted);
    tracing::debug!(container = id, steps = %steps.line(), "removed");
    rt.warm_later(t.pod.uuid());
    Ok(())
}
