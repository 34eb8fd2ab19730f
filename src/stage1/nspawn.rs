//! The systemd-nspawn command line of a pod: the "cold" configuration measured
//! in pod-boot-fast.md, which boots systemd as the pod's PID 1 in about 50 ms
//! and works both on systemd hosts and where PID 1 is something else.
//!
//! Trade-offs taken here, on purpose:
//! - `SYSTEMD_SECCOMP=0`: nspawn spends 35-45 ms compiling its syscall filter;
//!   without it the pod has no nspawn-wide filter, so seccomp for apps must
//!   come from their own units (`SystemCallFilter=`).
//! - `SYSTEMD_UNIT_PATH=/etc/systemd/system`: the pod's systemd loads only
//!   stage1's own units (about 19 instead of 130).
//! - `SYSTEMD_GENERATOR_PATH` and `SYSTEMD_ENVIRONMENT_GENERATOR_PATH` name a
//!   directory that does not exist: the node's generators are not the pod's,
//!   and the pod's systemd forks no executor for them (one per kind, even for
//!   an empty or fully masked directory: about 3 ms of a cold boot).
//! - `--kill-signal=SIGRTMIN+14`: stop is systemd's immediate poweroff
//!   (18-32 ms); rktlet stops apps itself first.
//! - `SYSTEMD_NSPAWN_LOCK=0`: the pod directory lock (rkt's) already
//!   serialises users of the rootfs.
//! - `--capability=all`: the pod's bounding set is the node's (whatever the
//!   node itself holds), not nspawn's default set, since pods boot before
//!   their containers are known (the pool) and a container may be granted
//!   any capability (NET_ADMIN, SYS_TIME, privileged). The pod's own
//!   processes (its systemd, stage1's units) are rktlet's, like containerd's
//!   shim and runc, which run with every capability too; each app is
//!   confined to exactly its own set by its unit's `CapabilityBoundingSet=`
//!   or by appexec.

use std::ffi::OsString;
use std::path::PathBuf;

/// A path in the pod that never exists: systemd skips generators whose
/// directories are all missing.
const NO_GENERATORS: &str = "--setenv=SYSTEMD_GENERATOR_PATH=/run/rktlet-no-generators";
const NO_ENVIRONMENT_GENERATORS: &str = "--setenv=SYSTEMD_ENVIRONMENT_GENERATOR_PATH=/run/rktlet-no-generators";

/// How the pod gets its network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PodNet {
    /// The node's network namespace.
    Host,
    /// A network namespace made before launch (bind-mounted path).
    Netns(PathBuf),
    /// A private namespace with only `lo`.
    None,
}

/// Everything the nspawn command line depends on.
#[derive(Debug, Clone)]
pub(crate) struct NspawnSpec {
    pub nspawn: PathBuf,
    pub uuid: String,
    pub rootfs: PathBuf,
    pub net: PodNet,
    pub host_ipc: bool,
    /// A user namespace of its own: nspawn's `--private-users`, with the
    /// stage1 root id-mapped (`--private-users-ownership=map`).
    pub userns: Option<super::userns::IdMap>,
    /// Forward the pod systemd's READY=1 (for its `Type=notify` unit on a systemd node).
    pub notify_ready: bool,
}

impl NspawnSpec {
    /// rkt's machine name for a pod.
    pub(crate) fn machine_name(&self) -> String {
        format!("rkt-{}", self.uuid)
    }

    /// Environment variables for nspawn.
    pub(crate) fn env(&self) -> Vec<(&'static str, &'static str)> {
        let mut env =
            vec![("SYSTEMD_SECCOMP", "0"), ("SYSTEMD_NSPAWN_UNIFIED_HIERARCHY", "1"), ("SYSTEMD_NSPAWN_LOCK", "0")];
        if self.host_ipc {
            env.push(("SYSTEMD_NSPAWN_SHARE_NS_IPC", "true"));
        }
        env
    }

