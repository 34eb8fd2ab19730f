//! `PodBus`: the daemon's control channel to a pod's systemd over its
//! private socket (`/run/systemd/private`), with libsystemd's sd-bus.
//!
//! Connected once per pod (fork, setns into the pod's PID namespace, fork,
//! connect, `_exit`; no exec, see `connect`), then used for transient app
//! units (`StartTransientUnit`: no unit files, no daemon-reload), stops,
//! kills and status reads.
//!
//! Threads: sd-bus objects are not thread-safe, so each pod's connection
//! (`worker`) sits behind a lock. A request runs on the caller's thread with
//! the lock held; one daemon thread waits on every pod's connection and
//! reads their signals (`reactor`). The methods here are blocking and
//! `Send + Sync`: the daemon calls them from `spawn_blocking`. Requests to
//! one pod run one at a time, but waiting for a job does not hold up the
//! pod's other requests.

mod connect;
mod reactor;
pub(crate) mod sdbus;
pub(crate) mod spec;
pub(crate) mod status;
#[cfg(test)]
pub(crate) mod testing;
mod worker;

pub use spec::{BindPath, ExecCommand, Output, Property, ServiceSpec, Value};
pub use status::{MainExit, UnitStatus};
pub use worker::BusEvent;

use sdbus::{Basic, Bus, SdError};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use worker::{MANAGER_IFACE, MANAGER_PATH, Worker};

