//! stage1: launching a pod's sandbox (the one exec: `systemd-nspawn --boot`
//! with systemd as the pod's PID 1) and talking to the pod's systemd.
//!
//! What the host offers decides how the sandbox is supervised: under
//! a unit of the node's systemd when the host's PID 1 is systemd, detached by the daemon
//! otherwise (containers, CI).

pub mod api_vfs;
pub mod app;
pub mod app_status;
pub mod apparmor;
pub mod appexec;
pub mod boot;
pub mod bus;
pub mod caps;
pub mod crilog;
pub mod embedded;
pub mod entrypoints;
pub mod exec;
pub mod filters;
pub mod host;
pub mod identity;
pub mod inject;
pub mod launch;
pub mod logwriter;
pub mod lsm;
pub mod node_bus;
pub mod nspawn;
pub mod pty;
pub mod rootfs;
pub mod sandbox;
pub mod seccomp;
pub mod spare;
pub mod stop;
pub mod sysctl;
pub mod teardown;
pub mod unit_spec;
pub mod userns;
pub mod vfork;

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
