//! The node's own systemd, where a systemd node's sandbox units live: one
//! connection to its private socket for the daemon's life (made at first
//! use, made again when it was lost), so that starting and forgetting a
//! pod's unit are bus calls, not an exec of `systemd-run` or `systemctl`.
//!
//! Runs in: blocking threads of the daemon (the bus calls block).

use super::bus::{BusError, PodBus};
use std::sync::{Arc, Mutex};

static NODE_BUS: Mutex<Option<Arc<PodBus>>> = Mutex::new(None);

/// The connection, a new one when `fresh` (the old one was lost).
fn connection(fresh: bool) -> Result<Arc<PodBus>, BusError> {
    let mut slot = NODE_BUS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if fresh {
        *slot = None;
    }
    if let Some(bus) = slot.as_ref() {
        return Ok(Arc::clone(bus));
    }
    let bus = Arc::new(PodBus::connect_node()?);
    *slot = Some(Arc::clone(&bus));
    Ok(bus)
}

/// Runs `f` on the node's systemd; once more on a new connection when the
/// one it had was lost (the node's systemd re-executed, for one).
pub(crate) fn call<T>(f: impl Fn(&PodBus) -> Result<T, BusError>) -> Result<T, BusError> {
    match f(&*connection(false)?) {
        Err(BusError::Disconnected { .. }) => f(&*connection(true)?),
        done => done,
    }
}
