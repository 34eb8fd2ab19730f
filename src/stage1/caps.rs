//! Linux capabilities by name, and the default set containers get.

/// Capability names in bit order (`CAP_CHOWN` is bit 0).
pub(crate) const NAMES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The set container runtimes give by default (docker's 14).
pub(crate) const DEFAULT: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// Every capability in [`NAMES`], as bits.
pub(crate) const ALL: u64 = (1u64 << NAMES.len()) - 1;

/// Bit of a capability given as `NAME`, `CAP_NAME` or any case; `ALL` is every bit.
pub(crate) fn bits(name: &str) -> Option<u64> {
    let n = name.trim().to_ascii_uppercase();
    let n = n.strip_prefix("CAP_").unwrap_or(&n);
    if n == "ALL" {
        return Some(ALL);
    }
    NAMES.iter().position(|c| *c == n).map(|i| 1u64 << i)
}

/// The default set with `add` and `drop` applied (drop wins, like containerd).
pub fn bounding_set(add: &[String], drop: &[String]) -> Result<u64, String> {
    let mut set = DEFAULT.iter().filter_map(|c| bits(c)).fold(0, |a, b| a | b);
    for c in add {
        set |= bits(c).ok_or_else(|| format!("unknown capability {c:?}"))?;
    }
    for c in drop {
        set &= !bits(c).ok_or_else(|| format!("unknown capability {c:?}"))?;
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets() {
        assert_eq!(bits("CAP_CHOWN"), Some(1));
        assert_eq!(bits("net_admin"), Some(1 << 12));
        assert_eq!(bits("bogus"), None);
        let d = bounding_set(&[], &[]).expect("default");
        assert_eq!(d.count_ones(), 14);
        let s = bounding_set(&["NET_ADMIN".into()], &["KILL".into()]).expect("set");
        assert!(s & (1 << 12) != 0 && s & (1 << 5) == 0);
        assert_eq!(bounding_set(&[], &["ALL".into()]).expect("none"), 0);
        assert!(bounding_set(&["NOPE".into()], &[]).is_err());
    }
}
