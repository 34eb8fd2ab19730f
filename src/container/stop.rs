//! StopContainer: the app's unit stopped over the pod's bus with the
//! container's stop signal, SIGKILL after the grace period; a host-PID app,
//! which the pod's systemd cannot see, is signalled itself first.

use super::{ContainerError, Target, app_cgroup, meta, open, unit, with_unit_bus};
use crate::runtime::{EventKind, Runtime};
use crate::stage1::app::{self, AppPaths, AppState};
use crate::stage1::bus::{BusError, UnitBus, UnitStatus};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Stops container `id` (see [`stop_app`]): `timeout` is the grace period.
pub(crate) async fn stop(rt: &std::sync::Arc<Runtime>, id: &str, timeout: Duration) -> Result<(), ContainerError> {
    let t = open(rt, id)?;
    tokio::task::block_in_place(|| stop_app(rt, &t, timeout))?;
    rt.warm_later(t.pod.uuid());
    Ok(())
}

/// Stops an app's unit: its stop signal (SIGTERM unless the container or its
/// image named another; the unit's KillSignal), SIGKILL once `timeout`
/// passed (at once for 0); records the exit code. A created, exited or pod-less app is a no-op.
pub(super) fn stop_app(rt: &Runtime, t: &Target, timeout: Duration) -> Result<(), ContainerError> {
    let paths = AppPaths::new(&t.pod, &t.app.name);
    if !t.running || app::facts(&paths, true).state != AppState::Running {
        return Ok(());
    }
    let name = unit(&t.app.name);
    let first_signal = if timeout.is_zero() { libc::SIGKILL } else { meta::stop_signal(&t.app).0 };
    app::mark_stopping(&paths, first_signal).map_err(|e| ContainerError::Internal(e.to_string()))?;
    if meta::pid_namespace(&t.app) == meta::PidNamespace::Host {
        stop_host_app(t, &paths, first_signal, timeout);
    }
    with_unit_bus(rt, &t.pod, |bus| {
        let status = stop_unit(bus, &name, timeout)?;
        if status.as_ref().is_some_and(|s| s.result == "oom-kill") {
            let _ = app::record_oom_kill(&paths);
        }
        if let Some(exit) = status.and_then(|s| s.main_exit())
            && app::record_exit(&paths, crate::stage1::bus::exit_code(&exit)).unwrap_or(false)
        {
            rt.emit(t.pod.uuid(), &t.app.name, EventKind::Stopped);
        }
        Ok(())
    })
}

/// The bus calls that stop unit `name` with grace period `timeout`: SIGKILL
/// first for 0, then StopUnit; a stop job that does not finish in time is
/// followed by SIGKILL and a second StopUnit of 10 s; a unit that is not
/// loaded, before any of these calls or between two of them (its app ended,
/// or the pod's systemd finished stopping it, meanwhile), is stopped
/// already. Returns the unit's status afterwards, if it can be read.
pub(super) fn stop_unit(bus: &dyn UnitBus, name: &str, timeout: Duration) -> Result<Option<UnitStatus>, BusError> {
    let stopped = (|| {
        if timeout.is_zero() {
            bus.kill_unit(name, libc::SIGKILL)?;
        }
        match bus.stop_unit(name, timeout.max(Duration::from_millis(1))) {
            Err(BusError::Timeout { .. }) => {
                bus.kill_unit(name, libc::SIGKILL)?;
                bus.stop_unit(name, Duration::from_secs(10))
            }
            other => other,
        }
    })();
    match stopped {
        Err(e) if e.is_not_found() => {}
        other => other?,
    }
    // a crash here leaves the exit unrecorded: the restarted daemon reads
    // it from the pod's systemd (reconcile), a repeated stop is a no-op
    crate::base::fault::point("stop-before-record");
    Ok(bus.unit_status(name).ok())
}

