//! A pod's sd-bus connection and what the daemon knows from its signals.
//!
//! Runs in: whichever thread holds the pod's lock (`reactor`): a caller
//! making its requests, or the pod bus thread reading signals. Reading
//! signals completes waiting requests (JobRemoved), keeps the last state of
//! each unit (PropertiesChanged) and runs subscribers; waits that reach their
//! deadline fail. A request that waits for a job does not hold the lock
//! meanwhile, so a slow stop never blocks a status read of the same pod.

use super::BusError;
use super::sdbus::{Bus, Message, SdError};
use super::status::{SERVICE_IFACE, UNIT_IFACE, UnitStatus, unit_name_from_path};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

pub(super) const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
pub(super) const MANAGER_IFACE: &str = "org.freedesktop.systemd1.Manager";

/// What to do when a job ends: its result string (`done`, `failed`, ...) or why the wait ended.
pub(super) type JobDone = Box<dyn FnOnce(&mut Worker, Result<String, BusError>) + Send>;

/// What runs for each event read from the pod's bus (see
/// `PodBus::on_event`); false unsubscribes it.
pub(super) type Handler = Box<dyn FnMut(&BusEvent) -> bool + Send>;

/// A signal from the pod's systemd, for subscribers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusEvent {
    JobRemoved {
        id: u32,
        job: String,
        unit: String,
        result: String,
    },
    /// A unit's state after a PropertiesChanged (merged with what was known).
    UnitChanged {
        unit: String,
        status: UnitStatus,
    },
    UnitRemoved {
        unit: String,
    },
}

struct PendingJob {
    unit: String,
    deadline: Instant,
    done: JobDone,
}

pub(super) struct Worker {
    bus: Bus,
    pid1: i32,
    /// Set once the connection is gone; every later request fails with it.
    dead: Option<String>,
    /// Jobs someone waits for, by object path.
    pending: HashMap<String, PendingJob>,
    /// Last state seen in signals, by unit name: systemd unloads inactive units.
    last_seen: HashMap<String, UnitStatus>,
    /// Subscribers (`PodBus::on_event`), run on each event.
    handlers: Vec<Handler>,
    /// See `PodBus::expect_close`.
    closing: Arc<AtomicBool>,
    /// Units whose state is kept from signals: those named with this
    /// prefix (all in a pod; the node's systemd signals every unit of the
    /// node, of which the daemon's are `rktlet-`).
    tracked: &'static str,
}

impl Worker {
    pub(super) fn new(bus: Bus, pid1: i32, closing: Arc<AtomicBool>, tracked: &'static str) -> Self {
        Worker {
            bus,
            pid1,
            dead: None,
            pending: HashMap::new(),
            last_seen: HashMap::new(),
            handlers: Vec::new(),
            closing,
            tracked,
        }
    }

    /// The bus, unless the connection is gone.
    pub(super) fn bus(&self) -> Result<&Bus, BusError> {
        match &self.dead {
            Some(why) => Err(BusError::Disconnected { pid1: self.pid1, reason: why.clone() }),
            None => Ok(&self.bus),
        }
    }

    /// Calls `done` when the job at `job` is removed, or at `deadline`.
    pub(super) fn await_job(&mut self, job: String, unit: &str, deadline: Instant, done: JobDone) {
        self.pending.insert(job, PendingJob { unit: unit.to_string(), deadline, done });
    }

    pub(super) fn fd(&self) -> i32 {
        self.bus.fd()
    }

    /// poll(2) events to wait for (none once the connection is gone).
    pub(super) fn events(&self) -> i16 {
        if self.dead.is_some() { 0 } else { self.bus.events().unwrap_or(libc::POLLIN) }
    }

    pub(super) fn is_dead(&self) -> bool {
        self.dead.is_some()
    }

    pub(super) fn pid1(&self) -> i32 {
        self.pid1
    }

    pub(super) fn add_handler(&mut self, h: Handler) {
        self.handlers.push(h);
    }

    pub(super) fn last_seen(&self, unit: &str) -> Option<UnitStatus> {
        self.last_seen.get(unit).map(|s| UnitStatus { loaded: false, ..s.clone() })
    }

    pub(super) fn forget(&mut self, unit: &str) {
        self.last_seen.remove(unit);
    }

