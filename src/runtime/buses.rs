//! The daemon's connections to its pods' systemd: one per pod, shared by
//! every verb, made on first use or ahead of it (`connect_soon`, once a pod
//! runs: its first StartContainer then does not wait for the handshake), and
//! each pod's exit recorder, which runs on that connection's thread.

use super::{ContainerEvent, EventKind};
use crate::stage1::bus::{BusEvent, PodBus};
use rkt::pod::{DataDir, Pod};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::broadcast::Sender;
use uuid::Uuid;

/// A pod's connection once made. Its lock is held while it is made, so a
/// verb that needs it meanwhile waits for that one rather than making a
/// second.
type Slot = Mutex<Option<Arc<PodBus>>>;

/// The connections, by pod.
#[derive(Debug)]
pub(super) struct PodBuses {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    slots: Mutex<HashMap<Uuid, Arc<Slot>>>,
    data: DataDir,
    events: Sender<ContainerEvent>,
}

impl PodBuses {
    pub(super) fn new(data: DataDir, events: Sender<ContainerEvent>) -> PodBuses {
        PodBuses { shared: Arc::new(Shared { slots: Mutex::new(HashMap::new()), data, events }) }
    }

    /// The pod's connection, made (with its exit recorder) if there is none.
    /// Blocking.
    pub(super) fn get(&self, pod: &Pod) -> Result<Arc<PodBus>, String> {
        self.shared.get(pod)
    }

    /// Makes the pod's connection on a short-lived thread; a failure is
    /// left for the next `get` to meet again and report. The slot is the
    /// pod's now: if the pod is forgotten (stopped) before the thread
    /// connects, it connects nothing, and a connection made meanwhile goes
    /// with the thread.
    pub(super) fn connect_soon(&self, uuid: Uuid) {
        let Some(slot) = self.shared.slot(uuid, true) else { return };
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new().name("podbus-connect".into()).spawn(move || {
            let made = Pod::open(&shared.data, &uuid.to_string())
                .map_err(|e| e.to_string())
                .and_then(|p| shared.fill(&slot, &p));
            if let Err(e) = made {
                tracing::debug!(pod = %uuid, error = %e, "connecting ahead to the pod's systemd");
            }
        });
        if let Err(e) = spawned {
            tracing::debug!(pod = %uuid, error = %e, "no thread to connect ahead to the pod's systemd");
        }
    }

    /// Says the pod is being stopped: its bus closing is expected (not
    /// waited for while the connection is being made).
    pub(super) fn expect_close(&self, uuid: Uuid) {
        if let Some(slot) = self.shared.slot(uuid, false)
            && let Ok(guard) = slot.try_lock()
            && let Some(bus) = guard.as_ref()
        {
            bus.expect_close();
        }
    }

    /// Forgets the pod's connection (closed once no verb holds it).
    pub(super) fn forget(&self, uuid: Uuid) {
        if let Ok(mut slots) = self.shared.slots.lock() {
            slots.remove(&uuid);
        }
    }
}

impl Shared {
    fn slot(&self, uuid: Uuid, make: bool) -> Option<Arc<Slot>> {
        let mut slots = self.slots.lock().ok()?;
        if make { Some(Arc::clone(slots.entry(uuid).or_default())) } else { slots.get(&uuid).cloned() }
    }

    fn get(&self, pod: &Pod) -> Result<Arc<PodBus>, String> {
        let slot = self.slot(pod.uuid(), true).ok_or("the pod connections' lock is poisoned")?;
        self.fill(&slot, pod)
    }