/// The daemon's units on the node's systemd (`rktlet-<uuid>.service`).
const NODE_UNIT_PREFIX: &str = "rktlet-";
/// Bound of one method call to the pod's systemd.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound of a start job (Type=exec: until the app's execve).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of the pod bus; each names the unit or pod it concerns.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("cannot connect to the systemd of pod process {pid1}: {source}")]
    Connect { pid1: i32, source: io::Error },
    #[error("pod process {pid1}: connection to its systemd lost: {reason}")]
    Disconnected { pid1: i32, reason: String },
    #[error("unit {0} is not loaded in the pod")]
    NoSuchUnit(String),
    #[error("unit {0} already exists in the pod (reset it first)")]
    UnitExists(String),
    #[error("{op} of unit {unit} failed: job {result}{detail}")]
    JobFailed { op: &'static str, unit: String, result: String, detail: String },
    #[error("unit {unit}: job {job} did not finish in time")]
    Timeout { unit: String, job: String },
    #[error("{op} of unit {unit}: {source}")]
    Call { op: &'static str, unit: String, source: SdError },
}

impl std::error::Error for SdError {}

impl BusError {
    /// Maps systemd's error replies to the cases callers branch on.
    fn from_call(op: &'static str, unit: &str, e: SdError) -> BusError {
        match &e {
            SdError::Reply { name, .. } if name == "org.freedesktop.systemd1.NoSuchUnit" => {
                BusError::NoSuchUnit(unit.into())
            }
            SdError::Reply { name, .. } if name == "org.freedesktop.systemd1.UnitExists" => {
                BusError::UnitExists(unit.into())
            }
            _ => BusError::Call { op, unit: unit.into(), source: e },
        }
    }

    /// True when the unit is unknown to the pod's systemd.
    pub fn is_not_found(&self) -> bool {
        matches!(self, BusError::NoSuchUnit(_))
    }
}

/// The unit calls the container verbs make on a pod's systemd: [`PodBus`]
/// makes them; a test gives a fake that records them (the seam the verbs'
/// unit tests go through, as youki's `Syscall`).
pub(crate) trait UnitBus {
    /// Sets properties of a running unit (`SetUnitProperties`, runtime only).
    fn set_unit_properties(&self, name: &str, props: Vec<Property>) -> Result<(), BusError>;
    /// Stops a unit and waits up to `timeout` for its job.
    fn stop_unit(&self, name: &str, timeout: Duration) -> Result<(), BusError>;
    /// Sends `signal` to all of a unit's processes.
    fn kill_unit(&self, name: &str, signal: i32) -> Result<(), BusError>;
    /// A unit's state and its main process's fate.
    fn unit_status(&self, name: &str) -> Result<UnitStatus, BusError>;
}

impl UnitBus for PodBus {
    fn set_unit_properties(&self, name: &str, props: Vec<Property>) -> Result<(), BusError> {
        PodBus::set_unit_properties(self, name, props)
    }
    fn stop_unit(&self, name: &str, timeout: Duration) -> Result<(), BusError> {
        PodBus::stop_unit(self, name, timeout)
    }
    fn kill_unit(&self, name: &str, signal: i32) -> Result<(), BusError> {
        PodBus::kill_unit(self, name, signal)
    }
    fn unit_status(&self, name: &str) -> Result<UnitStatus, BusError> {
        PodBus::unit_status(self, name)
    }
}

/// A connection to one pod's systemd.
pub struct PodBus {
    pid1: i32,
    /// Set when the pod is being stopped: its systemd closing the
    /// connection is then expected, not a fault.
    closing: Arc<std::sync::atomic::AtomicBool>,
    shared: Arc<reactor::Shared>,
}

impl PodBus {
    /// Connects to the systemd whose host pid is `pod_pid1`; the pod bus
    /// thread watches the connection from then on.
    pub fn connect(pod_pid1: i32) -> Result<PodBus, BusError> {
        let fd = connect::connect_private(pod_pid1).map_err(|source| BusError::Connect { pid1: pod_pid1, source })?;
        Self::start(fd, pod_pid1, "")
    }

    /// Connects to the node's own systemd (the daemon's PID 1), whose
    /// private socket it reaches directly: the sandbox units of a systemd
    /// node are started and forgotten there without exec'ing `systemd-run`
    /// or `systemctl` (each a process start and a bus handshake per call).
    pub(crate) fn connect_node() -> Result<PodBus, BusError> {
        let err = |source| BusError::Connect { pid1: 1, source };
        let stream = std::os::unix::net::UnixStream::connect(format!("/{}", connect::PRIVATE_SOCKET)).map_err(err)?;
        Self::start(OwnedFd::from(stream), 1, NODE_UNIT_PREFIX)
    }

    /// Starts a bus on a connected socket to the systemd `pid1` and hands it
    /// to the pod bus thread, keeping the state of the units named
    /// `tracked...` from its signals.
    fn start(fd: OwnedFd, pod_pid1: i32, tracked: &'static str) -> Result<PodBus, BusError> {
        let err = |source| BusError::Connect { pid1: pod_pid1, source };
        let bus = Bus::start_on_fd(fd).map_err(|e| err(io::Error::other(e)))?;
        // signals reach direct connections anyway; Subscribe makes it explicit
        let subscribe =
            bus.method_call(MANAGER_PATH, MANAGER_IFACE, "Subscribe").and_then(|m| bus.call(&m, us(CALL_TIMEOUT)));
        if let Err(e) = subscribe {
            tracing::debug!(pid1 = pod_pid1, "Subscribe: {e}");
        }
        let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let w = Worker::new(bus, pod_pid1, Arc::clone(&closing), tracked);
        let shared = reactor::register(w).map_err(err)?;
        Ok(PodBus { pid1: pod_pid1, closing, shared })
    }

    pub(crate) fn pid1(&self) -> i32 {
        self.pid1
    }

    /// Says the pod is being stopped: the disconnect that follows is
    /// logged at debug, not as a fault.
    pub(crate) fn expect_close(&self) {
        self.closing.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Starts the transient service `spec` and waits for its start job.
    pub fn start_transient_service(&self, spec: &ServiceSpec) -> Result<(), BusError> {
        let (props, op) = start_of(spec)?;
        self.start_unit_as(&spec.name, props, op)
    }

    /// `StartTransientUnit` of a `Type=notify` unit, then waits until it is
    /// ready: a main process that ends first failed to start, whatever its
    /// exit (unlike an app's, whose quick exit is its own business).
    pub(crate) fn start_notify_unit(&self, name: &str, props: Vec<Property>) -> Result<(), BusError> {
        self.start_unit_as(name, props, "start (until ready)")
    }

    /// [`Self::start_transient_service`] for a unit whose program says it
    /// has started through a FIFO (appexec's `started=`) as well as by
    /// telling systemd: returns as soon as `started`, the FIFO's read end
    /// (opened non-blocking), has something to read, without waiting for
    /// the pod's systemd to take in the notification and end the job
    /// (what StartContainer would otherwise wait for: systemd, this bus
    /// thread and a hand-over to the caller's thread).
    /// Whichever comes first decides: a job that ends first (it failed,
    /// or systemd was quicker) as it does without the FIFO. A job still
    /// running when this returns ends on its own; a stop replaces it.
    pub(crate) fn start_transient_service_or_started(
        &self,
        spec: &ServiceSpec,
        started: BorrowedFd<'_>,
    ) -> Result<(), BusError> {
        let (props, op) = start_of(spec)?;
        // the job's end wakes this thread through a socket pair, as the FIFO
        // does (a socket: the write after the caller went on fails with
        // MSG_NOSIGNAL instead of raising SIGPIPE, which the CLI does not ignore)
        let (wake_r, wake_w) = std::os::unix::net::UnixStream::pair().map_err(|e| BusError::Call {
            op: "StartTransientUnit",
            unit: spec.name.clone(),
            source: SdError::Errno { op: "a socket pair", errno: e.raw_os_error().unwrap_or(libc::EMFILE) },
        })?;
        let (tx, rx) = mpsc::channel();
        let reply = move |r| {
            send(tx, r);
            let _ = nix::sys::socket::send(wake_w.as_raw_fd(), b"j", nix::sys::socket::MsgFlags::MSG_NOSIGNAL);
        };
        self.begin_start(spec.name.clone(), props, op, reply).ok_or_else(|| self.gone())?;
        // (the pod bus thread answers by the job's deadline, or drops the reply when the bus closes)
        match wait_readable(started, wake_r.as_fd(), START_TIMEOUT + CALL_TIMEOUT) {
            Readable::First => Ok(()),
            // the reply was sent before the wake-up, or dropped: no wait here
            Readable::Second => rx.recv().map_err(|_| self.gone())?,
            Readable::Neither => Err(BusError::Timeout { unit: spec.name.clone(), job: "StartTransientUnit".into() }),
        }
    }

    fn start_unit_as(&self, name: &str, props: Vec<Property>, op: &'static str) -> Result<(), BusError> {
        let (tx, rx) = mpsc::channel();
        self.begin_start(name.to_string(), props, op, move |r| send(tx, r)).ok_or_else(|| self.gone())?;
        rx.recv().map_err(|_| self.gone())?
    }

    /// The error of a call on a closed bus.
    fn gone(&self) -> BusError {
        BusError::Disconnected { pid1: self.pid1, reason: "the pod bus is closed".into() }
    }

    /// Sends `StartTransientUnit` (from this thread, holding the bus) and
    /// has `reply` called with the job's end, by the pod bus thread that
    /// reads it, or here with the call's failure. None: the bus is closed.
    fn begin_start(
        &self,
        unit: String,
        props: Vec<Property>,
        op: &'static str,
        reply: impl FnOnce(Result<(), BusError>) + Send + 'static,
    ) -> Option<()> {
        reactor::with(&self.shared, move |w| {
            let started = (|| {
                let bus = w.bus()?;
                let call = |e| BusError::from_call("StartTransientUnit", &unit, e);
                let mut m = bus.method_call(MANAGER_PATH, MANAGER_IFACE, "StartTransientUnit").map_err(call)?;
                m.append(Basic::Str(&unit)).map_err(call)?;
                m.append(Basic::Str("fail")).map_err(call)?;
                spec::append_properties(&mut m, &props).map_err(call)?;
                m.open(b'a', "(sa(sv))").and_then(|()| m.close()).map_err(call)?;
                let mut r = bus.call(&m, us(CALL_TIMEOUT)).map_err(call)?;
                r.read_str(b'o').map_err(call)
            })();
            reply_when_done(w, started, op, unit, Instant::now() + START_TIMEOUT, reply)
        })
    }

    /// `SetUnitProperties(name, runtime=true, props)`: changes a running
    /// unit (its resource limits) until it stops.
    pub fn set_unit_properties(&self, name: &str, props: Vec<Property>) -> Result<(), BusError> {
        let unit = name.to_string();
        self.request(move |w, reply| {
            let r = (|| {
                let bus = w.bus()?;
                let call = |e| BusError::from_call("SetUnitProperties", &unit, e);
                let mut m = bus.method_call(MANAGER_PATH, MANAGER_IFACE, "SetUnitProperties").map_err(call)?;
                m.append(Basic::Str(&unit)).map_err(call)?;
                m.append(Basic::Bool(true)).map_err(call)?;
                spec::append_properties(&mut m, &props).map_err(call)?;
                bus.call(&m, us(CALL_TIMEOUT)).map(drop).map_err(call)
            })();
            send(reply, r)
        })
    }

    /// `StopUnit(name, "replace")` and waits up to `timeout` for the job.
    /// The time between SIGTERM and SIGKILL is the unit's TimeoutStopUSec.
    pub fn stop_unit(&self, name: &str, timeout: Duration) -> Result<(), BusError> {
        self.job_call("StopUnit", name, timeout)
    }

    /// `KillUnit(name, "all", signal)`: signals every process of the unit.
    pub fn kill_unit(&self, name: &str, signal: i32) -> Result<(), BusError> {
        let unit = name.to_string();
        self.request(move |w, reply| {
            let args = [Basic::Str(&unit), Basic::Str("all"), Basic::I32(signal)];
            send(reply, manager_call(w, "KillUnit", &unit, &args).map(drop))
        })
    }

    /// Makes the name reusable: stops the unit if it is still active, resets
    /// its failed state so systemd unloads it, and forgets its last status.
    /// A unit that is not loaded is already reset.
    pub fn reset_unit(&self, name: &str) -> Result<(), BusError> {
        // (only whether it is active: one property read, not all of its status)
        let unit = name.to_string();
        let activity = self.request(move |w, reply| send(reply, read_status_of(w, &unit, &status::ACTIVITY)));
        match activity {
            Ok(s) if s.loaded && s.is_active() => self.stop_unit(name, START_TIMEOUT)?,
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        self.reset_failed(name)
    }

    /// `ResetFailedUnit(name)`: a failed unit is unloaded (one that is not
    /// loaded is already reset).
    pub(crate) fn reset_failed(&self, name: &str) -> Result<(), BusError> {
        let unit = name.to_string();
        self.request(move |w, reply| {
            let r = match manager_call(w, "ResetFailedUnit", &unit, &[Basic::Str(&unit)]) {
                Err(e) if !e.is_not_found() => Err(e),
                _ => Ok(()),
            };
            // signals of a stop arrive before the reply: read them, then forget
            w.pump();
            w.forget(&unit);
            send(reply, r)
        })
    }

    /// The unit's state and its main process's exit. For a unit systemd has
    /// already unloaded (stopped, exited), the last state seen in signals,
    /// with `loaded == false`; `NoSuchUnit` if there is none.
    pub fn unit_status(&self, name: &str) -> Result<UnitStatus, BusError> {
        let unit = name.to_string();
        self.request(move |w, reply| send(reply, read_status(w, &unit)))
    }

    /// Runs `f` for each JobRemoved, unit PropertiesChanged and UnitRemoved
    /// signal from now on, until it returns false: a subscriber with no
    /// thread of its own. It runs on whichever thread reads the signal (the
    /// pod bus thread, or a caller of this pod's requests) with the pod's
    /// connection locked: `f` must be quick and must not call this `PodBus`.
    pub(crate) fn on_event(&self, f: impl FnMut(&BusEvent) -> bool + Send + 'static) -> Result<(), BusError> {
        let handler: worker::Handler = Box::new(f);
        self.request(move |w, reply| {
            w.add_handler(handler);
            send(reply, Ok(()))
        })
    }

    /// A stream of the pod's JobRemoved, unit PropertiesChanged and
    /// UnitRemoved signals from now on; dropping the receiver unsubscribes.
    pub fn subscribe(&self) -> Result<mpsc::Receiver<BusEvent>, BusError> {
        let (tx, rx) = mpsc::channel();
        self.on_event(move |ev| tx.send(ev.clone()).is_ok())?;
        Ok(rx)
    }

    /// A manager method `op(name, "replace")` returning a job, then waits for it.
    fn job_call(&self, op: &'static str, name: &str, timeout: Duration) -> Result<(), BusError> {
        let unit = name.to_string();
        self.request(move |w, reply| {
            let job = manager_call(w, op, &unit, &[Basic::Str(&unit), Basic::Str("replace")])
                .and_then(|mut r| r.read_str(b'o').map_err(|e| BusError::from_call(op, &unit, e)));
            reply_when_done(w, job, op, unit, Instant::now() + timeout, move |r| send(reply, r))
        })
    }

    /// Runs `f` with the pod's connection on this thread, then waits for
    /// what it sends back (at once, or when the job it waits for ends).
    fn request<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Worker, mpsc::Sender<Result<T, BusError>>) + Send + 'static,
    ) -> Result<T, BusError> {
        let (tx, rx) = mpsc::channel();
        reactor::with(&self.shared, move |w| f(w, tx)).ok_or_else(|| self.gone())?;
        rx.recv().map_err(|_| self.gone())?
    }
}

impl Drop for PodBus {
    fn drop(&mut self) {
        // closes the connection here; waits still pending fail
        reactor::close(&self.shared);
    }
}

impl std::fmt::Debug for PodBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodBus").field("pid1", &self.pid1).finish()
    }
}

