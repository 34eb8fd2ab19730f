//! The sandbox process's own mount namespace, made just before it execs
//! nspawn.
//!
//! nspawn does not pivot out of the node's mount tree: it moves the pod's
//! root over its copy of that tree, which stays in the pod's mount namespace,
//! below the root, where nothing in the pod sees it. What of it came from a
//! shared mount of the node kept receiving the node's mount events: every
//! network namespace the daemon (or CNI, or another runtime) binds under
//! `/run/netns`, a shared mount as `ip netns` makes it, was copied into
//! every running pod, and each copy woke that pod's systemd, which re-reads
//! its mount table and signals the daemon. A pod start or stop cost work in
//! every running pod (110 pods: twice the CPU per pod start of the first
//! ones). Where the node's root is shared (systemd as PID 1), every
//! container's rootfs mount did the same.
//!
//! So the sandbox unshares a mount namespace and makes it private (nothing
//! propagates into it, or out: the daemon puts what a pod needs into the
//! pod's namespace itself), then detaches what of the node's would otherwise
//! pin another pod's or container's resources for this pod's life: network
//! namespace binds, and, of what came from the node's shared mounts, overlay
//! mounts and mounts below the pods directory. The pod's own network
//! namespace bind is put back, as a private copy, where nspawn opens it.