    /// Reads and handles everything the bus has queued, without blocking.
    pub(super) fn pump(&mut self) {
        while self.dead.is_none() {
            match self.bus.process() {
                Ok((progress, msg)) => {
                    if let Some(m) = msg {
                        self.on_message(m);
                    }
                    if !progress {
                        break;
                    }
                }
                Err(e) => self.die(e.to_string()),
            }
        }
    }

    fn die(&mut self, why: String) {
        // a pod being stopped, or one whose systemd is gone, closes its bus
        let gone = !std::path::Path::new(&format!("/proc/{}", self.pid1)).exists();
        if self.closing.load(Ordering::Relaxed) || gone {
            tracing::debug!(pid1 = self.pid1, "pod bus closed as the pod stops: {why}");
        } else {
            tracing::warn!(pid1 = self.pid1, "pod bus disconnected: {why}");
        }
        self.dead = Some(why);
        for (_, p) in std::mem::take(&mut self.pending) {
            let err = self.bus().err().unwrap_or(BusError::Disconnected { pid1: self.pid1, reason: String::new() });
            (p.done)(self, Err(err));
        }
    }

    fn on_message(&mut self, mut m: Message) {
        if !m.is_signal() {
            return;
        }
        let (iface, member) = (m.interface().unwrap_or_default(), m.member().unwrap_or_default());
        let handled = match (iface.as_str(), member.as_str()) {
            (MANAGER_IFACE, "JobRemoved") => self.on_job_removed(&mut m),
            ("org.freedesktop.DBus.Properties", "PropertiesChanged") => self.on_properties_changed(&mut m),
            (MANAGER_IFACE, "UnitRemoved") => m.read_str(b's').map(|unit| {
                if let Some(s) = self.last_seen.get_mut(&unit) {
                    s.loaded = false;
                }
                self.emit(BusEvent::UnitRemoved { unit });
            }),
            ("org.freedesktop.DBus.Local", "Disconnected") => {
                self.die("the pod's systemd closed the connection".into());
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(e) = handled {
            tracing::debug!(pid1 = self.pid1, "unreadable {iface}.{member} signal: {e}");
        }
    }

    fn on_job_removed(&mut self, m: &mut Message) -> Result<(), SdError> {
        let id = m.read_u32()?;
        let job = m.read_str(b'o')?;
        let unit = m.read_str(b's')?;
        let result = m.read_str(b's')?;
        if let Some(p) = self.pending.remove(&job) {
            (p.done)(self, Ok(result.clone()));
        }
        self.emit(BusEvent::JobRemoved { id, job, unit, result });
        Ok(())
    }

    fn on_properties_changed(&mut self, m: &mut Message) -> Result<(), SdError> {
        let Some(unit) = m.path().as_deref().and_then(unit_name_from_path) else { return Ok(()) };
        if !unit.starts_with(self.tracked) {
            return Ok(());
        }
        let iface = m.read_str(b's')?;
        if iface != UNIT_IFACE && iface != SERVICE_IFACE {
            return Ok(());
        }
        let mut status = self.last_seen.get(&unit).cloned().unwrap_or_default();
        status.loaded = true;
        m.enter(b'a', "{sv}")?;
        while m.enter(b'e', "sv")? {
            let name = m.read_str(b's')?;
            status.apply(&name, m)?;
            m.exit()?;
        }
        m.exit()?;
        self.last_seen.insert(unit.clone(), status.clone());
        self.emit(BusEvent::UnitChanged { unit, status });
        Ok(())
    }

    fn emit(&mut self, ev: BusEvent) {
        self.handlers.retain_mut(|h| h(&ev));
    }

    /// Fails the waits whose deadline has passed; returns the next deadline.
    pub(super) fn expire(&mut self, now: Instant) -> Option<Instant> {
        let late: Vec<String> =
            self.pending.iter().filter(|(_, p)| p.deadline <= now).map(|(k, _)| k.clone()).collect();
        for job in late {
            if let Some(p) = self.pending.remove(&job) {
                (p.done)(self, Err(BusError::Timeout { unit: p.unit, job }));
            }
        }
        self.pending.values().map(|p| p.deadline).min()
    }
}
