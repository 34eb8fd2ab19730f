//! Localhost seccomp profiles (the OCI/docker JSON form kubelet points to)
//! as rkt's seccomp isolators, which the app's unit turns into systemd's
//! `SystemCallFilter=`: an allow list (`os/linux/seccomp-retain-set`) when
//! the profile denies by default, a deny list (`os/linux/seccomp-remove-set`)
//! when it allows by default. systemd filters by syscall name only, so a
//! profile whose rules depend on arguments, mixes errno values, uses actions
//! other than allow/errno/kill, or allows nothing is refused at create, with
//! the rule named, rather than enforced differently from what it says. One
//! difference remains: systemd adds its `@default` set (exit, rt_sigreturn,
//! futex and the like, which no process runs without) to every allow list.

use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction as Action};
use serde_json::Value;

pub(crate) const ISOLATOR_RETAIN: &str = "os/linux/seccomp-retain-set";
pub(crate) const ISOLATOR_REMOVE: &str = "os/linux/seccomp-remove-set";

/// The largest profile read.
const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// What a denied call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deny {
    Errno(u32),
    Kill,
}

fn deny_of(action: Action, errno: Option<u32>) -> Option<Deny> {
    match action {
        Action::ScmpActErrno => Some(Deny::Errno(errno.unwrap_or(libc::EPERM as u32))),
        Action::ScmpActKill | Action::ScmpActKillThread | Action::ScmpActKillProcess | Action::ScmpActTrap => {
            Some(Deny::Kill)
        }
        _ => None,
    }
}

fn allows(action: Action) -> bool {
    matches!(action, Action::ScmpActAllow | Action::ScmpActLog)
}

