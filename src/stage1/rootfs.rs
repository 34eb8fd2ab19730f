//! The lean host-flavor stage1 rootfs, generated into `$P/stage1/rootfs`.
//!
//! About 50 small files: the host's `/usr` is bind-mounted read-only by
//! nspawn, so only the skeleton, identity files and our own units live here.
//! The unit search path inside the pod is restricted to `/etc/systemd/system`
//! (SYSTEMD_UNIT_PATH), which is why the shutdown units are linked in
//! explicitly and no host unit is ever loaded (reference: pod-boot-fast.md).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, symlink};
use std::path::{Path, PathBuf};

/// The pod's top unit; default.target points at it.
pub(crate) const POD_TARGET: &str = "pod.target";
/// Unit that flips `/rkt/supervisor-status` to `ready` once systemd runs units.
pub(crate) const READY_UNIT: &str = "supervisor-ready.service";
/// Readiness link, relative to the stage1 rootfs (rkt's format).
pub(crate) use rkt::pod::SUPERVISOR_STATUS;

const SHUTDOWN_UNITS: [&str; 9] = [
    "shutdown.target",
    "umount.target",
    "final.target",
    "halt.target",
    "systemd-halt.service",
    "poweroff.target",
    "systemd-poweroff.service",
    "exit.target",
    "systemd-exit.service",
];

/// What a pod's identity files say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    /// Written to `/etc/machine-id` before boot (saves systemd an fsync).
    pub machine_id: String,
    pub hostname: String,
    /// Full `/etc/resolv.conf` content.
    pub resolv_conf: String,
    /// Full `/etc/hosts` content.
    pub hosts: String,
}

/// Paths inside a stage1 rootfs.
#[derive(Debug, Clone)]
pub(crate) struct Stage1Root {
    root: PathBuf,
}

