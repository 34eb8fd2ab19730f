//! A [`UnitBus`] for unit tests: records the calls made on it and answers
//! each as told (success by default), without a pod or its systemd.

use super::{BusError, Property, UnitBus, UnitStatus};
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// A call made on a [`FakeBus`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Call {
    /// The unit and its properties as `Name=value` (the value's Debug text).
    SetProperties(String, Vec<String>),
    Stop(String, Duration),
    Kill(String, i32),
    Status(String),
}

/// Records calls; the failures queued with `fail_*` answer the next calls of that kind.
#[derive(Debug, Default)]
pub(crate) struct FakeBus {
    calls: Mutex<Vec<Call>>,
    stop_failures: Mutex<Vec<BusError>>,
    kill_failures: Mutex<Vec<BusError>>,
    set_failures: Mutex<Vec<BusError>>,
    /// What UnitStatus answers (the default status when unset).
    status: Mutex<Option<UnitStatus>>,
}

impl FakeBus {
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The next StopUnit fails with `e`.
    pub(crate) fn fail_stop(&self, e: BusError) {
        self.stop_failures.lock().unwrap().push(e);
    }

    /// The next KillUnit fails with `e`.
    pub(crate) fn fail_kill(&self, e: BusError) {
        self.kill_failures.lock().unwrap().push(e);
    }

    /// The next SetUnitProperties fails with `e`.
    pub(crate) fn fail_set(&self, e: BusError) {
        self.set_failures.lock().unwrap().push(e);
    }

    /// UnitStatus answers `s` from now on.
    pub(crate) fn set_status(&self, s: UnitStatus) {
        *self.status.lock().unwrap() = Some(s);
    }

    fn record(&self, c: Call) {
        self.calls.lock().unwrap().push(c);
    }
}

fn next(failures: &Mutex<Vec<BusError>>) -> Result<(), BusError> {
    let mut f = failures.lock().unwrap();
    if f.is_empty() { Ok(()) } else { Err(f.remove(0)) }
}

impl UnitBus for FakeBus {
    fn set_unit_properties(&self, name: &str, props: Vec<Property>) -> Result<(), BusError> {
        let props = props
            .iter()
            .map(|p| {
                let mut s = format!("{}=", p.name);
                let _ = write!(s, "{:?}", p.value);
                s
            })
            .collect();
        self.record(Call::SetProperties(name.into(), props));
        next(&self.set_failures)
    }
    fn stop_unit(&self, name: &str, timeout: Duration) -> Result<(), BusError> {
        self.record(Call::Stop(name.into(), timeout));
        next(&self.stop_failures)
    }
    fn kill_unit(&self, name: &str, signal: i32) -> Result<(), BusError> {
        self.record(Call::Kill(name.into(), signal));
        next(&self.kill_failures)
    }
    fn unit_status(&self, name: &str) -> Result<UnitStatus, BusError> {
        self.record(Call::Status(name.into()));
        Ok(self.status.lock().unwrap().clone().unwrap_or_default())
    }
}