/// Reads a Localhost profile into the runtime spec's seccomp type
/// (oci-spec's `LinuxSeccomp`). kubelet's profiles are docker's form, a
/// superset: a rule's single `name` becomes its `names`, and a rule with
/// `includes`/`excludes` conditions (which the runtime spec does not have,
/// and oci-spec would drop unseen) is refused, named.
fn parse_profile(json: &[u8]) -> Result<LinuxSeccomp, String> {
    let mut doc: Value = serde_json::from_slice(json).map_err(|e| format!("not a seccomp profile: {e}"))?;
    let rules = doc.get_mut("syscalls").and_then(Value::as_array_mut).into_iter().flatten();
    for (i, rule) in rules.enumerate() {
        let Some(r) = rule.as_object_mut() else { continue };
        if let Some(name) = r.remove("name") {
            let names = r.entry("names").or_insert(Value::Array(Vec::new()));
            if let Some(names) = names.as_array_mut() {
                names.push(name);
            }
        }
        r.entry("names").or_insert(Value::Array(Vec::new()));
        let conditional = |k: &str| r.get(k).and_then(Value::as_object).is_some_and(|o| !o.is_empty());
        if conditional("includes") || conditional("excludes") {
            let names: Vec<&str> = r["names"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            return Err(format!(
                "rule {i} ({}) has includes/excludes conditions; flatten the profile for this node",
                names.join(",")
            ));
        }
    }
    serde_json::from_value(doc).map_err(|e| format!("not a seccomp profile: {e}"))
}

/// The isolator (name, value) for the profile in `json`.
pub(crate) fn isolator_from_profile(json: &[u8]) -> Result<(&'static str, serde_json::Value), String> {
    let p = parse_profile(json)?;
    let default_allows = allows(p.default_action());
    if !default_allows {
        deny_of(p.default_action(), p.default_errno_ret())
            .ok_or_else(|| format!("defaultAction {} is not supported", p.default_action()))?;
    }
    let mut names = Vec::new();
    let mut deny: Option<Deny> = if default_allows { None } else { deny_of(p.default_action(), p.default_errno_ret()) };
    for (i, r) in p.syscalls().iter().flatten().enumerate() {
        let which = format!("rule {i} ({})", r.names().join(","));
        if r.args().as_ref().is_some_and(|a| !a.is_empty()) {
            return Err(format!("{which} has argument conditions; systemd filters by syscall name only"));
        }
        if allows(r.action()) {
            if !default_allows {
                names.extend(r.names().iter().cloned());
            }
            continue;
        }
        let d = deny_of(r.action(), r.errno_ret())
            .ok_or_else(|| format!("{which}: action {} is not supported", r.action()))?;
        // one way of denying per filter: under a deny default, a rule that
        // denies differently (clone3 with ENOSYS, say) cannot be kept
        match deny {
            Some(prev) if prev != d => {
                return Err(format!("{which}: denied calls must all get the same errno or all be killed"));
            }
            _ => deny = Some(d),
        }
        if default_allows {
            names.extend(r.names().iter().cloned());
        }
    }
    if !default_allows && names.is_empty() {
        // an empty SystemCallFilter= resets the filter: it would allow everything
        return Err("the profile allows no system call at all".into());
    }
    names.sort();
    names.dedup();
    let errno = match deny {
        Some(Deny::Errno(n)) => serde_json::json!(n),
        _ => serde_json::Value::Null,
    };
    let name = if default_allows { ISOLATOR_REMOVE } else { ISOLATOR_RETAIN };
    Ok((name, serde_json::json!({ "set": names, "errno": errno })))
}

/// The calls the runtime's default profile denies, with the capabilities
/// any one of which lets a call through (none: always denied). These are the
/// calls containerd's default profile does not allow (its allow list, read
/// as what it leaves out), as a deny list. systemd filters by name only:
/// `clone` and `personality`, which containerd allows on argument
/// conditions, are allowed whole (a `clone` with namespace flags still needs
/// the capabilities the kernel asks for, but for a user namespace: that one
/// is refused by [`RESTRICT_NAMESPACES`]), and `unshare` is denied whole
/// without SYS_ADMIN, as older docker profiles did.
const DEFAULT_DENIED: &[(&str, &[&str])] = &[
    ("acct", &["SYS_PACCT"]),
    ("add_key", &[]),
    ("bpf", &["SYS_ADMIN", "BPF"]),
    ("clock_adjtime", &["SYS_TIME"]),
    ("clock_settime", &["SYS_TIME"]),
    ("create_module", &["SYS_MODULE"]),
    ("delete_module", &["SYS_MODULE"]),
    ("fanotify_init", &["SYS_ADMIN"]),
    ("finit_module", &["SYS_MODULE"]),
    ("fsconfig", &["SYS_ADMIN"]),
    ("fsmount", &["SYS_ADMIN"]),
    ("fsopen", &["SYS_ADMIN"]),
    ("fspick", &["SYS_ADMIN"]),
    ("get_kernel_syms", &["SYS_MODULE"]),
    ("get_mempolicy", &["SYS_NICE"]),
    ("init_module", &["SYS_MODULE"]),
    ("ioperm", &["SYS_RAWIO"]),
    ("iopl", &["SYS_RAWIO"]),
    ("kcmp", &["SYS_PTRACE"]),
    ("kexec_file_load", &["SYS_BOOT"]),
    ("kexec_load", &["SYS_BOOT"]),
    ("keyctl", &[]),
    ("lookup_dcookie", &["SYS_ADMIN"]),
    ("mbind", &["SYS_NICE"]),
    ("mount", &["SYS_ADMIN"]),
    ("mount_setattr", &["SYS_ADMIN"]),
    ("move_mount", &["SYS_ADMIN"]),
    ("move_pages", &["SYS_NICE"]),
    ("name_to_handle_at", &["SYS_ADMIN"]),
    ("nfsservctl", &[]),
    ("open_by_handle_at", &["DAC_READ_SEARCH"]),
    ("open_tree", &["SYS_ADMIN"]),
    ("perf_event_open", &["SYS_ADMIN", "PERFMON"]),
    ("pivot_root", &["SYS_ADMIN"]),
    ("query_module", &["SYS_MODULE"]),
    ("quotactl", &["SYS_ADMIN"]),
    ("quotactl_fd", &["SYS_ADMIN"]),
    ("reboot", &["SYS_BOOT"]),
    ("request_key", &[]),
    ("set_mempolicy", &["SYS_NICE"]),
    ("setdomainname", &["SYS_ADMIN"]),
    ("sethostname", &["SYS_ADMIN"]),
    ("setns", &["SYS_ADMIN"]),
    ("settimeofday", &["SYS_TIME"]),
    ("stime", &["SYS_TIME"]),
    ("swapoff", &["SYS_ADMIN"]),
    ("swapon", &["SYS_ADMIN"]),
    ("sysfs", &[]),
    ("_sysctl", &[]),
    ("syslog", &["SYSLOG", "SYS_ADMIN"]),
    ("umount", &["SYS_ADMIN"]),
    ("umount2", &["SYS_ADMIN"]),
    ("unshare", &["SYS_ADMIN"]),
    ("uselib", &[]),
    ("userfaultfd", &["SYS_PTRACE"]),
    ("ustat", &[]),
    ("vhangup", &["SYS_TTY_CONFIG"]),
    ("vm86", &[]),
    ("vm86old", &[]),
];

/// The runtime's default profile (RuntimeDefault) for a container with the
/// capability bounding set `caps`: a deny list (EPERM) of what containerd's
/// default profile does not allow, less the calls one of `caps` lets through.
pub(crate) fn runtime_default(caps: u64) -> (&'static str, serde_json::Value) {
    let held = |names: &[&str]| names.iter().any(|n| crate::stage1::caps::bits(n).is_some_and(|b| caps & b != 0));
    let denied: Vec<&str> =
        DEFAULT_DENIED.iter().filter(|(_, needs)| needs.is_empty() || !held(needs)).map(|(call, _)| *call).collect();
    let mut value = serde_json::json!({ "set": denied, "errno": libc::EPERM });
    if !held(&["SYS_ADMIN"]) {
        value[RESTRICT_NAMESPACES] = serde_json::json!(["user"]);
    }
    (ISOLATOR_REMOVE, value)
}

/// The key of a seccomp isolator's value naming the namespace types the app
/// may not make (the runtime's default: a user namespace without
/// SYS_ADMIN). containerd's profile refuses `clone` with a namespace flag
/// and `clone3` (ENOSYS: its flags are behind a pointer, so libc falls back
/// to `clone`) to such a container; only a user namespace needs no
/// capability the container lacks. The app's unit gets systemd's
/// `RestrictNamespaces=` for it, which filters `clone`, `unshare` and
/// `setns` on their flags and answers `clone3` with ENOSYS; a command exec'd
/// into the app copies the filter (`stage1/filters.rs`).
pub(crate) const RESTRICT_NAMESPACES: &str = "restrictNamespaces";

/// The namespace types systemd (252) knows, by the names it takes.
const NAMESPACE_TYPES: [(&str, libc::c_int); 7] = [
    ("cgroup", libc::CLONE_NEWCGROUP),
    ("ipc", libc::CLONE_NEWIPC),
    ("net", libc::CLONE_NEWNET),
    ("mnt", libc::CLONE_NEWNS),
    ("pid", libc::CLONE_NEWPID),
    ("user", libc::CLONE_NEWUSER),
    ("uts", libc::CLONE_NEWUTS),
];

/// `RestrictNamespaces=` for a seccomp isolator's value (the clone flags
/// of the namespace types the app may make), or None when it restricts none.
/// A name systemd does not know is an error: nothing is let through unread.
pub(crate) fn allowed_namespaces(value: &serde_json::Value) -> Result<Option<u64>, String> {
    let Some(refused) = value.get(RESTRICT_NAMESPACES) else { return Ok(None) };
    let refused = refused.as_array().ok_or_else(|| format!("{RESTRICT_NAMESPACES} is not a list"))?;
    let mut allowed: u64 = NAMESPACE_TYPES.iter().fold(0, |m, (_, flag)| m | *flag as u64);
    for name in refused {
        let flag = name
            .as_str()
            .and_then(|n| NAMESPACE_TYPES.iter().find(|(t, _)| *t == n))
            .ok_or_else(|| format!("{RESTRICT_NAMESPACES}: unknown namespace type {name}"))?
            .1;
        allowed &= !(flag as u64);
    }
    Ok((!refused.is_empty()).then_some(allowed))
}

/// The profile an app's isolators record (None: the app has no filter of
/// its own): what its unit's filters are built from, and a command exec'd
/// into it gets where they cannot be read (`stage1::filters`).
pub(crate) fn profile_of(isolators: &[rkt::schema::Isolator]) -> Result<Option<super::filters::Profile>, String> {
    let Some(iso) = isolators.iter().rev().find(|i| i.name == ISOLATOR_RETAIN || i.name == ISOLATOR_REMOVE) else {
        return Ok(None);
    };
    let calls = iso.value["set"]
        .as_array()
        .ok_or_else(|| format!("{}: no set of calls", iso.name))?
        .iter()
        .map(|c| c.as_str().map(str::to_string).ok_or_else(|| format!("{}: {c} is not a call's name", iso.name)))
        .collect::<Result<_, _>>()?;
    Ok(Some(super::filters::Profile {
        allow: iso.name == ISOLATOR_RETAIN,
        calls,
        // no errno: a denied call kills the process (SIGSYS)
        errno: errno_of(&iso.value["errno"]),
        namespaces: allowed_namespaces(&iso.value)?,
    }))
}

/// Reads the profile at `path` (a host path, as kubelet's `localhost_ref`).
pub(crate) fn isolator_from_file(path: &str) -> Result<(&'static str, serde_json::Value), String> {
    use std::io::Read;
    if !path.starts_with('/') {
        return Err(format!("seccomp profile {path:?}: the path must be absolute"));
    }
    let f = std::fs::File::open(path).map_err(|e| format!("seccomp profile {path}: {e}"))?;
    let mut json = Vec::new();
    f.take(MAX_PROFILE_BYTES + 1).read_to_end(&mut json).map_err(|e| format!("seccomp profile {path}: {e}"))?;
    if json.len() as u64 > MAX_PROFILE_BYTES {
        return Err(format!("seccomp profile {path} is larger than {MAX_PROFILE_BYTES} bytes"));
    }
    isolator_from_profile(&json).map_err(|e| format!("seccomp profile {path}: {e}"))
}

/// The errno number an isolator's `errno` asks for: a number or a name
/// (rkt wrote names such as `EPERM`); None means kill the process.
pub(crate) fn errno_of(v: &serde_json::Value) -> Option<i32> {
    if let Some(n) = v.as_i64() {
        return i32::try_from(n).ok();
    }
    match v.as_str()? {
        "EPERM" => Some(libc::EPERM),
        "EACCES" => Some(libc::EACCES),
        "ENOSYS" => Some(libc::ENOSYS),
        "EINVAL" => Some(libc::EINVAL),
        "ENOENT" => Some(libc::ENOENT),
        other => other.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_by_default_is_an_allow_list() {
        let (name, v) = isolator_from_profile(
            br#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":38,"architectures":["SCMP_ARCH_X86_64"],
                "syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"},{"name":"exit","action":"SCMP_ACT_ALLOW"},
                {"names":["ptrace"],"action":"SCMP_ACT_ERRNO","errnoRet":38}]}"#,
        )
        .expect("profile");
        assert_eq!(name, ISOLATOR_RETAIN);
        assert_eq!(v, serde_json::json!({"set": ["exit", "read", "write"], "errno": 38}));
    }

    #[test]
    fn allow_by_default_is_a_deny_list() {
        let (name, v) = isolator_from_profile(
            br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}"#,
        )
        .expect("profile");
        assert_eq!(name, ISOLATOR_REMOVE);
        assert_eq!(v, serde_json::json!({"set": ["mkdir", "mkdirat"], "errno": 13}));
        let (_, v) = isolator_from_profile(
            br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["reboot"],"action":"SCMP_ACT_KILL_PROCESS"}]}"#,
        )
        .expect("profile");
        assert_eq!(v["errno"], serde_json::Value::Null);
    }

    #[test]
    fn what_systemd_cannot_express_is_refused() {
        for bad in [
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]}]}"#,
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["a"],"action":"SCMP_ACT_ERRNO","errnoRet":1},{"names":["b"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}"#,
            r#"{"defaultAction":"SCMP_ACT_NOTIFY"}"#,
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["a"],"action":"SCMP_ACT_TRACE"}]}"#,
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["a"],"action":"SCMP_ACT_ALLOW","includes":{"caps":["CAP_SYS_ADMIN"]}}]}"#,
            r#"not json"#,
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"},{"names":["clone3"],"action":"SCMP_ACT_ERRNO","errnoRet":38}]}"#,
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[]}"#,
        ] {
            assert!(isolator_from_profile(bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(isolator_from_file("relative.json").is_err());
        assert!(isolator_from_file("/nonexistent/profile.json").is_err());
    }

    /// kubelet's profiles are docker's form, where oci-spec's runtime type
    /// falls short: a single `name` does not parse, and `includes` would be
    /// dropped unseen (a conditional rule read as unconditional).
    #[test]
    fn docker_forms_oci_spec_does_not_take() {
        let single = r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"name":"exit","action":"SCMP_ACT_ALLOW"}]}"#;
        assert!(serde_json::from_str::<LinuxSeccomp>(single).is_err(), "oci-spec takes `name` now");
        assert_eq!(
            isolator_from_profile(single.as_bytes()).expect("single name").1["set"],
            serde_json::json!(["exit"])
        );
        let conditional = r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["mount"],"action":"SCMP_ACT_ALLOW",
            "includes":{"caps":["CAP_SYS_ADMIN"]}}]}"#;
        assert!(serde_json::from_str::<LinuxSeccomp>(conditional).is_ok(), "oci-spec keeps the condition now");
        let err = isolator_from_profile(conditional.as_bytes()).expect_err("a condition dropped");
        assert!(err.contains("rule 0 (mount)") && err.contains("includes"), "{err}");
    }

    #[test]
    fn runtime_default_denies_by_capability() {
        let set = |v: &serde_json::Value| -> Vec<String> {
            v["set"].as_array().expect("set").iter().map(|c| c.as_str().expect("name").to_string()).collect()
        };
        let default = crate::stage1::caps::bounding_set(&[], &[]).expect("default caps");
        let (name, v) = runtime_default(default);
        assert_eq!(name, ISOLATOR_REMOVE);
        assert_eq!(v["errno"], serde_json::json!(libc::EPERM));
        let denied = set(&v);
        for call in ["mount", "unshare", "setns", "sethostname", "reboot", "init_module", "keyctl", "bpf"] {
            assert!(denied.iter().any(|c| c == call), "{call}");
        }
        // what a container asks for lets its calls through; calls no capability allows stay denied
        let admin = crate::stage1::caps::bounding_set(&["SYS_ADMIN".into(), "SYS_TIME".into()], &[]).expect("caps");
        let denied = set(&runtime_default(admin).1);
        for call in ["mount", "unshare", "sethostname", "setns", "bpf", "settimeofday", "clock_settime"] {
            assert!(!denied.iter().any(|c| c == call), "{call} with SYS_ADMIN and SYS_TIME");
        }
        assert!(denied.iter().any(|c| c == "keyctl") && denied.iter().any(|c| c == "reboot"));
        // a user namespace only with SYS_ADMIN
        let all_but_user = (libc::CLONE_NEWCGROUP
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWNET
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWUTS) as u64;
        assert_eq!(allowed_namespaces(&runtime_default(default).1), Ok(Some(all_but_user)));
        assert_eq!(allowed_namespaces(&runtime_default(admin).1), Ok(None));
        assert!(allowed_namespaces(&serde_json::json!({ RESTRICT_NAMESPACES: ["time"] })).is_err());
        // every name is one the list knows once
        let mut names: Vec<&str> = DEFAULT_DENIED.iter().map(|(c, _)| *c).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), DEFAULT_DENIED.len());
    }

    #[test]
    fn errno_names_and_numbers() {
        assert_eq!(errno_of(&serde_json::json!("EPERM")), Some(libc::EPERM));
        assert_eq!(errno_of(&serde_json::json!(13)), Some(13));
        assert_eq!(errno_of(&serde_json::Value::Null), None);
    }
}