impl Stage1Root {
    pub(crate) fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.root
    }

    pub(crate) fn supervisor_status(&self) -> PathBuf {
        self.root.join(SUPERVISOR_STATUS)
    }

    /// True once the pod's systemd has run the readiness unit.
    pub(crate) fn is_ready(&self) -> bool {
        rkt::pod::stage1_is_ready(&self.root)
    }

    /// Directory of per-app status files (`/rkt/status`).
    pub(crate) fn status_dir(&self) -> PathBuf {
        self.root.join("rkt/status")
    }

    /// Marks the pod ready, as its readiness unit does (for a pod whose
    /// starter hears its systemd's READY=1 instead): the link made beside and
    /// renamed over, so no reader sees a half-made one.
    pub(crate) fn mark_ready(&self) -> io::Result<()> {
        let link = self.supervisor_status();
        let tmp = link.with_extension("new");
        let _ = fs::remove_file(&tmp);
        symlink("ready", &tmp)?;
        fs::rename(&tmp, &link)
    }

    /// Builds the skeleton, units and identity files. The rootfs must not
    /// exist yet. Without `ready_unit` nothing in the pod marks it ready:
    /// its starter does ([`Self::mark_ready`]).
    pub(crate) fn build(&self, id: &Identity, ready_unit: bool) -> io::Result<()> {
        let mut dirs = fs::DirBuilder::new();
        dirs.mode(0o755).recursive(true);
        let r = &self.root;
        for d in [
            "usr",
            "etc/systemd/system",
            "proc",
            "sys",
            "dev",
            "run",
            "tmp",
            "var/tmp",
            "var/log",
            "root",
            "rkt/status",
            "rkt/env",
            "opt/stage2",
        ] {
            dirs.create(r.join(d))?;
        }
        for (link, target) in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")] {
            symlink(target, r.join(link))?;
        }
        symlink("../run", r.join("var/run"))?;
        // a symlink into /usr would dangle until nspawn's bind mount; systemd reads it early
        let os_release = fs::read("/etc/os-release").or_else(|_| fs::read("/usr/lib/os-release"))?;
        fs::write(r.join("etc/os-release"), os_release)?;
        fs::write(
            r.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        )?;
        fs::write(r.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n")?;
        fs::write(r.join("etc/nsswitch.conf"), "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n")?;
        fs::write(r.join("etc/machine-id"), format!("{}\n", id.machine_id))?;
        self.write_network_identity(id)?;
        self.write_units(ready_unit)?;
        Ok(())
    }

    /// (Re)writes hostname, hosts and resolv.conf (also used to adapt a pod).
    pub(crate) fn write_network_identity(&self, id: &Identity) -> io::Result<()> {
        let etc = self.root.join("etc");
        rkt::fs::write_volatile(&etc.join("hostname"), format!("{}\n", id.hostname).as_bytes(), 0o644)?;
        rkt::fs::write_volatile(&etc.join("hosts"), id.hosts.as_bytes(), 0o644)?;
        rkt::fs::write_volatile(&etc.join("resolv.conf"), id.resolv_conf.as_bytes(), 0o644)
    }

    fn write_units(&self, ready_unit: bool) -> io::Result<()> {
        let units = self.root.join("etc/systemd/system");
        let wants = if ready_unit { format!("Wants={READY_UNIT}\n") } else { String::new() };
        fs::write(
            units.join(POD_TARGET),
            format!(
                "[Unit]\nDescription=rktlet pod\nAllowIsolate=yes\n{wants}\
                 # keeps an empty pod alive: nothing conflicts with it but halt\nConflicts=halt.target\n"
            ),
        )?;
        symlink(POD_TARGET, units.join("default.target"))?;
        // ln is the host's (/usr is shared); it runs once per pod boot
        if ready_unit {
            fs::write(
                units.join(READY_UNIT),
                "[Unit]\nDescription=Mark the pod ready for rktlet\nDefaultDependencies=no\n\n\
                 [Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/usr/bin/ln -sfn ready /rkt/supervisor-status\n",
            )?;
        }
        for unit in SHUTDOWN_UNITS {
            symlink(Path::new("/usr/lib/systemd/system").join(unit), units.join(unit))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_bootable_skeleton() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = Stage1Root::new(t.path().join("rootfs"));
        let id = Identity {
            machine_id: "0123456789abcdef0123456789abcdef".into(),
            hostname: "web-0".into(),
            resolv_conf: "nameserver 10.0.0.10\n".into(),
            hosts: crate::net::dns::hosts("web-0", &[]),
        };
        root.build(&id, true).expect("build");
        let r = root.path();
        assert!(r.join("usr").is_dir(), "nspawn refuses a tree without /usr");
        assert_eq!(fs::read_link(r.join("var/run")).expect("link"), Path::new("../run"));
        assert_eq!(fs::read_to_string(r.join("etc/hostname")).expect("hostname"), "web-0\n");
        assert_eq!(fs::read_to_string(r.join("etc/machine-id")).expect("id").trim(), id.machine_id);
        assert!(fs::read_to_string(r.join("etc/hosts")).expect("hosts").contains("web-0"));
        assert_eq!(fs::read_link(r.join("etc/systemd/system/default.target")).expect("default"), Path::new(POD_TARGET));
        let pod_target = fs::read_to_string(r.join("etc/systemd/system/pod.target")).expect("pod.target");
        assert!(pod_target.contains("Wants=supervisor-ready.service"));
        let ready = fs::read_to_string(r.join("etc/systemd/system").join(READY_UNIT)).expect("ready unit");
        assert!(ready.contains("DefaultDependencies=no"));
        assert!(ready.contains("ExecStart=/usr/bin/ln -sfn ready /rkt/supervisor-status\n"), "{ready}");
        for unit in SHUTDOWN_UNITS {
            assert!(fs::symlink_metadata(r.join("etc/systemd/system").join(unit)).is_ok(), "{unit}");
        }
        assert!(!root.is_ready());
        symlink("ready", root.supervisor_status()).expect("mark ready");
        assert!(root.is_ready());
        assert!(root.build(&id, true).is_err(), "building over an existing rootfs fails");
    }

    #[test]
    fn a_pod_its_starter_marks_ready() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = Stage1Root::new(t.path().join("rootfs"));
        root.build(&Identity::default(), false).expect("build");
        let units = root.path().join("etc/systemd/system");
        let pod_target = fs::read_to_string(units.join(POD_TARGET)).expect("pod.target");
        assert!(!pod_target.contains("Wants="), "{pod_target}");
        assert!(!units.join(READY_UNIT).exists());
        assert!(!root.is_ready());
        root.mark_ready().expect("mark");
        assert!(root.is_ready());
        root.mark_ready().expect("marking again");
        assert!(root.is_ready());
    }
}