/// `spec`'s properties, and the name its start goes by: a unit that says
/// when it is ready has not started if it ends before.
fn start_of(spec: &ServiceSpec) -> Result<(Vec<Property>, &'static str), BusError> {
    let props = spec.properties().map_err(|e| BusError::Call {
        op: "StartTransientUnit",
        unit: spec.name.clone(),
        source: SdError::Errno { op: "duplicating an fd", errno: e.raw_os_error().unwrap_or(libc::EBADF) },
    })?;
    Ok((props, if spec.notify_ready { "start (until ready)" } else { "start" }))
}

/// Which of two descriptors [`wait_readable`] found readable first.
#[derive(Debug, PartialEq, Eq)]
enum Readable {
    First,
    Second,
    Neither,
}

/// Waits until `first` has something to read, or `second` has or is hung
/// up, at most `timeout`; `first` wins a tie. A `first` hung up with
/// nothing to read (a FIFO's writer gone without a byte) is waited on no
/// longer.
fn wait_readable(first: BorrowedFd<'_>, second: BorrowedFd<'_>, timeout: Duration) -> Readable {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let deadline = Instant::now() + timeout;
    let mut first_open = true;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = u16::try_from(left.as_millis().min(10_000)).unwrap_or(10_000);
        let mut fds = vec![PollFd::new(second, PollFlags::POLLIN)];
        if first_open {
            fds.push(PollFd::new(first, PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(n) if n > 0 => {
                let first_said = fds.get(1).and_then(PollFd::revents).unwrap_or(PollFlags::empty());
                if first_said.intersects(PollFlags::POLLIN) {
                    return Readable::First;
                }
                if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                    return Readable::Second;
                }
                // (POLLHUP stays: polled again, it would wake this loop at once)
                first_open = false;
            }
            Ok(_) if left.is_zero() => return Readable::Neither,
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(_) => return Readable::Neither,
        }
    }
}

