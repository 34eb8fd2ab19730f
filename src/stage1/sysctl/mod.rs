//! A pod's sysctls (`linux.sysctls` of the PodSandboxConfig): checked as
//! runc checks them, then written from a thread that joined the pod's
//! namespaces. Only sysctls of a kernel namespace the pod has of its own are
//! taken: `net.*` in its network namespace, the System V IPC ones and
//! `fs.mqueue.*` in its IPC namespace, `kernel.domainname` in its UTS
//! namespace. Anything else would change the node, and is refused.
//!
//! Runs in: the daemon; the writes in [`in_pod`], a thread of their own that
//! joins the pod's namespaces.

mod in_pod;

use std::io;
use std::path::PathBuf;

/// The System V IPC sysctls, per IPC namespace (besides `fs.mqueue.*`).
const IPC: [&str; 8] = [
    "kernel.msgmax",
    "kernel.msgmnb",
    "kernel.msgmni",
    "kernel.sem",
    "kernel.shmall",
    "kernel.shmmax",
    "kernel.shmmni",
    "kernel.shm_rmid_forced",
];

/// The kernel namespace a sysctl belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Namespace {
    Net,
    Ipc,
    Uts,
}

impl Namespace {
    pub(super) fn proc_name(self) -> &'static str {
        match self {
            Namespace::Net => "net",
            Namespace::Ipc => "ipc",
            Namespace::Uts => "uts",
        }
    }

    pub(super) fn clone_flag(self) -> libc::c_int {
        match self {
            Namespace::Net => libc::CLONE_NEWNET,
            Namespace::Ipc => libc::CLONE_NEWIPC,
            Namespace::Uts => libc::CLONE_NEWUTS,
        }
    }
}

/// Which of the namespaces sysctls go to are the node's for this pod.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PodNamespaces {
    pub host_network: bool,
    pub host_ipc: bool,
}

/// One checked sysctl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sysctl {
    /// The name as asked for (reported in errors).
    pub name: String,
    /// Below `/proc/sys`.
    pub path: PathBuf,
    pub value: String,
    pub namespace: Namespace,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SysctlError {
    #[error("sysctl {0:?} is not a valid sysctl name")]
    BadName(String),
    #[error("sysctl {name:?}: the value must not contain a NUL or a newline")]
    BadValue { name: String },
    #[error("sysctl {0:?} is not in a separate kernel namespace: it would change the node")]
    NotNamespaced(String),
    #[error("sysctl {name:?} is not allowed in the node's {namespace} namespace, which the pod shares")]
    NodeNamespace { name: String, namespace: &'static str },
    #[error("sysctl {0:?} is not allowed: it conflicts with the pod's hostname")]
    Hostname(String),
    #[error("sysctl {name:?} does not exist in the pod's namespaces")]
    Missing { name: String },
    #[error("sysctl {name:?} = {value:?}: {source}")]
    Write { name: String, value: String, source: io::Error },
    #[error("joining the pod's {namespace} namespace: {source}")]
    Join { namespace: &'static str, source: io::Error },
}

impl SysctlError {
    /// Whether the request asked for something it cannot have (rather than
    /// the node failing to do what it could).
    pub(crate) fn is_invalid_argument(&self) -> bool {
        match self {
            SysctlError::Write { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::EINVAL | libc::ERANGE | libc::EPERM | libc::EACCES))
            }
            SysctlError::Join { .. } => false,
            _ => true,
        }
    }
}

/// The components of a sysctl name: dotted (`net.ipv4.ip_forward`, with
/// `/` standing for a dot inside a component, as kubelet writes
/// `net.ipv4.conf.eth0/100.rp_filter`) or a path below /proc/sys
/// (`net/ipv4/conf/eth0.100/rp_filter`).
fn components(name: &str) -> Result<Vec<String>, SysctlError> {
    let bad = || SysctlError::BadName(name.to_string());
    let slash_first = match (name.find('.'), name.find('/')) {
        (Some(d), Some(s)) => s < d,
        (None, Some(_)) => true,
        _ => false,
    };
    let parts: Vec<String> = if slash_first {
        name.split('/').map(str::to_string).collect()
    } else {
        name.split('.').map(|c| c.replace('/', ".")).collect()
    };
    let valid = |c: &String| !c.is_empty() && c != "." && c != ".." && !c.contains('\0');
    if parts.len() < 2 || !parts.iter().all(valid) {
        return Err(bad());
    }
    Ok(parts)
}

