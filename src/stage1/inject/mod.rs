//! Putting mounts into a running pod's mount namespace.
//!
//! A pod's root is a private bind of its stage1 directory: mounts made on the
//! host later do not propagate into it. So a mount is first made (or cloned)
//! on the host as a detached tree (`open_tree(OPEN_TREE_CLONE)`), then a
//! child enters the pod's mount namespace and attaches it there with
//! `move_mount`. The same trick serves app rootfs overlays and host-path
//! volumes; no program is exec'd.
//!
//! Runs in: the daemon, which prepares everything (every C string and
//! descriptor); what runs in the child cloned with the daemon's memory, raw
//! syscalls only, is in [`child`].

mod child;

use child::NsJob;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const OPEN_TREE_CLONE: libc::c_uint = 1;
pub(crate) const AT_RECURSIVE: libc::c_uint = 0x8000;
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
pub(crate) struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

/// Mount propagation of a volume, as CRI names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Propagation {
    #[default]
    Private,
    Slave,
    Shared,
}

impl Propagation {
    /// The name recorded in the pod manifest.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Propagation::Private => "private",
            Propagation::Slave => "slave",
            Propagation::Shared => "shared",
        }
    }

    /// A recorded name; none (or an unknown one) is private.
    pub(crate) fn parse(s: Option<&str>) -> Propagation {
        match s {
            Some("slave") => Propagation::Slave,
            Some("shared") => Propagation::Shared,
            _ => Propagation::Private,
        }
    }
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("path contains a NUL byte"))
}

/// A detached copy of a volume's whole mount tree at `src` on the host,
/// given `propagation`, and read-only as the CRI asks: `read_only` alone
/// makes the volume's own mount read-only and leaves the mounts below it as
/// they are; with `recursive_read_only` every mount of the tree is.
pub(crate) fn clone_volume(
    src: &Path,
    read_only: bool,
    recursive_read_only: bool,
    propagation: Propagation,
) -> io::Result<OwnedFd> {
    let tree = clone_tree(src, true, recursive_read_only, propagation)?;
    if read_only && !recursive_read_only {
        let attr = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
        let empty = c"";
        // SAFETY: mount_setattr(2) on our tree descriptor (its top mount only) with a properly sized struct.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree.as_raw_fd(),
                empty.as_ptr(),
                libc::AT_EMPTY_PATH as libc::c_uint,
                &attr,
                size_of::<MountAttr>(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("mount_setattr {} (read-only): {e}", src.display())));
        }
    }
    Ok(tree)
}

/// A detached copy of the mount tree at `src` on the host (recursive when
/// asked), made read-only and given `propagation` if asked.
pub(crate) fn clone_tree(
    src: &Path,
    recursive: bool,
    read_only: bool,
    propagation: Propagation,
) -> io::Result<OwnedFd> {
    let path = cstr(src)?;
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: open_tree(2) with a valid C string; returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::new(
            io::Error::last_os_error().kind(),
            format!("open_tree {}: {}", src.display(), io::Error::last_os_error()),
        ));
    }
    // SAFETY: the kernel just returned this descriptor; we own it.
    let tree = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let prop = match propagation {
        Propagation::Private => libc::MS_PRIVATE,
        Propagation::Slave => libc::MS_SLAVE,
        Propagation::Shared => libc::MS_SHARED,
    };
    let attr = MountAttr {
        attr_set: if read_only { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: 0,
        propagation: prop,
        userns_fd: 0,
    };
    let empty = c"";
    let at = if recursive { AT_RECURSIVE } else { 0 } | libc::AT_EMPTY_PATH as libc::c_uint;
    // SAFETY: mount_setattr(2) on our tree descriptor with a properly sized struct.
    let rc = unsafe {
        libc::syscall(libc::SYS_mount_setattr, tree.as_raw_fd(), empty.as_ptr(), at, &attr, size_of::<MountAttr>())
    };
    if rc < 0 {
        return Err(io::Error::new(
            io::Error::last_os_error().kind(),
            format!("mount_setattr {}: {}", src.display(), io::Error::last_os_error()),
        ));
    }
    Ok(tree)
}