    /// Arguments after the program name.
    pub(crate) fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = [
            "--register=no",
            "--keep-unit",
            "--quiet",
            "--link-journal=no",
            "--resolv-conf=off",
            "--timezone=off",
            "--console=pipe",
            "--kill-signal=SIGRTMIN+14",
            "--capability=all",
            "--bind-ro=/usr",
            "--setenv=SYSTEMD_UNIT_PATH=/etc/systemd/system",
            NO_GENERATORS,
            NO_ENVIRONMENT_GENERATORS,
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        a.push(format!("--machine={}", self.machine_name()).into());
        a.push(format!("--uuid={}", self.uuid).into());
        let mut dir = OsString::from("--directory=");
        dir.push(&self.rootfs);
        a.push(dir);
        match &self.net {
            PodNet::Host => {}
            PodNet::None => a.push("--private-network".into()),
            PodNet::Netns(path) => {
                let mut arg = OsString::from("--network-namespace-path=");
                arg.push(path);
                a.push(arg);
            }
        }
        if let Some(map) = self.userns {
            a.push(format!("--private-users={map}").into());
            a.push("--private-users-ownership=map".into());
        }
        if self.notify_ready {
            a.push("--notify-ready=yes".into());
        }
        a.push("--boot".into());
        // the pod's systemd reads these as its kernel command line
        a.push("systemd.show_status=0".into());
        a.push("systemd.log_level=warning".into());
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(net: PodNet) -> NspawnSpec {
        NspawnSpec {
            nspawn: "/usr/bin/systemd-nspawn".into(),
            uuid: "u-1".into(),
            rootfs: "/d/pods/prepare/u-1/stage1/rootfs".into(),
            net,
            host_ipc: false,
            userns: None,
            notify_ready: false,
        }
    }

    #[test]
    fn cold_configuration() {
        let args: Vec<String> =
            spec(PodNet::Netns("/var/run/netns/x".into())).args().iter().map(|a| a.to_string_lossy().into()).collect();
        for want in [
            "--register=no",
            "--keep-unit",
            "--bind-ro=/usr",
            "--kill-signal=SIGRTMIN+14",
            "--capability=all",
            "--setenv=SYSTEMD_UNIT_PATH=/etc/systemd/system",
            "--setenv=SYSTEMD_GENERATOR_PATH=/run/rktlet-no-generators",
            "--setenv=SYSTEMD_ENVIRONMENT_GENERATOR_PATH=/run/rktlet-no-generators",
            "--machine=rkt-u-1",
            "--directory=/d/pods/prepare/u-1/stage1/rootfs",
            "--network-namespace-path=/var/run/netns/x",
        ] {
            assert!(args.iter().any(|a| a == want), "missing {want}");
        }
        let boot = args.iter().position(|a| a == "--boot").expect("--boot");
        assert_eq!(&args[boot + 1..], ["systemd.show_status=0", "systemd.log_level=warning"]);
        assert!(!args.iter().any(|a| a.starts_with("--private-network") || a.starts_with("--notify-ready")));
    }

    #[test]
    fn host_network_and_ipc() {
        let mut s = spec(PodNet::Host);
        s.host_ipc = true;
        s.notify_ready = true;
        let args: Vec<String> = s.args().iter().map(|a| a.to_string_lossy().into()).collect();
        assert!(!args.iter().any(|a| a.contains("network")));
        assert!(args.iter().any(|a| a == "--notify-ready=yes"));
        assert!(s.env().contains(&("SYSTEMD_NSPAWN_SHARE_NS_IPC", "true")));
        assert!(spec(PodNet::None).args().iter().any(|a| a == "--private-network"));
    }

    #[test]
    fn a_user_namespace_of_its_own() {
        let mut s = spec(PodNet::None);
        assert!(!s.args().iter().any(|a| a.to_string_lossy().starts_with("--private-users")));
        s.userns = Some(crate::stage1::userns::IdMap { host: 2_000_000, len: 65536 });
        let args: Vec<String> = s.args().iter().map(|a| a.to_string_lossy().into()).collect();
        assert!(args.contains(&"--private-users=2000000:65536".to_string()), "{args:?}");
        assert!(args.contains(&"--private-users-ownership=map".to_string()), "{args:?}");
        let boot = args.iter().position(|a| a == "--boot").expect("--boot");
        assert!(args.iter().position(|a| a == "--private-users-ownership=map").expect("flag") < boot);
    }
}