/// Checks the pod's sysctls against its namespaces (before anything is made).
pub(crate) fn check<'a>(
    sysctls: impl IntoIterator<Item = (&'a String, &'a String)>,
    ns: PodNamespaces,
) -> Result<Vec<Sysctl>, SysctlError> {
    let mut out = Vec::new();
    for (name, value) in sysctls {
        if value.contains('\0') || value.contains('\n') {
            return Err(SysctlError::BadValue { name: name.clone() });
        }
        let parts = components(name)?;
        let dotted = parts.join(".");
        let namespace = if parts[0] == "net" {
            Namespace::Net
        } else if IPC.contains(&dotted.as_str()) || dotted.starts_with("fs.mqueue.") {
            Namespace::Ipc
        } else if dotted == "kernel.domainname" {
            Namespace::Uts
        } else if dotted == "kernel.hostname" {
            // the pod always has a hostname (the request's or its name), as runc refuses it then
            return Err(SysctlError::Hostname(name.clone()));
        } else {
            return Err(SysctlError::NotNamespaced(name.clone()));
        };
        let node = match namespace {
            // a pod on the node's network shares the node's UTS namespace too (CRI)
            Namespace::Net | Namespace::Uts if ns.host_network => Some(namespace),
            Namespace::Ipc if ns.host_ipc => Some(namespace),
            _ => None,
        };
        if let Some(n) = node {
            return Err(SysctlError::NodeNamespace { name: name.clone(), namespace: n.proc_name() });
        }
        out.push(Sysctl { name: name.clone(), path: parts.iter().collect(), value: value.clone(), namespace });
    }
    out.sort_by(|a, b| (a.namespace, &a.path).cmp(&(b.namespace, &b.path)));
    Ok(out)
}

/// Writes `sysctls` in the namespaces of the pod's PID 1 `pid1`, from a
/// thread of their own that joins them (it ends right after).
pub(crate) fn apply(pid1: i32, sysctls: &[Sysctl]) -> Result<(), SysctlError> {
    if sysctls.is_empty() {
        return Ok(());
    }
    let mut needed: Vec<Namespace> = sysctls.iter().map(|s| s.namespace).collect();
    needed.dedup();
    let mut fds = Vec::new();
    for n in needed {
        let f = std::fs::File::open(format!("/proc/{pid1}/ns/{}", n.proc_name()))
            .map_err(|source| SysctlError::Join { namespace: n.proc_name(), source })?;
        fds.push((n, f));
    }
    let sysctls = sysctls.to_vec();
    std::thread::Builder::new()
        .name("pod-sysctls".into())
        .spawn(move || in_pod::join_and_write(&fds, &sysctls))
        .map_err(|source| SysctlError::Join { namespace: "net/ipc/uts", source })?
        .join()
        .map_err(|_| SysctlError::Join {
            namespace: "net/ipc/uts",
            source: io::Error::other("sysctl thread panicked"),
        })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn checked(pairs: &[(&str, &str)], ns: PodNamespaces) -> Result<Vec<Sysctl>, SysctlError> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        check(&map, ns)
    }

    #[test]
    fn namespaced_sysctls_are_taken() {
        let got = checked(
            &[
                ("kernel.shm_rmid_forced", "1"),
                ("fs.mqueue.msg_max", "100"),
                ("net.ipv4.ip_unprivileged_port_start", "0"),
                ("net.ipv4.conf.eth0/100.rp_filter", "2"),
                ("net/ipv4/conf/eth0.100/forwarding", "1"),
                ("kernel.domainname", "example.org"),
            ],
            PodNamespaces::default(),
        )
        .expect("all namespaced");
        let view: Vec<(Namespace, String)> = got.iter().map(|s| (s.namespace, s.path.display().to_string())).collect();
        assert_eq!(
            view,
            [
                (Namespace::Net, "net/ipv4/conf/eth0.100/forwarding".to_string()),
                (Namespace::Net, "net/ipv4/conf/eth0.100/rp_filter".to_string()),
                (Namespace::Net, "net/ipv4/ip_unprivileged_port_start".to_string()),
                (Namespace::Ipc, "fs/mqueue/msg_max".to_string()),
                (Namespace::Ipc, "kernel/shm_rmid_forced".to_string()),
                (Namespace::Uts, "kernel/domainname".to_string()),
            ]
        );
    }

    #[test]
    fn node_wide_and_mismatched_sysctls_are_refused() {
        let none = PodNamespaces::default();
        for name in ["kernel.pid_max", "vm.swappiness", "fs.file-max", "kernel.hostname", "kernel.msgmax2"] {
            assert!(checked(&[(name, "1")], none).is_err(), "{name}");
        }
        for name in ["net..x", "net.ipv4.../x", "net/../kernel/pid_max", "net", "", "kernel/../../etc"] {
            assert!(matches!(checked(&[(name, "1")], none), Err(SysctlError::BadName(_))), "{name}");
        }
        let host_net = PodNamespaces { host_network: true, host_ipc: false };
        assert!(matches!(checked(&[("net.core.somaxconn", "1")], host_net), Err(SysctlError::NodeNamespace { .. })));
        assert!(matches!(checked(&[("kernel.domainname", "x")], host_net), Err(SysctlError::NodeNamespace { .. })));
        assert!(checked(&[("kernel.shmmax", "1")], host_net).is_ok());
        let host_ipc = PodNamespaces { host_network: false, host_ipc: true };
        assert!(matches!(checked(&[("fs.mqueue.msg_max", "1")], host_ipc), Err(SysctlError::NodeNamespace { .. })));
        assert!(matches!(checked(&[("kernel.sem", "1")], host_ipc), Err(SysctlError::NodeNamespace { .. })));
        assert!(matches!(checked(&[("net.core.somaxconn", "1\n2")], none), Err(SysctlError::BadValue { .. })));
        assert!(checked(&[("kernel.pid_max", "1")], none).expect_err("node-wide").is_invalid_argument());
    }
}