/// Whether the kernel has mount_setattr(2) (Linux 5.12), which makes a
/// mount tree read-only as a whole (`AT_RECURSIVE`); asked once.
pub(crate) fn recursive_read_only_supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        // no descriptor and no attributes: a kernel with the call says EBADF
        // or EINVAL, one without it ENOSYS
        // SAFETY: mount_setattr(2) with an invalid descriptor and a null struct of size 0 touches no memory.
        let rc = unsafe {
            libc::syscall(libc::SYS_mount_setattr, -1, c"".as_ptr(), 0, std::ptr::null::<MountAttr>(), 0usize)
        };
        let supported = rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS);
        if !supported {
            tracing::info!("the kernel has no mount_setattr(2): recursive read-only mounts are not offered");
        }
        supported
    })
}

/// A mount to attach inside the pod: a detached tree and its target path as
/// seen inside the pod, or a path inside a root directory of the pod.
pub(crate) struct Attach {
    pub tree: OwnedFd,
    pub target: CString,
    /// When set, `target` is relative to this directory (in the pod) and
    /// resolved as if it were `/`: the symlinks on the way, those of the
    /// image and of volumes mounted before alike, cannot lead out of it.
    pub root: Option<CString>,
}

impl Attach {
    pub(crate) fn new(tree: OwnedFd, target_in_pod: &Path) -> io::Result<Self> {
        Ok(Attach { tree, target: cstr(target_in_pod)?, root: None })
    }

    /// A tree to attach at `inner` inside `root` (an app's rootfs in the pod).
    pub(crate) fn in_root(tree: OwnedFd, root: &Path, inner: &Path) -> io::Result<Self> {
        let relative = inner.strip_prefix("/").unwrap_or(inner);
        let relative = if relative.as_os_str().is_empty() { Path::new(".") } else { relative };
        Ok(Attach { tree, target: cstr(relative)?, root: Some(cstr(root)?) })
    }
}

/// Attaches `m` in this process's own mount namespace (not a pod's).
pub(crate) fn attach_here(m: &Attach) -> io::Result<()> {
    if child::attach_one(m) < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("move_mount to {}: {e}", m.target.to_string_lossy())));
    }
    Ok(())
}

/// Stack of the child of [`in_pod_ns`] (a few raw syscalls).
const NS_CHILD_STACK: usize = 64 * 1024;

/// Runs `op` for each item in a child that entered the pod's mount namespace
/// (`/proc/<pod_pid1>/ns/mnt`); the first failure is reported as (index, errno).
///
/// The child is cloned `posix_spawn`-style ([`super::vfork`]): it shares
/// the daemon's memory instead of copying its page tables, which made a fork
/// most of the cost of a mount.
pub(crate) fn in_pod_ns(pod_pid1: i32, count: usize, op: &dyn Fn(usize) -> libc::c_long) -> io::Result<()> {
    in_pod_namespaces(pod_pid1, false, count, op)
}

/// The pod's namespace `name` (`mnt`, `cgroup`), opened.
fn pod_ns(pod_pid1: i32, name: &str) -> io::Result<std::fs::File> {
    let path = format!("/proc/{pod_pid1}/ns/{name}");
    std::fs::File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("opening {path}: {e}")))
}

