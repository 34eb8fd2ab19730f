//! The properties of an app's transient service that come from its
//! container's settings: what `container::start` adds to the unit's
//! `stage1::bus::ServiceSpec` (and `container::resources` sets on a running
//! unit), as the pod's systemd takes them. Pure: values in, properties out.

use crate::cgroup::app::Limits;
use crate::cgroup::devices::Allowed;
use crate::stage1::bus::{Property, Value};

/// The seccomp filter: `SystemCallFilter=` (an allow list when `allow`, a
/// deny list otherwise) and, with an errno, `SystemCallErrorNumber=` (none:
/// a denied call kills the process, SIGSYS).
pub(crate) fn syscall_filter(allow: bool, entries: &[String], errno: Option<i32>) -> Vec<Property> {
    let mut p = vec![Property::new("SystemCallFilter", Value::FilterList(allow, entries.to_vec()))];
    if let Some(errno) = errno {
        p.push(Property::new("SystemCallErrorNumber", Value::I32(errno)));
    }
    p
}

/// `RestrictNamespaces=`: the namespace kinds (`CLONE_NEW*` bits) the app may make.
pub(crate) fn restrict_namespaces(allowed: u64) -> Property {
    Property::new("RestrictNamespaces", Value::U64(allowed))
}

/// Whether systemd takes `name=value` in a unit's `Environment=`: a name of
/// letters, digits and `_` not starting with a digit, a value without
/// control characters but tab and newline. Kubernetes allows more
/// (`data-1`, `a.b`): appexec puts those in place.
pub(crate) fn environment_takes(name: &str, value: &str) -> bool {
    let name_ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    name_ok && !value.chars().any(|c| c.is_control() && c != '\t' && c != '\n')
}

/// `KillSignal=`: only for a stop signal other than systemd's SIGTERM.
pub(crate) fn kill_signal(signal: i32) -> Option<Property> {
    (signal != libc::SIGTERM).then(|| Property::new("KillSignal", Value::I32(signal)))
}

/// On a host where the limits go through the pod's systemd (cgroup v2):
/// accounting on (the pod's systemd then keeps the controllers enabled
/// down to the app's cgroup, which the host writes) and the limits.
pub(crate) fn accounting_and_limits(l: &Limits) -> Vec<Property> {
    let mut p: Vec<Property> = ["MemoryAccounting", "CPUAccounting", "TasksAccounting", "IOAccounting"]
        .into_iter()
        .map(|name| Property::new(name, Value::Bool(true)))
        .collect();
    p.extend(limits(l));
    p
}

/// The devices the app may open, where the pod's systemd holds them (pure
/// cgroup v2: a BPF program on the unit's cgroup): `DevicePolicy=closed`
/// and `DeviceAllow=` per rule; nothing for a privileged app.
pub(crate) fn devices(allowed: &Allowed) -> Vec<Property> {
    match allowed.systemd() {
        Some((policy, pairs)) => {
            vec![Property::str("DevicePolicy", policy), Property::new("DeviceAllow", Value::Pairs(pairs))]
        }
        None => Vec::new(),
    }
}

/// `OOMPolicy=continue`, for an app appexec runs: a process of it the
/// kernel OOM-kills (a child, not the app) does not make the pod's systemd
/// stop the whole unit, as runc does not stop a container for it; appexec
/// marks the kill for its status (`OOMKilled`), the app's exit stays its own.
pub(crate) fn oom_policy_continue() -> Property {
    Property::str("OOMPolicy", "continue")
}

/// `OOMScoreAdjust=`.
pub(crate) fn oom_score_adjust(adj: i32) -> Property {
    Property::new("OOMScoreAdjust", Value::I32(adj))
}

/// A terminal as the app's stdio: output to it, input from it when the
/// container has a stdin (else none), `TTYPath=` its path in the pod.
pub(crate) fn tty(path_in_pod: &str, stdin: bool) -> Vec<Property> {
    vec![
        Property::str("StandardInput", if stdin { "tty" } else { "null" }),
        Property::str("StandardOutput", "tty"),
        Property::str("StandardError", "tty"),
        Property::str("TTYPath", path_in_pod.to_string()),
    ]
}

/// Limits as the pod's systemd takes them on a cgroup v2 host: MemoryMax,
/// CPUWeight (from CPU shares as Kubernetes converts them), CPUQuotaPerSecUSec
/// and CPUQuotaPeriodUSec, TasksMax; then the CRI `unified` files systemd
/// has a property for, which win over the fields (the daemon writes every
/// `unified` file once the unit runs: these hold from the app's first
/// instruction).
pub(crate) fn limits(l: &Limits) -> Vec<Property> {
    let mut p = field_limits(l);
    for (file, value) in &l.unified {
        let Some((name, value)) = unified_property(file, value) else { continue };
        p.retain(|q| q.name != name);
        p.push(Property::u64(name, value));
    }
    p
}

/// The systemd property of a cgroup v2 file and its value (`max`: systemd's
/// infinity), for the files whose property takes the file's plain number.
fn unified_property(file: &str, value: &str) -> Option<(&'static str, u64)> {
    let name = match file {
        "pids.max" => "TasksMax",
        "memory.max" => "MemoryMax",
        "memory.high" => "MemoryHigh",
        "memory.low" => "MemoryLow",
        "memory.min" => "MemoryMin",
        "memory.swap.max" => "MemorySwapMax",
        "cpu.weight" => "CPUWeight",
        _ => return None,
    };
    let value = value.trim();
    let n = if value == "max" { u64::MAX } else { value.parse().ok()? };
    Some((name, n))
}