fn send<T>(reply: mpsc::Sender<Result<T, BusError>>, r: Result<T, BusError>) {
    // the caller may have gone; nothing to do then
    let _ = reply.send(r);
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Calls the manager method `op` about `unit` with `args`; returns the reply.
fn manager_call(w: &Worker, op: &'static str, unit: &str, args: &[Basic<'_>]) -> Result<sdbus::Message, BusError> {
    let bus = w.bus()?;
    let call = |e| BusError::from_call(op, unit, e);
    let mut m = bus.method_call(MANAGER_PATH, MANAGER_IFACE, op).map_err(call)?;
    for a in args {
        m.append(a.clone()).map_err(call)?;
    }
    bus.call(&m, us(CALL_TIMEOUT)).map_err(call)
}

/// Replies once the job `job` (when the call that made it succeeded) ends, or at `deadline`.
fn reply_when_done(
    w: &mut Worker,
    job: Result<String, BusError>,
    op: &'static str,
    unit: String,
    deadline: Instant,
    reply: impl FnOnce(Result<(), BusError>) + Send + 'static,
) {
    match job {
        Err(e) => reply(Err(e)),
        Ok(job) => {
            w.await_job(job, &unit.clone(), deadline, Box::new(move |w, res| reply(job_result(w, op, &unit, res))))
        }
    }
}

