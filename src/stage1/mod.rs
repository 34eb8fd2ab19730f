//! stage1: launching a pod's sandbox (the one exec: `systemd-nspawn --boot`
//! with systemd as the pod's PID 1) and talking to the pod's systemd.
//!
//! What the host offers decides how the sandbox is supervised: under
//! a unit of the node's systemd when the host's PID 1 is systemd, detached by the daemon
//! otherwise (containers, CI).

pub mod api_vfs;
pub(crate) mod app;
pub(crate) mod app_status;
pub(crate) mod apparmor;
pub(crate) mod appexec;
pub(crate) mod boot;
pub mod bus;
pub mod caps;
pub(crate) mod cgroup_views;
pub mod crilog;
pub(crate) mod embedded;
pub(crate) mod entrypoints;
pub mod exec;
pub(crate) mod filters;
pub mod host;
pub mod identity;
pub mod inject;
pub(crate) mod launch;
pub(crate) mod logwriter;
pub mod lsm;
pub(crate) mod node_bus;
pub(crate) mod nspawn;
pub(crate) mod pty;
pub(crate) mod rootfs;
pub(crate) mod sandbox;
pub(crate) mod sandbox_ns;
pub(crate) mod seccomp;
pub(crate) mod spare;
pub(crate) mod stop;
pub(crate) mod sysctl;
pub(crate) mod teardown;
pub(crate) mod trash;
pub(crate) mod unit_spec;
pub(crate) mod userns;
pub(crate) mod vfork;

/// Runs `f` once per pod: `marker` in the pod directory records that it was
/// done; `<marker>.lock` keeps two callers from doing it at once.
pub(crate) fn once_per_pod(
    pod_dir: &std::path::Path,
    marker: &str,
    f: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<()> {
    let done = pod_dir.join(marker);
    if done.exists() {
        return Ok(());
    }
    let _lock = rkt::lock::exclusive_file(&pod_dir.join(format!("{marker}.lock")))?;
    if done.exists() {
        return Ok(());
    }
    f()?;
    std::fs::write(&done, b"")
}
