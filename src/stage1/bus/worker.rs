//! The per-pod bus thread: the only user of the pod's sd-bus connection.
//!
//! Runs in: one daemon thread per connected pod. Requests arrive as closures
//! over a channel (woken through an eventfd); the loop polls the bus fd and
//! the eventfd, runs requests, reads signals (JobRemoved completes waiting
//! requests, PropertiesChanged keeps the last state of each unit, both go to
//! subscribers) and fails waits that reach their deadline. A slow stop
//! therefore never blocks a status read of the same pod.

use super::BusError;
use super::sdbus::{Bus, Message, SdError};
use super::status::{SERVICE_IFACE, UNIT_IFACE, UnitStatus, unit_name_from_path};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

pub(super) const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
pub(super) const MANAGER_IFACE: &str = "org.freedesktop.systemd1.Manager";

/// A request: runs on the worker thread with the worker.
pub(super) type Request = Box<dyn FnOnce(&mut Worker) + Send>;
/// What to do when a job ends: its result string (`done`, `failed`, ...) or why the wait ended.
pub(super) type JobDone = Box<dyn FnOnce(&mut Worker, Result<String, BusError>) + Send>;

/// What runs on the bus thread for each event it reads (see
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
    fn expire(&mut self, now: Instant) -> Option<Instant> {
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

/// The worker loop; returns when the request channel closes (PodBus dropped).
pub(super) fn run(mut w: Worker, requests: Receiver<Request>, wake: Arc<OwnedFd>) {
    loop {
        loop {
            match requests.try_recv() {
                Ok(req) => req(&mut w),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
        w.pump();
        let next = w.expire(Instant::now());
        let timeout_ms = next.map_or(-1, |d| {
            let left = d.saturating_duration_since(Instant::now()) + Duration::from_micros(999);
            i32::try_from(left.as_millis()).unwrap_or(i32::MAX)
        });
        let bus_events = if w.dead.is_none() { w.bus.events().unwrap_or(libc::POLLIN) } else { 0 };
        let mut fds = [
            libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: if w.dead.is_none() { w.bus.fd() } else { -1 }, events: bus_events, revents: 0 },
        ];
        // SAFETY: poll(2) on an array we own, with its length.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            w.die(format!("poll: {}", std::io::Error::last_os_error()));
        }
        if fds[0].revents != 0 {
            drain_eventfd(&wake);
        }
    }
}

/// Wakes the worker (eventfd write; a full counter still wakes it).
pub(super) fn wake(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: write(2) of 8 bytes from a local buffer to an eventfd we own.
    let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
}

fn drain_eventfd(fd: &OwnedFd) {
    let mut buf = [0u8; 8];
    // SAFETY: read(2) of 8 bytes into a local buffer from a non-blocking eventfd we own.
    let _ = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
}