/// [`in_pod_ns`], in the pod's cgroup namespace too when `cgroup_ns`.
fn in_pod_namespaces(
    pod_pid1: i32,
    cgroup_ns: bool,
    count: usize,
    op: &dyn Fn(usize) -> libc::c_long,
) -> io::Result<()> {
    let ns = pod_ns(pod_pid1, "mnt")?;
    let cgroup = cgroup_ns.then(|| pod_ns(pod_pid1, "cgroup")).transpose()?;
    let cgroup_ns = cgroup.as_ref().map_or(-1, |f| f.as_raw_fd());
    let mut job = NsJob { ns: ns.as_raw_fd(), cgroup_ns, count, op, report: [-2, 0] };
    // SAFETY: `job` outlives the child (the call returns once it exited);
    // ns_child makes raw syscalls only and ends in _exit.
    let pid = unsafe {
        super::vfork::clone(
            child::ns_child,
            &mut job as *mut NsJob<'_> as *mut libc::c_void,
            NS_CHILD_STACK,
            0,
            std::ptr::null_mut(),
        )
    }?;
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    match (job.report[0], job.report[1]) {
        (-2, _) => Err(io::Error::other("the namespace helper died")),
        (_, 0) => Ok(()),
        (-1, e) => Err(io::Error::new(
            io::Error::from_raw_os_error(e).kind(),
            format!("entering the pod's mount namespace: {}", io::Error::from_raw_os_error(e)),
        )),
        (i, e) => Err(io::Error::new(
            io::Error::from_raw_os_error(e).kind(),
            format!("item {i}: {}", io::Error::from_raw_os_error(e)),
        )),
    }
}

/// Attaches every tree at its target inside the pod, in order (a volume
/// inside an app rootfs comes after the rootfs).
pub(crate) fn attach(pod_pid1: i32, mounts: &[Attach]) -> io::Result<()> {
    in_pod_ns(pod_pid1, mounts.len(), &|i| child::attach_one(&mounts[i]))
}

/// A cgroup v1 hierarchy to mount in a pod ([`mount_cgroups_v1`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupV1 {
    /// Where, in the pod.
    pub dir: CString,
    /// The controllers that make it (mount flags); `none` for a named one.
    pub flags: Vec<CString>,
    /// The name of a named hierarchy (`name=systemd`: `systemd`).
    pub name: Option<CString>,
}

/// Makes directory `base` in the pod, then mounts each hierarchy at its
/// directory there, from inside the pod's cgroup namespace (each one's
/// root is then that namespace's root, as the pod's processes see it).
pub(crate) fn mount_cgroups_v1(pod_pid1: i32, base: &CString, hierarchies: &[CgroupV1]) -> io::Result<()> {
    in_pod_namespaces(pod_pid1, true, hierarchies.len() + 1, &|i| match i {
        0 => child::make_dir(base),
        i => child::mount_cgroup_v1(&hierarchies[i - 1]),
    })
}

/// Lazily unmounts the given paths inside the pod (deepest first is the
/// caller's order); paths that are not mounts are fine.
pub(crate) fn detach(pod_pid1: i32, targets: &[CString]) -> io::Result<()> {
    in_pod_ns(pod_pid1, targets.len(), &|i| child::unmount(&targets[i]))
}

/// The pod's PID 1 (its systemd) as a host pid: the single child of the
/// sandbox process.
pub fn pod_pid1(sandbox_pid: i32) -> io::Result<i32> {
    let children = std::fs::read_to_string(format!("/proc/{sandbox_pid}/task/{sandbox_pid}/children"))?;
    let mut it = children.split_whitespace().filter_map(|p| p.parse().ok());
    match (it.next(), it.next()) {
        (Some(pid), None) => Ok(pid),
        _ => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("pod process {sandbox_pid} has not exactly one child: {children:?}"),
        )),
    }
}

/// Overlay mount options for an app rootfs.
pub(crate) fn overlay_options(lower: &Path, upper: &Path, work: &Path) -> String {
    format!("lowerdir={},upperdir={},workdir={}", lower.display(), upper.display(), work.display())
}