/// Turns a job's end into the request's result; a failed job says how the
/// main process ended (e.g. 203/EXEC: the program could not be executed).
fn job_result(w: &mut Worker, op: &'static str, unit: &str, res: Result<String, BusError>) -> Result<(), BusError> {
    let result = res?;
    if result == "done" {
        return Ok(());
    }
    let status = read_status(w, unit);
    // a start whose process ran and already ended (a short-lived app) did start:
    // its exit is the app's business, not a failure to start it
    if op == "start"
        && let Ok(s) = &status
        && match s.main_exit() {
            Some(MainExit::Exited(c)) => !(200..=245).contains(&c),
            Some(MainExit::Killed(_) | MainExit::Dumped(_)) => true,
            None => false,
        }
    {
        return Ok(());
    }
    let detail = match status {
        Ok(s) => match s.main_exit() {
            Some(MainExit::Exited(203)) => ": the program could not be executed (status 203/EXEC)".to_string(),
            Some(MainExit::Exited(c)) if (200..=245).contains(&c) => {
                format!(": systemd could not set up the process (status {c}, see systemd.exec(5))")
            }
            Some(e) => format!(": main process {e:?}"),
            None => format!(": unit is {}/{}", s.active_state, s.sub_state),
        },
        Err(_) => String::new(),
    };
    Err(BusError::JobFailed { op, unit: unit.into(), result, detail })
}

