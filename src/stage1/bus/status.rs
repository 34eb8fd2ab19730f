//! A unit's state as the containers layer needs it (state, main pid, how the
//! main process ended, when it started and ended), read with Properties.Get
//! or folded in from PropertiesChanged signals.

use super::sdbus::{Bus, Message, SdResult};

/// `si_code` values systemd reports in ExecMainCode.
const CLD_EXITED: i32 = 1;
const CLD_KILLED: i32 = 2;
const CLD_DUMPED: i32 = 3;

pub(crate) const UNIT_IFACE: &str = "org.freedesktop.systemd1.Unit";
pub(crate) const SERVICE_IFACE: &str = "org.freedesktop.systemd1.Service";
const PROPERTIES_IFACE: &str = "org.freedesktop.DBus.Properties";

/// A unit's state and its main process's fate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitStatus {
    /// `active`, `activating`, `deactivating`, `inactive`, `failed`, ...
    pub active_state: String,
    /// Service state: `running`, `exited`, `dead`, `failed`, ...
    pub sub_state: String,
    /// Host-invisible pid in the pod's PID namespace; 0 when not running.
    pub main_pid: u32,
    /// `si_code` of the main process: 1 exited, 2 killed, 3 dumped; 0 not yet.
    pub exec_main_code: i32,
    /// Exit code, or signal number when killed.
    pub exec_main_status: i32,
    /// Realtime µs since the epoch; 0 when unknown.
    pub exec_main_start_us: u64,
    pub exec_main_exit_us: u64,
    /// The service's `Result`: `success`, `exit-code`, `signal`, `oom-kill`, ...
    pub result: String,
    /// False when the unit was unloaded and this is the last state seen in
    /// a signal (systemd forgets inactive units).
    pub loaded: bool,
}

/// How the main process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MainExit {
    Exited(i32),
    Killed(i32),
    Dumped(i32),
}

/// What a unit's whole status is read from (`UnitStatus::read`).
pub(crate) const ALL_PROPERTIES: [(&str, &str); 8] = [
    (UNIT_IFACE, "ActiveState"),
    (UNIT_IFACE, "SubState"),
    (SERVICE_IFACE, "MainPID"),
    (SERVICE_IFACE, "ExecMainCode"),
    (SERVICE_IFACE, "ExecMainStatus"),
    (SERVICE_IFACE, "ExecMainStartTimestamp"),
    (SERVICE_IFACE, "ExecMainExitTimestamp"),
    (SERVICE_IFACE, "Result"),
];

/// Enough to tell whether a unit is active (`UnitStatus::is_active`).
pub(crate) const ACTIVITY: [(&str, &str); 1] = [(UNIT_IFACE, "ActiveState")];

impl UnitStatus {
    pub fn main_exit(&self) -> Option<MainExit> {
        match self.exec_main_code {
            CLD_EXITED => Some(MainExit::Exited(self.exec_main_status)),
            CLD_KILLED => Some(MainExit::Killed(self.exec_main_status)),
            CLD_DUMPED => Some(MainExit::Dumped(self.exec_main_status)),
            _ => None,
        }
    }

    /// Running, or on its way up or down.
    pub fn is_active(&self) -> bool {
        matches!(self.active_state.as_str(), "active" | "activating" | "deactivating" | "reloading")
    }

    /// Folds one property of a PropertiesChanged signal in; the value is the
    /// next item of `m` (a variant), skipped when it is not one we keep.
    pub(crate) fn apply(&mut self, name: &str, m: &mut Message) -> SdResult<()> {
        match name {
            "ActiveState" | "SubState" => {
                m.enter(b'v', "s")?;
                let v = m.read_str(b's')?;
                m.exit()?;
                if name == "ActiveState" { self.active_state = v } else { self.sub_state = v }
            }
            "Result" => {
                m.enter(b'v', "s")?;
                self.result = m.read_str(b's')?;
                m.exit()?;
            }
            "MainPID" => {
                m.enter(b'v', "u")?;
                self.main_pid = m.read_u32()?;
                m.exit()?;
            }
            "ExecMainCode" | "ExecMainStatus" => {
                m.enter(b'v', "i")?;
                let v = m.read_i32()?;
                m.exit()?;
                if name == "ExecMainCode" { self.exec_main_code = v } else { self.exec_main_status = v }
            }
            "ExecMainStartTimestamp" | "ExecMainExitTimestamp" => {
                m.enter(b'v', "t")?;
                let v = m.read_u64()?;
                m.exit()?;
                if name == "ExecMainStartTimestamp" { self.exec_main_start_us = v } else { self.exec_main_exit_us = v }
            }
            _ => m.skip("v")?,
        }
        Ok(())
    }

    /// Reads the status of the unit at object `path` with one Get per
    /// property of `props` ([`ALL_PROPERTIES`], [`ACTIVITY`]); the others
    /// stay at their defaults.
    pub(crate) fn read(bus: &Bus, path: &str, props: &[(&str, &str)], timeout_us: u64) -> SdResult<UnitStatus> {
        let mut s = UnitStatus { loaded: true, ..Default::default() };
        for &(iface, name) in props {
            let mut reply = get_property(bus, path, iface, name, timeout_us)?;
            s.apply(name, &mut reply)?;
        }
        Ok(s)
    }
}

/// `org.freedesktop.DBus.Properties.Get`; the reply's next item is the variant.
pub(crate) fn get_property(bus: &Bus, path: &str, iface: &str, name: &str, timeout_us: u64) -> SdResult<Message> {
    let mut m = bus.method_call(path, PROPERTIES_IFACE, "Get")?;
    m.append(super::sdbus::Basic::Str(iface))?;
    m.append(super::sdbus::Basic::Str(name))?;
    bus.call(&m, timeout_us)
}

/// The unit name of an object path `/org/freedesktop/systemd1/unit/<escaped>`
/// (bus label escaping: `_xx` is the byte 0xxx).
pub(crate) fn unit_name_from_path(path: &str) -> Option<String> {
    let label = path.strip_prefix("/org/freedesktop/systemd1/unit/")?;
    let b = label.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'_' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_paths_unescape() {
        assert_eq!(
            unit_name_from_path("/org/freedesktop/systemd1/unit/app1_2eservice").as_deref(),
            Some("app1.service")
        );
        assert_eq!(
            unit_name_from_path("/org/freedesktop/systemd1/unit/a_2db_2eservice").as_deref(),
            Some("a-b.service")
        );
        assert_eq!(unit_name_from_path("/org/freedesktop/systemd1/job/12"), None);
        assert_eq!(unit_name_from_path("/org/freedesktop/systemd1/unit/bad_2"), None);
    }

    #[test]
    fn exits_are_classified() {
        let s = |code, status| UnitStatus { exec_main_code: code, exec_main_status: status, ..Default::default() };
        assert_eq!(s(1, 7).main_exit(), Some(MainExit::Exited(7)));
        assert_eq!(s(2, 15).main_exit(), Some(MainExit::Killed(15)));
        assert_eq!(s(3, 11).main_exit(), Some(MainExit::Dumped(11)));
        assert_eq!(s(0, 0).main_exit(), None);
        let active = UnitStatus { active_state: "deactivating".into(), ..Default::default() };
        assert!(active.is_active());
    }
}
