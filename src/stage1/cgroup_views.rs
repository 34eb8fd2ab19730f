//! The pod's cgroup v1 hierarchies, mounted once per pod where its apps'
//! own cgroups are copied from.
//!
//! On a node with cgroup v1 every app started through appexec shows its
//! own cgroups at its /sys/fs/cgroup, as runc shows a container its
//! limits. The pod's mount namespace has only the unified hierarchy, so
//! appexec used to mount each v1 hierarchy afresh for each app; making a
//! v1 cgroup file system drains the offline cgroups of the node's whole
//! default hierarchy first (the kernel's `cgroup1_get_tree`), and with the
//! tmpfs and directories they were parked in, that was about 0.4 ms of
//! each container start on a 2-CPU node. Now the daemon mounts them once,
//! when the pod has booted, at [`IN_POD`]`/PLACE` in the pod's mount
//! namespace (from inside the pod's cgroup namespace: each one's root is
//! that namespace's root, as the pod's processes see it), and appexec clones
//! the app's cgroup from there (`cgroupviews=`). Apps never see them: an
//! app's mount namespace leaves the pod's mounts behind at its pivot. They
//! are read-only (a systemd node roots some of the pod's hierarchies at the
//! node's root: nothing that reaches the pod's mounts may write there) and
//! private (an app's copy carries no sharing, which CRIU could not restore);
//! appexec makes a privileged app's copy writable.
//!
//! Not for a pod with a user namespace (its processes may not mount v1
//! hierarchies; appexec leaves them out there, and so would these): such a
//! pod, or one booted by an older rktlet, keeps appexec's own mounts.

use crate::cgroup::Layout;
use crate::stage1::inject::{self, CgroupV1};
use std::ffi::CString;
use std::io;
use std::path::Path;

/// Where the hierarchies are, in the pod (its /run, a tmpfs of its own
/// that no app binds).
pub(crate) const IN_POD: &str = "/run/.rkt-cgroup";
/// The pod directory's marker: the hierarchies are mounted.
const MARKER: &str = "cgroup-views";

/// The node's v1 hierarchies (the daemon's cgroup layout), each at its
/// place below `base` (as appexec names places: the controllers as listed,
/// or the name of a named hierarchy). Empty on pure cgroup v2.
pub(crate) fn hierarchies(layout: &Layout, base: &str) -> Vec<CgroupV1> {
    let c = |s: &str| CString::new(s).ok();
    layout
        .hierarchies
        .iter()
        .filter(|h| !h.is_unified() && !h.controllers.is_empty())
        .filter_map(|h| {
            let named = match h.controllers.as_slice() {
                [one] => one.strip_prefix("name="),
                _ => None,
            };
            let (place, flags, name) = match named {
                Some(name) => (name.to_string(), vec![c("none")?], Some(c(name)?)),
                None => {
                    (h.controllers.join(","), h.controllers.iter().map(|x| c(x)).collect::<Option<Vec<_>>>()?, None)
                }
            };
            if place.is_empty() || place.contains('/') || place.starts_with('.') {
                return None;
            }
            Some(CgroupV1 { dir: c(&format!("{base}/{place}"))?, flags, name })
        })
        .collect()
}

/// Mounts the node's v1 hierarchies in a booted pod, once (a pod with a
/// user namespace, or a node without v1, gets none).
pub(crate) fn ensure(pod_dir: &Path, pod_pid1: i32) -> io::Result<()> {
    let hierarchies = hierarchies(Layout::cached()?, IN_POD);
    if hierarchies.is_empty() || own_user_namespace(pod_pid1)? {
        return Ok(());
    }
    super::once_per_pod(pod_dir, MARKER, || {
        let t0 = std::time::Instant::now();
        let base = CString::new(IN_POD).map_err(io::Error::other)?;
        inject::mount_cgroups_v1(pod_pid1, &base, &hierarchies)
            .map_err(|e| io::Error::new(e.kind(), format!("mounting the pod's cgroup v1 hierarchies: {e}")))?;
        tracing::debug!(pod = %pod_dir.display(), micros = t0.elapsed().as_micros() as u64, "the pod's cgroup v1 hierarchies mounted");
        Ok(())
    })
}

/// Where appexec looks for the pod's hierarchies (`cgroupviews=`) on a node
/// with v1 ones: no look at the pod's directory on a start's path; appexec
/// takes only a cgroup file system found there (a pod without them, one
/// with a user namespace or booted before, falls back to its own mounts).
pub(crate) fn for_node() -> Option<&'static str> {
    Layout::cached().is_ok_and(|l| l.hierarchies.iter().any(|h| !h.is_unified())).then_some(IN_POD)
}

/// Whether the pod has a user namespace of its own.
fn own_user_namespace(pod_pid1: i32) -> io::Result<bool> {
    let ino = |p: &str| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    Ok(ino(&format!("/proc/{pod_pid1}/ns/user"))? != ino("/proc/self/ns/user")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_v1_hierarchy_is_mounted_at_its_place() {
        let cgroup = "12:pids:/a\n10:cpu,cpuacct:/a\n1:name=systemd:/a/s\n0::/a\n";
        let h = hierarchies(&Layout::parse(cgroup, ""), "/run/v");
        let c = |s: &str| CString::new(s).expect("c string");
        assert_eq!(
            h,
            [
                CgroupV1 { dir: c("/run/v/pids"), flags: vec![c("pids")], name: None },
                CgroupV1 { dir: c("/run/v/cpu,cpuacct"), flags: vec![c("cpu"), c("cpuacct")], name: None },
                CgroupV1 { dir: c("/run/v/systemd"), flags: vec![c("none")], name: Some(c("systemd")) },
            ]
        );
        // pure v2: nothing; a place appexec would refuse: left out
        assert!(hierarchies(&Layout::parse("0::/a\n", ""), "/run/v").is_empty());
        assert!(hierarchies(&Layout::parse("3:name=a/b:/x\n4:name=.x:/x\n", ""), "/run/v").is_empty());
    }
}