/// Whether overlayfs took `volatile` here (Linux 5.10 and later); set false
/// once a mount failed with it and worked without it.
static OVERLAY_VOLATILE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Mounts an app's rootfs overlay at `target`, `volatile` where the kernel
/// has it: the overlay then never syncs its upper file system, neither on an
/// fsync in the container nor when it is unmounted (the last unmount of a
/// default overlay waits for a journal commit of the node's file system:
/// 1.1 ms against 0.15 ms measured here). A writable layer is thrown away
/// with its container and never outlives a reboot (nor do pods here), so
/// nothing is lost that could have been kept. The kernel refuses to mount a
/// volatile overlay's upper and work directories again; no path here does.
pub(crate) fn mount_overlay(lower: &Path, upper: &Path, work: &Path, target: &Path) -> io::Result<()> {
    use std::sync::atomic::Ordering;
    let opts = overlay_options(lower, upper, work);
    let mount = |opts: &str| {
        nix::mount::mount(Some("overlay"), target, Some("overlay"), nix::mount::MsFlags::empty(), Some(opts))
    };
    if OVERLAY_VOLATILE.load(Ordering::Relaxed) {
        match mount(&format!("{opts},volatile")) {
            Ok(()) => return Ok(()),
            // an older kernel: without it, and never again if that works
            Err(nix::errno::Errno::EINVAL) => {
                mount(&opts)?;
                tracing::info!("overlayfs has no 'volatile' here: writable layers are mounted without it");
                OVERLAY_VOLATILE.store(false, Ordering::Relaxed);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(mount(&opts)?)
}

/// A device node of the node's `/dev`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeDevice {
    /// Its path (`/dev/...`).
    pub path: String,
    pub block: bool,
    pub major: u64,
    pub minor: u64,
    /// Its permission bits on the node.
    pub mode: u32,
}

/// The node's character and block devices below `dev` (`/dev`), as a
/// privileged container gets them (runc's walk): not those of its own
/// instances (`pts`, `shm`, `mqueue`), nor the console or `ptmx`, which the
/// pod has for itself; nor those whose path `skip` says the pod has already.
pub(crate) fn node_devices(dev: &Path, skip: impl Fn(&Path) -> bool) -> io::Result<Vec<NodeDevice>> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    const OWN: [&str; 6] = ["pts", "shm", "mqueue", "fd", "console", "ptmx"];
    let mut out = Vec::new();
    let mut dirs = vec![dev.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let path = entry.path();
            if dir == dev && OWN.iter().any(|o| entry.file_name() == *o) {
                continue;
            }
            // lstat: links are not followed, so the walk stays in /dev
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            let t = meta.file_type();
            if t.is_dir() {
                dirs.push(path);
            } else if (t.is_char_device() || t.is_block_device()) && !skip(&path) {
                out.push(NodeDevice {
                    path: Path::new("/dev").join(path.strip_prefix(dev).unwrap_or(&path)).display().to_string(),
                    block: t.is_block_device(),
                    major: nix::sys::stat::major(meta.rdev()),
                    minor: nix::sys::stat::minor(meta.rdev()),
                    mode: meta.mode() & 0o777,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

#[cfg(test)]
mod node_device_tests {
    use super::*;

    #[test]
    fn propagation_names_round_trip() {
        for p in [Propagation::Private, Propagation::Slave, Propagation::Shared] {
            assert_eq!(Propagation::parse(Some(p.as_str())), p);
        }
        assert_eq!(Propagation::parse(None), Propagation::Private, "volumes recorded before rktlet kept it");
        assert_eq!(Propagation::parse(Some("bogus")), Propagation::Private);
    }

    #[test]
    fn the_nodes_devices_but_the_pods_own() {
        let t = tempfile::tempdir().expect("tempdir");
        let dev = t.path();
        for d in ["pts", "net", "sub/deeper"] {
            std::fs::create_dir_all(dev.join(d)).expect("dir");
        }
        let mk = |p: &str, major: u64, minor: u64| {
            nix::sys::stat::mknod(
                &dev.join(p),
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o600),
                nix::sys::stat::makedev(major, minor),
            )
            .expect("mknod");
        };
        mk("null", 1, 3);
        mk("kvm", 10, 232);
        mk("net/tun", 10, 200);
        mk("sub/deeper/x", 240, 1);
        mk("pts/0", 136, 0);
        mk("ptmx", 5, 2);
        std::fs::write(dev.join("plain"), b"").expect("file");
        std::os::unix::fs::symlink("/etc/passwd", dev.join("link")).expect("link");
        let got = node_devices(dev, |p| p.ends_with("null")).expect("walk");
        let paths: Vec<&str> = got.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/dev/kvm", "/dev/net/tun", "/dev/sub/deeper/x"]);
        assert_eq!((got[0].major, got[0].minor, got[0].block, got[0].mode), (10, 232, false, 0o600));
    }
}