/// Stops a host-PID app (which the pod's systemd cannot see) before its
/// unit: the stop signal through a pidfd (no reused pid is signalled),
/// SIGKILL once `timeout` passed; then waits a moment for the log writer to
/// record its exit. Nothing to do when it is not running.
fn stop_host_app(t: &Target, paths: &AppPaths, first_signal: i32, timeout: Duration) {
    let procs = app_cgroup(&t.pod, &t.app.name).map(|cg| cg.unit_processes()).unwrap_or_default();
    let Some(pid) = crate::stage1::appexec::host_app_pid(app::host_app(paths), &procs) else { return };
    let Ok(pidfd) = crate::base::sys::pidfd_open(pid) else { return };
    // opened, then checked: still a process of the unit, not a reused pid
    let cgroup = app_cgroup(&t.pod, &t.app.name);
    if !cgroup.is_some_and(|cg| cg.unit_processes().contains(&pid)) {
        return;
    }
    // (a process already gone needs no signal)
    let signal = |sig: i32| {
        let _ = crate::base::sys::pidfd_send_signal(pidfd.as_raw_fd(), sig);
    };
    let exited_within = |wait: Duration| {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds = [PollFd::new(std::os::fd::AsFd::as_fd(&pidfd), PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(wait.as_millis().min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX);
        matches!(poll(&mut fds, ms), Ok(n) if n > 0)
    };
    if first_signal != libc::SIGKILL {
        signal(first_signal);
    }
    if first_signal == libc::SIGKILL || !exited_within(timeout) {
        signal(libc::SIGKILL);
        exited_within(Duration::from_secs(10));
    }
    // the writer reaps it and records the exit first, then ends the unit
    for _ in 0..200 {
        if paths.status_file("").exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::warn!(app = %t.app.name, "the log writer recorded no exit for a host-PID app");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage1::bus::testing::{Call, FakeBus};

    fn timeout(unit: &str) -> BusError {
        BusError::Timeout { unit: unit.into(), job: "stop".into() }
    }

    #[test]
    fn a_grace_period_is_a_stop_job_of_that_length() {
        let bus = FakeBus::default();
        let status = stop_unit(&bus, "a.service", Duration::from_secs(30)).expect("stopped");
        assert_eq!(
            bus.calls(),
            [Call::Stop("a.service".into(), Duration::from_secs(30)), Call::Status("a.service".into())]
        );
        assert_eq!(status, Some(UnitStatus::default()));
    }

    #[test]
    fn no_grace_period_kills_first() {
        let bus = FakeBus::default();
        stop_unit(&bus, "a.service", Duration::ZERO).expect("stopped");
        assert_eq!(
            bus.calls(),
            [
                Call::Kill("a.service".into(), libc::SIGKILL),
                Call::Stop("a.service".into(), Duration::from_millis(1)),
                Call::Status("a.service".into()),
            ]
        );
    }

    #[test]
    fn a_stop_job_out_of_time_is_followed_by_sigkill() {
        let bus = FakeBus::default();
        bus.fail_stop(timeout("a.service"));
        stop_unit(&bus, "a.service", Duration::from_secs(2)).expect("stopped");
        assert_eq!(
            bus.calls(),
            [
                Call::Stop("a.service".into(), Duration::from_secs(2)),
                Call::Kill("a.service".into(), libc::SIGKILL),
                Call::Stop("a.service".into(), Duration::from_secs(10)),
                Call::Status("a.service".into()),
            ]
        );
    }

    #[test]
    fn a_unit_gone_before_its_sigkill_is_stopped() {
        // the grace period ran out, and the unit went before the SIGKILL
        // (the stop job systemd ran meanwhile ended it: StopContainer once
        // failed with NotFound so in the VM lane)
        let bus = FakeBus::default();
        bus.fail_stop(timeout("a.service"));
        bus.fail_kill(BusError::NoSuchUnit("a.service".into()));
        stop_unit(&bus, "a.service", Duration::from_secs(2)).expect("stopped");
        let bus = FakeBus::default();
        bus.fail_kill(BusError::NoSuchUnit("a.service".into()));
        stop_unit(&bus, "a.service", Duration::ZERO).expect("stopped");
    }

    #[test]
    fn a_unit_not_loaded_is_stopped_and_other_failures_are_not() {
        let bus = FakeBus::default();
        bus.fail_stop(BusError::NoSuchUnit("a.service".into()));
        assert!(stop_unit(&bus, "a.service", Duration::from_secs(1)).is_ok());
        let bus = FakeBus::default();
        bus.fail_stop(BusError::JobFailed {
            op: "StopUnit",
            unit: "a.service".into(),
            result: "failed".into(),
            detail: String::new(),
        });
        assert!(matches!(stop_unit(&bus, "a.service", Duration::from_secs(1)), Err(BusError::JobFailed { .. })));
        // nothing read after a failed stop
        assert_eq!(bus.calls(), [Call::Stop("a.service".into(), Duration::from_secs(1))]);
    }
}