    /// The connection in `slot`, made if there is none, unless the pod was
    /// forgotten since the slot was taken (it is being stopped).
    fn fill(&self, slot: &Arc<Slot>, pod: &Pod) -> Result<Arc<PodBus>, String> {
        let mut held = slot.lock().map_err(|_| "a pod connection's lock is poisoned")?;
        if let Some(bus) = held.as_ref() {
            return Ok(Arc::clone(bus));
        }
        if !self.slot(pod.uuid(), false).is_some_and(|s| Arc::ptr_eq(&s, slot)) {
            return Err("the pod was let go (it is being stopped)".into());
        }
        let sandbox = pod.sandbox_pid().map_err(|e| e.to_string())?.ok_or("pod has no sandbox process")?;
        let pid1 = crate::stage1::inject::pod_pid1(sandbox).map_err(|e| format!("finding the pod's systemd: {e}"))?;
        let bus = Arc::new(PodBus::connect(pid1).map_err(|e| format!("connecting to the pod's systemd: {e}"))?);
        record_exits(&bus, pod, self.events.clone());
        *held = Some(Arc::clone(&bus));
        Ok(bus)
    }
}

/// Writes each app's exit code to its status file as soon as the pod's
/// systemd reports the exit, so list and status stay file reads and the
/// code outlives the unit, the daemon and the pod. Runs where the pod's
/// signals are read, with its bus locked (the pod bus thread, shared by all
/// pods, or a caller of the pod's requests): a few file operations per exit.
fn record_exits(bus: &PodBus, pod: &Pod, out: Sender<ContainerEvent>) {
    let (data, uuid) = (pod.data_dir().clone(), pod.uuid());
    // host-PID apps whose Stopped event was sent, or is being waited for
    let host_stopped = Arc::new(Mutex::new(HashSet::new()));
    let recorder = move |event: &BusEvent| {
        let BusEvent::UnitChanged { unit, status } = event else { return true };
        let (Some(app), Some(exit)) = (unit.strip_suffix(".service"), status.main_exit()) else { return true };
        // with RemainAfterExit an exited app stays "active (exited)": the exit code is what counts
        let Ok(pod) = Pod::open(&data, &uuid.to_string()) else { return false };
        let paths = crate::stage1::app::AppPaths::new(&pod, app);
        if !paths.status_file("-started").exists() {
            return true;
        }
        if status.result == "oom-kill" {
            let _ = crate::stage1::app::record_oom_kill(&paths);
        }
        // a host-PID app's unit ends with its template: the app's own exit
        // is the writer's to record (first, or a moment after the
        // template's end); the event is sent once it is, from a thread of
        // its own (this one serves every pod's bus)
        if crate::stage1::app::exit_recorded_by_writer(&paths) {
            if host_stopped.lock().is_ok_and(|mut s| s.insert(app.to_string())) {
                let (out, app, sent) = (out.clone(), app.to_string(), Arc::clone(&host_stopped));
                let waiter = std::thread::Builder::new().name("host-app-exit".into()).spawn(move || {
                    // not recorded in time: a later event of the unit tries again
                    if !host_app_stopped(&paths, uuid, &app, &out) {
                        let _ = sent.lock().map(|mut s| s.remove(&app));
                    }
                });
                if let Err(e) = waiter {
                    tracing::warn!(pod = %uuid, error = %e, "cannot wait for a host-PID app's exit");
                }
            }
            return true;
        }
        if crate::stage1::app::record_exit(&paths, crate::stage1::bus::exit_code(&exit)).unwrap_or(false) {
            let _ = out.send(ContainerEvent::now(uuid, app, EventKind::Stopped));
        }
        true
    };
    if let Err(e) = bus.on_event(recorder) {
        tracing::warn!(pod = %uuid, error = %e, "cannot start the exit recorder");
    }
}

/// Sends a host-PID app's Stopped event once the log writer has recorded
/// its exit (up to 2 s after its unit ended); none after a failed start,
/// which sent its own. False when the exit was not recorded in time.
fn host_app_stopped(paths: &crate::stage1::app::AppPaths, uuid: Uuid, app: &str, out: &Sender<ContainerEvent>) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !paths.status_file("").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if !paths.status_file("").exists() {
        return false;
    }
    if !paths.status_file(crate::stage1::app::START_ERROR).exists() {
        let _ = out.send(ContainerEvent::now(uuid, app, EventKind::Stopped));
    }
    true
}
