//! RemoveContainer: the app stopped at once, its unit forgotten by the
//! pod's systemd, its mounts and files removed (`stage1::app::remove`).

use super::{ContainerError, open, stop::stop_app, unit, with_bus};
use crate::runtime::{EventKind, Runtime};
use crate::stage1::app;
use std::time::Duration;

/// Removes container `id`; removing a removed (or never made) one succeeds.
pub(crate) async fn remove(rt: &Runtime, id: &str) -> Result<(), ContainerError> {
    let mut t = match open(rt, id) {
        Ok(t) => t,
        // removing a removed container succeeds
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    };
    tokio::task::block_in_place(|| {
        stop_app(rt, &t, Duration::ZERO)?;
        if t.running {
            let name = unit(&t.app.name);
            let _ = with_bus(rt, &t.pod, |bus| match bus.reset_unit(&name) {
                Err(e) if e.is_not_found() => Ok(()),
                other => other,
            });
        }
        app::remove(&mut t.pod, &t.app.name, &rt.manifests).map_err(ContainerError::from)
    })?;
    rt.emit(t.pod.uuid(), &t.app.name, EventKind::Deleted);
    rt.pods.warm(&rt.manifests, &t.pod.uuid().to_string());
    Ok(())
}