use super::inject::{self, Propagation};
use nix::mount::{MntFlags, MsFlags};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`, what the choice needs of it.
#[derive(Debug)]
struct Mount {
    id: u64,
    parent: u64,
    point: PathBuf,
    /// In a peer group (`shared:`) or receiving from one (`master:`).
    propagates: bool,
    fstype: String,
}

fn parse(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let f: Vec<&str> = pre.split(' ').collect();
            Some(Mount {
                id: f.first()?.parse().ok()?,
                parent: f.get(1)?.parse().ok()?,
                point: PathBuf::from(crate::cgroup::unescape_mount(f.get(4)?)),
                propagates: f.iter().skip(6).any(|o| o.starts_with("shared:") || o.starts_with("master:")),
                fstype: post.split(' ').next()?.to_string(),
            })
        })
        .collect()
}

/// The mount points to detach, shallowest first, from the mount table as
/// unshared (`mountinfo`, before it was made private): network namespace
/// binds (where their parent is a shared bind of their directory of its
/// own, as `/run/netns`, that one instead: one detach for all), and, of the
/// node's shared mounts, overlays and what is below `pods`; nothing at or
/// below `own` (this pod's directory), nor what holds it or `/usr` (which
/// nspawn binds into the pod), `/` among them.
fn to_detach(mountinfo: &str, pods: &Path, own: &Path) -> Vec<PathBuf> {
    let mounts = parse(mountinfo);
    let by_id = |id: u64| mounts.iter().find(|m| m.id == id);
    let mut points: Vec<PathBuf> = mounts
        .iter()
        .filter_map(|m| {
            if m.fstype == "nsfs" {
                return match by_id(m.parent) {
                    Some(p) if p.propagates && p.point != Path::new("/") && m.point.parent() == Some(&p.point) => {
                        Some(p.point.clone())
                    }
                    _ => Some(m.point.clone()),
                };
            }
            (m.propagates && (m.fstype == "overlay" || m.point.starts_with(pods))).then(|| m.point.clone())
        })
        // what nspawn reads stays: the pod's directory and /usr, and all above them
        .filter(|p| !p.starts_with(own) && !own.starts_with(p) && !Path::new("/usr").starts_with(p))
        .collect();
    // shallowest first: a detached parent takes its children along, and a
    // point below it then reaches what its mount had covered (on a systemd
    // node the netns binds show under /run too, beneath the /run/netns bind)
    points.sort_by_key(|p| p.components().count());
    points.dedup();
    points
}

/// Gives this process (the sandbox, about to exec nspawn) a private mount
/// namespace without the node's mounts that pin other pods' resources (see
/// the module's documentation); `netns`, the pod's network namespace bind
/// that nspawn opens, stays where it is. `pods` is the data directory's
/// pods directory, `own` this pod's directory.
///
/// A process that cannot unshare (one with threads sharing its file system
/// context) keeps the node's namespace, as before: said, not fatal.
pub(crate) fn isolate(pods: &Path, own: &Path, netns: Option<&Path>) -> io::Result<()> {
    if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS) {
        tracing::warn!(error = %e, "the pod's mount namespace stays a copy of the node's (it receives the node's mount events)");
        return Ok(());
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    nix::mount::mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(|e| io::Error::other(format!("making the mount namespace private: {e}")))?;
    let kept = netns.map(|p| inject::clone_tree(p, false, false, Propagation::Private)).transpose()?;
    for point in to_detach(&mountinfo, pods, own) {
        detach_all(&point)?;
    }
    if let (Some(tree), Some(path)) = (kept, netns) {
        put_back(tree, path)?;
    }
    Ok(())
}

/// Detaches every mount at `point`, the whole stack (a bind the node
/// propagated onto itself shows twice there), down to what it was mounted
/// on; none there (or gone with a parent detached before) is fine.
fn detach_all(point: &Path) -> io::Result<()> {
    // (a stack is a few mounts deep at most; the bound keeps a kernel that
    // keeps saying yes from looping forever)
    for _ in 0..64 {
        match nix::mount::umount2(point, MntFlags::MNT_DETACH) {
            Ok(()) => {}
            Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => return Ok(()),
            Err(e) => return Err(io::Error::other(format!("detaching {}: {e}", point.display()))),
        }
    }
    Err(io::Error::other(format!("detaching {}: still a mount point after 64 detaches", point.display())))
}

/// Attaches `tree` (the pod's network namespace bind) at `path` again; where
/// the detach left no file there (its directory was a file system of its
/// own), on a small tmpfs of this namespace's.
fn put_back(tree: OwnedFd, path: &Path) -> io::Result<()> {
    if std::fs::symlink_metadata(path).is_err() {
        let dir = path.parent().ok_or_else(|| io::Error::other(format!("{} has no directory", path.display())))?;
        nix::mount::mount(Some("tmpfs"), dir, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some("size=4k"))
            .map_err(|e| io::Error::other(format!("mounting a tmpfs on {}: {e}", dir.display())))?;
        std::fs::File::create(path)?;
    }
    inject::attach_here(&inject::Attach::new(tree, path)?)
        .map_err(|e| io::Error::new(e.kind(), format!("putting the pod's netns back at {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    // as unshared from a node whose root is private (PID 1 not systemd):
    // `ip netns`'s shared /run/netns with two pods' binds, two pods' app
    // overlays (private), a proc
    const PRIVATE_ROOT: &str = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
22 27 0:21 / /proc rw,nosuid - proc proc rw
45 27 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw
46 45 0:4 net:[4026532300] /run/netns/rktlet-a rw shared:2 - nsfs nsfs rw
47 45 0:4 net:[4026532400] /run/netns/rktlet-b rw shared:3 - nsfs nsfs rw
60 27 0:70 / /var/lib/rktlet/pods/run/a/stage1/rootfs/opt/stage2/0-c/rootfs rw - overlay overlay rw
61 27 0:71 / /var/lib/rktlet/pods/run/b/stage1/rootfs/opt/stage2/0-c/rootfs rw - overlay overlay rw
";

    // a systemd node: everything shared, containerd's rootfs and netns too
    const SHARED_ROOT: &str = "\
27 1 0:30 / / rw shared:1 - overlay overlay rw
22 27 0:21 / /proc rw shared:2 - proc proc rw
30 27 0:25 / /run rw shared:5 - tmpfs tmpfs rw
45 30 0:25 /netns /run/netns rw shared:6 - tmpfs tmpfs rw
46 45 0:4 net:[4026532300] /run/netns/rktlet-a rw shared:7 - nsfs nsfs rw
47 45 0:4 net:[4026532500] /run/netns/cni-1 rw shared:8 - nsfs nsfs rw
60 27 0:70 / /var/lib/rktlet/pods/run/a/stage1/rootfs/opt/stage2/0-c/rootfs rw shared:9 - overlay overlay rw
62 27 0:72 / /var/lib/rktlet/pods/run/c/stage1/rootfs/opt/stage2/0-c/rootfs rw shared:10 - overlay overlay rw
70 30 0:80 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/x/rootfs rw shared:11 - overlay overlay rw
71 30 0:81 / /run/containerd/io.containerd.grpc.v1.cri/sandboxes/x/shm rw shared:12 - tmpfs shm rw
";

    fn paths(v: &[PathBuf]) -> Vec<&str> {
        v.iter().map(|p| p.to_str().unwrap_or("?")).collect()
    }

    #[test]
    fn a_private_root_loses_the_netns_directory_in_one_detach() {
        let pods = Path::new("/var/lib/rktlet/pods");
        let got = to_detach(PRIVATE_ROOT, pods, &pods.join("run/b"));
        // the overlays came from private mounts: nothing propagates through
        // them, and they are what the node copied before (not detached here)
        assert_eq!(paths(&got), ["/run/netns"]);
    }

    #[test]
    fn a_shared_root_loses_netns_binds_overlays_and_other_pods_mounts() {
        let pods = Path::new("/var/lib/rktlet/pods");
        let got = to_detach(SHARED_ROOT, pods, &pods.join("run/c"));
        assert_eq!(
            paths(&got),
            [
                "/run/netns",
                "/run/containerd/io.containerd.runtime.v2.task/k8s.io/x/rootfs",
                "/var/lib/rktlet/pods/run/a/stage1/rootfs/opt/stage2/0-c/rootfs",
            ]
        );
    }

    #[test]
    fn netns_binds_under_the_netns_directory_bind_go_after_it() {
        // /run and its /run/netns bind are peers: each netns bind shows twice
        let table = "\
27 1 254:0 / / rw shared:1 - ext4 /dev/vda rw
30 27 0:25 / /run rw shared:5 - tmpfs tmpfs rw
45 30 0:25 /netns /run/netns rw shared:5 - tmpfs tmpfs rw
46 45 0:4 net:[1] /run/netns/rktlet-a rw shared:7 - nsfs nsfs rw
47 30 0:4 net:[1] /run/netns/rktlet-a rw shared:7 - nsfs nsfs rw
";
        let got = to_detach(table, Path::new("/p"), Path::new("/p/run/u"));
        assert_eq!(paths(&got), ["/run/netns", "/run/netns/rktlet-a"]);
    }

    #[test]
    fn what_holds_the_pod_or_usr_stays() {
        let table = "\
27 1 0:30 / / rw shared:1 - overlay overlay rw
28 27 0:31 / /usr rw shared:2 - overlay overlay rw
29 27 0:32 / /data rw shared:3 - overlay overlay rw
30 29 0:33 / /data/pods/run/u/stage1/rootfs/opt/stage2/0-c/rootfs rw shared:4 - overlay overlay rw
";
        let got = to_detach(table, Path::new("/data/pods"), Path::new("/data/pods/run/u"));
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_netns_bind_on_the_root_directory_goes_alone() {
        let table = "\
27 1 254:0 / / rw shared:1 - ext4 /dev/vda rw
46 27 0:4 net:[1] /var/run/netns/x rw shared:2 - nsfs nsfs rw
";
        let got = to_detach(table, Path::new("/p"), Path::new("/p/run/u"));
        assert_eq!(paths(&got), ["/var/run/netns/x"]);
    }
}
