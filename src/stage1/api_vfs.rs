//! The pod's /proc, /sys and /dev as its apps see them. kubelet asks every
//! container for the same masked and read-only paths; applying those below
//! /proc once to the pod's own /proc (in its mount namespace) lets each app's
//! unit bind the pod's /proc, /sys and /dev recursively instead of having
//! systemd mount a fresh /proc and a dozen masks per start: with systemd 252
//! each read-only mount re-reads the whole mountinfo, the largest cost of a
//! start. Apps that ask for less masking (privileged ones, custom lists)
//! keep the per-unit way (`MountAPIVFS=` and binds).
//!
//! The pod's systemd sees the same masks; nspawn already hides or protects
//! most of these paths from it. The /sys ones stay per app. Done at the
//! first start that needs it (an app of the pod's PID namespace), not when
//! the pod boots: every other app's start copies the pod's mounts into its
//! own namespace and lets go of them at its pivot, so each mount of the
//! pod costs every start. Applied once per pod, under a lock; `api-masked`
//! in the pod directory records it.

use super::inject::{self, AT_RECURSIVE, MOUNT_ATTR_RDONLY, MountAttr};
use std::ffi::CString;
use std::io;
use std::path::Path;

/// kubelet's default masked paths (`defaultMaskedPaths`).
pub const DEFAULT_MASKED: [&str; 11] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
/// kubelet's default read-only paths (`defaultReadonlyPaths`).
pub const DEFAULT_READONLY: [&str; 5] = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

/// The cgroup file system, read-only in every app that is not privileged,
/// as containerd mounts it: root in the app could otherwise raise its own
/// limits (cgroup v2), or freeze, kill or move the pod's other processes.
/// Not done in the pod: its systemd writes there. A command exec'd into the
/// app enters its mount namespace, so it sees the same.
pub(crate) const CGROUP_FS: &str = "/sys/fs/cgroup";

/// The read-only paths of an app that is not privileged: those it asked
/// for (kubelet's), and [`CGROUP_FS`], which no CRI request names.
pub(crate) fn app_read_only(mut asked: Vec<String>) -> Vec<String> {
    if !asked.iter().any(|p| p == CGROUP_FS) {
        asked.push(CGROUP_FS.into());
    }
    asked
}

const MARKER: &str = "api-masked";

/// Whether the pod masks `path` itself: kubelet's default masks below /proc.
/// /sys stays as it is, since privileged apps bind the pod's /sys too (they
/// get a fresh /proc).
pub(crate) fn masked_in_pod(path: &str) -> bool {
    path.starts_with("/proc/") && DEFAULT_MASKED.contains(&path)
}

/// Whether `path` is read-only (or masked) in the pod itself.
pub(crate) fn read_only_in_pod(path: &str) -> bool {
    masked_in_pod(path) || (path.starts_with("/proc/") && DEFAULT_READONLY.contains(&path))
}

/// Whether an app asking for `masked` and `readonly` may use the pod's
/// masked API file systems: it must ask for at least what they hide.
pub(crate) fn covers(masked: &[String], readonly: &[String]) -> bool {
    DEFAULT_MASKED.iter().all(|d| masked.iter().any(|m| m == d))
        && DEFAULT_READONLY.iter().all(|d| readonly.iter().any(|r| r == d))
}

/// One mount operation, run inside the pod's mount namespace.
enum Op {
    /// `/dev/null` over a file.
    MaskFile(CString),
    /// A read-only empty tmpfs over a directory.
    MaskDir(CString),
    /// The path bound on itself, then made read-only with everything below it.
    ReadOnly(CString),
}

/// Takes /dev/net/tun out of a booted pod's /dev, before any app runs:
/// nspawn makes it in every pod; containerd gives it to no container that
/// does not ask for it (CRI devices, or privileged: the node's, which the
/// pod then no longer hides).
pub(crate) fn hide_tun(pod_pid1: i32) -> io::Result<()> {
    match std::fs::remove_dir_all(format!("/proc/{pod_pid1}/root/dev/net")) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Applies the default masks to the /proc of the pod in `pod_dir` once.
pub(crate) fn ensure(pod_dir: &Path, pod_pid1: i32) -> io::Result<()> {
    super::once_per_pod(pod_dir, MARKER, || {
        let mut ops = Vec::new();
        for p in DEFAULT_MASKED.into_iter().filter(|p| masked_in_pod(p)) {
            // the pod's view, through its PID 1's root; absent paths need nothing
            let Ok(meta) = std::fs::metadata(format!("/proc/{pod_pid1}/root{p}")) else { continue };
            let c = CString::new(p).map_err(io::Error::other)?;
            ops.push(if meta.is_dir() { Op::MaskDir(c) } else { Op::MaskFile(c) });
        }
        for p in DEFAULT_READONLY.into_iter().filter(|p| p.starts_with("/proc/")) {
            if std::fs::symlink_metadata(format!("/proc/{pod_pid1}/root{p}")).is_ok() {
                ops.push(Op::ReadOnly(CString::new(p).map_err(io::Error::other)?));
            }
        }
        inject::in_pod_ns(pod_pid1, ops.len(), &|i| apply(&ops[i]))?;
        tracing::debug!(pod = %pod_dir.display(), mounts = ops.len(), "masked the pod's /proc for its apps");
        Ok(())
    })
}

/// Runs in the child of `in_pod_ns` (it shares the daemon's memory): raw syscalls only.
fn apply(op: &Op) -> libc::c_long {
    // SAFETY: mount(2) and mount_setattr(2) with C strings and a struct prepared before the clone.
    unsafe {
        match op {
            Op::MaskFile(p) => {
                libc::mount(c"/dev/null".as_ptr(), p.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) as _
            }
            Op::MaskDir(p) => libc::mount(
                c"tmpfs".as_ptr(),
                p.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                c"size=0,mode=555".as_ptr().cast(),
            ) as _,
            Op::ReadOnly(p) => {
                let rc = libc::mount(
                    p.as_ptr(),
                    p.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                );
                if rc < 0 {
                    return rc as _;
                }
                let attr = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
                libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    p.as_ptr(),
                    AT_RECURSIVE,
                    &attr,
                    size_of::<MountAttr>(),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_defaults_are_covered_and_less_is_not() {
        let all = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(covers(&all(&DEFAULT_MASKED), &all(&DEFAULT_READONLY)));
        let mut more = all(&DEFAULT_MASKED);
        more.push("/proc/extra".into());
        assert!(covers(&more, &all(&DEFAULT_READONLY)));
        assert!(!covers(&all(&DEFAULT_MASKED[1..]), &all(&DEFAULT_READONLY)));
        assert!(!covers(&[], &[]));
        // the cgroup file system is read-only whatever was asked for, once
        let ro = app_read_only(all(&DEFAULT_READONLY));
        assert!(covers(&all(&DEFAULT_MASKED), &ro) && ro.last().map(String::as_str) == Some(CGROUP_FS));
        assert_eq!(app_read_only(ro.clone()), ro);
    }
}