/// GetUnit + property reads; falls back to the last state seen in signals.
fn read_status(w: &mut Worker, unit: &str) -> Result<UnitStatus, BusError> {
    read_status_of(w, unit, &status::ALL_PROPERTIES)
}

/// [`read_status`] of the properties `props` only.
fn read_status_of(w: &mut Worker, unit: &str, props: &[(&str, &str)]) -> Result<UnitStatus, BusError> {
    let path = manager_call(w, "GetUnit", unit, &[Basic::Str(unit)])
        .and_then(|mut r| r.read_str(b'o').map_err(|e| BusError::from_call("GetUnit", unit, e)));
    match path {
        Ok(path) => {
            let bus = w.bus()?;
            UnitStatus::read(bus, &path, props, us(CALL_TIMEOUT))
                .map_err(|e| BusError::from_call("reading status", unit, e))
        }
        Err(e) if e.is_not_found() => {
            // signals sent before the unit was unloaded may still be queued
            w.pump();
            w.last_seen(unit).ok_or(e)
        }
        Err(e) => Err(e),
    }
}

/// An app's exit as CRI reports it: the exit code, or 128 + signal number.
pub(crate) fn exit_code(exit: &MainExit) -> i32 {
    match exit {
        MainExit::Exited(c) => *c,
        MainExit::Killed(s) | MainExit::Dumped(s) => 128 + s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wait behind [`PodBus::start_transient_service_or_started`]:
    /// the FIFO wins over the job when both are there, the job's wake-up
    /// (or its writer gone) ends the wait as well, a FIFO whose writer left
    /// without a byte is waited on no longer, and neither ends it at the
    /// timeout.
    #[test]
    fn a_start_waits_for_the_fifo_or_the_job() {
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let ((fifo_r, fifo_w), (job_r, job_w)) = (pipe(), pipe());
        let short = Duration::from_millis(20);
        let began = Instant::now();
        assert_eq!(wait_readable(fifo_r.as_fd(), job_r.as_fd(), short), Readable::Neither, "neither");
        assert!(began.elapsed() >= short, "waited for the timeout");
        nix::unistd::write(&job_w, b"j").expect("write");
        assert_eq!(wait_readable(fifo_r.as_fd(), job_r.as_fd(), START_TIMEOUT), Readable::Second, "the job");
        nix::unistd::write(&fifo_w, b"r").expect("write");
        assert_eq!(wait_readable(fifo_r.as_fd(), job_r.as_fd(), START_TIMEOUT), Readable::First, "both: the FIFO");
        let ((fifo_r, _fifo_w), (job_r, job_w)) = (pipe(), pipe());
        drop(job_w);
        assert_eq!(wait_readable(fifo_r.as_fd(), job_r.as_fd(), START_TIMEOUT), Readable::Second, "the reply dropped");
        // appexec killed between its open and its write: the job decides
        let ((fifo_r, fifo_w), (job_r, job_w)) = (pipe(), pipe());
        drop(fifo_w);
        let began = Instant::now();
        assert_eq!(wait_readable(fifo_r.as_fd(), job_r.as_fd(), short), Readable::Neither, "a hang-up is no start");
        assert!(began.elapsed() >= short, "and no busy end either");
        nix::unistd::write(&job_w, b"j").expect("write");
        assert_eq!(wait_readable(fifo_r.as_fd(), job_r.as_fd(), START_TIMEOUT), Readable::Second, "then the job");
    }
}