fn field_limits(l: &Limits) -> Vec<Property> {
    let mut p = Vec::new();
    if let Some(m) = l.memory_bytes.and_then(|m| u64::try_from(m).ok()) {
        p.push(Property::u64("MemoryMax", m));
    }
    if let Some(shares) = l.cpu_shares {
        let shares = shares.clamp(2, 262_144);
        p.push(Property::u64("CPUWeight", 1 + ((shares - 2) * 9999) / 262_142));
    }
    let period = l.cpu_period_us.unwrap_or(100_000).max(1_000);
    if let Some(quota) = l.cpu_quota_us.and_then(|q| u64::try_from(q).ok()).filter(|q| *q > 0) {
        p.push(Property::u64("CPUQuotaPerSecUSec", quota.saturating_mul(1_000_000) / period));
        p.push(Property::u64("CPUQuotaPeriodUSec", period));
    }
    if let Some(pids) = l.pids.and_then(|n| u64::try_from(n).ok()) {
        p.push(Property::u64("TasksMax", pids));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Properties as `Name=value` (the value's Debug text).
    fn texts(p: &[Property]) -> Vec<String> {
        p.iter().map(|p| format!("{}={:?}", p.name, p.value)).collect()
    }

    fn values(p: &[Property]) -> Vec<(String, u64)> {
        p.iter()
            .map(|p| match p.value {
                Value::U64(v) => (p.name.clone(), v),
                ref v => panic!("{} is {v:?}", p.name),
            })
            .collect()
    }

    #[test]
    fn limits_as_systemd_properties() {
        let l = Limits {
            memory_bytes: Some(64 << 20),
            cpu_shares: Some(1024),
            cpu_quota_us: Some(50_000),
            cpu_period_us: Some(100_000),
            pids: Some(100),
            oom_score_adj: Some(-997),
            ..Default::default()
        };
        let got = values(&limits(&l));
        let want: Vec<(String, u64)> = [
            ("MemoryMax", 64 << 20),
            ("CPUWeight", 39),
            ("CPUQuotaPerSecUSec", 500_000),
            ("CPUQuotaPeriodUSec", 100_000),
            ("TasksMax", 100),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), *v))
        .collect();
        assert_eq!(got, want);
        // kubelet's minimum shares (2) is the minimum weight; no limits, no properties
        assert_eq!(
            values(&limits(&Limits { cpu_shares: Some(2), ..Default::default() })),
            [("CPUWeight".to_string(), 1)]
        );
        assert!(limits(&Limits::default()).is_empty());
        // unified files systemd has a property for, over the fields; the others are written later
        let unified = Limits {
            pids: Some(100),
            memory_bytes: Some(64 << 20),
            unified: [("pids.max", "50"), ("memory.high", "max"), ("io.weight", "default 100"), ("cpu.weight", "x")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
            ..Default::default()
        };
        let want: Vec<(String, u64)> =
            [("MemoryMax", 64 << 20), ("MemoryHigh", u64::MAX), ("TasksMax", 50)].map(|(n, v)| (n.into(), v)).into();
        assert_eq!(values(&limits(&unified)), want);
    }

    #[test]
    fn environment_systemd_takes() {
        for (name, value) in [("PATH", "/bin"), ("_x1", "a\tb\nc"), ("A", "")] {
            assert!(environment_takes(name, value), "{name}={value:?}");
        }
        for (name, value) in [("data-1", "x"), ("a.b", "x"), ("1A", "x"), ("", "x"), ("A", "bell\u{7}")] {
            assert!(!environment_takes(name, value), "{name}={value:?}");
        }
    }

    #[test]
    fn security_stop_and_terminal_properties() {
        assert_eq!(
            texts(&syscall_filter(false, &["ptrace".into()], Some(1))),
            [r#"SystemCallFilter=FilterList(false, ["ptrace"])"#, "SystemCallErrorNumber=I32(1)"]
        );
        assert_eq!(texts(&syscall_filter(true, &[], None)).len(), 1);
        assert_eq!(texts(&[restrict_namespaces(0x2000_0000)]), ["RestrictNamespaces=U64(536870912)"]);
        assert!(kill_signal(libc::SIGTERM).is_none());
        assert_eq!(texts(&kill_signal(libc::SIGINT).into_iter().collect::<Vec<_>>()), ["KillSignal=I32(2)"]);
        assert_eq!(texts(&[oom_score_adjust(-997)]), ["OOMScoreAdjust=I32(-997)"]);
        let t = texts(&tty("/dev/pts/3", false));
        assert_eq!(t.len(), 4);
        assert!(t[0].starts_with("StandardInput=") && t[0].contains("null"), "{t:?}");
        assert!(t[3].starts_with("TTYPath=") && t[3].contains("/dev/pts/3"), "{t:?}");
        let d = texts(&devices(&Allowed::for_container(false, [('b', 7, 0, "r")])));
        assert_eq!(d.len(), 2);
        assert!(d[0].starts_with("DevicePolicy=") && d[0].contains("closed"), "{d:?}");
        assert!(d[1].contains(r#"("/dev/block/7:0", "r")"#) && d[1].contains(r#"("char-pts", "rwm")"#), "{d:?}");
        assert!(devices(&Allowed::Everything).is_empty());
        let a = texts(&accounting_and_limits(&Limits { pids: Some(5), ..Default::default() }));
        assert_eq!(a.len(), 5);
        assert_eq!(a[4], "TasksMax=U64(5)");
    }
}
