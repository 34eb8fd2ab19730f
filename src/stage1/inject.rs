//! Putting mounts into a running pod's mount namespace.
//!
//! A pod's root is a private bind of its stage1 directory: mounts made on the
//! host later do not propagate into it. So a mount is first made (or cloned)
//! on the host as a detached tree (`open_tree(OPEN_TREE_CLONE)`), then a
//! forked child enters the pod's mount namespace and attaches it there with
//! `move_mount`. The same trick serves app rootfs overlays and host-path
//! volumes; no program is exec'd.
//!
//! Runs in: the daemon (prepares everything, including every C string and
//! descriptor) and a forked child that makes only raw syscalls before
//! `_exit`, as required after fork in a multi-threaded process.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const OPEN_TREE_CLONE: libc::c_uint = 1;
pub(crate) const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;

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
pub enum Propagation {
    #[default]
    Private,
    Slave,
    Shared,
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("path contains a NUL byte"))
}

/// A detached copy of the mount tree at `src` on the host (recursive when
/// asked), made read-only and given `propagation` if asked.
pub fn clone_tree(src: &Path, recursive: bool, read_only: bool, propagation: Propagation) -> io::Result<OwnedFd> {
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

/// Hardening bits for mounts that must not carry setuid binaries or devices.
pub fn nosuid_nodev(tree: &OwnedFd) -> io::Result<()> {
    let attr = MountAttr { attr_set: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: mount_setattr(2) on our tree descriptor with a properly sized struct.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr,
            size_of::<MountAttr>(),
        )
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// A mount to attach inside the pod: a detached tree and its target path as
/// seen inside the pod.
pub struct Attach {
    pub tree: OwnedFd,
    pub target: CString,
}

impl Attach {
    pub fn new(tree: OwnedFd, target_in_pod: &Path) -> io::Result<Self> {
        Ok(Attach { tree, target: cstr(target_in_pod)? })
    }
}

/// Runs `op` for each item in a child that entered the pod's mount namespace
/// (`/proc/<pod_pid1>/ns/mnt`); the first failure is reported as (index, errno).
pub(crate) fn in_pod_ns(pod_pid1: i32, count: usize, op: &dyn Fn(usize) -> libc::c_long) -> io::Result<()> {
    let ns_path = format!("/proc/{pod_pid1}/ns/mnt");
    let ns = std::fs::File::open(&ns_path).map_err(|e| io::Error::new(e.kind(), format!("opening {ns_path}: {e}")))?;
    let (r, w) = nix::unistd::pipe()?;
    // SAFETY: the child below makes only raw syscalls (setns, the mount calls, write, _exit).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: raw syscalls only; every pointer was prepared before fork.
        unsafe {
            let mut report = [0i32; 2];
            if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) != 0 {
                report = [-1, *libc::__errno_location()];
            } else {
                for i in 0..count {
                    if op(i) < 0 {
                        report = [i as i32, *libc::__errno_location()];
                        break;
                    }
                }
            }
            libc::write(w.as_raw_fd(), report.as_ptr().cast(), size_of::<[i32; 2]>());
            libc::_exit(0);
        }
    }
    drop(w);
    let mut report = [0u8; 8];
    let n = nix::unistd::read(&r, &mut report).unwrap_or(0);
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    if n != 8 {
        return Err(io::Error::other("the namespace helper died"));
    }
    let (index, errno) = (
        i32::from_ne_bytes([report[0], report[1], report[2], report[3]]),
        i32::from_ne_bytes([report[4], report[5], report[6], report[7]]),
    );
    match (index, errno) {
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
pub fn attach(pod_pid1: i32, mounts: &[Attach]) -> io::Result<()> {
    in_pod_ns(pod_pid1, mounts.len(), &|i| {
        let m = &mounts[i];
        // SAFETY: move_mount(2) with our tree descriptor and a prepared C string.
        unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                m.tree.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                m.target.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        }
    })
}

/// Lazily unmounts the given paths inside the pod (deepest first is the
/// caller's order); paths that are not mounts are fine.
pub fn detach(pod_pid1: i32, targets: &[CString]) -> io::Result<()> {
    in_pod_ns(pod_pid1, targets.len(), &|i| {
        // SAFETY: umount2(2) on a prepared C string.
        let rc = unsafe { libc::umount2(targets[i].as_ptr(), libc::MNT_DETACH) };
        // SAFETY: reading errno right after the call.
        if rc < 0 && matches!(unsafe { *libc::__errno_location() }, libc::EINVAL | libc::ENOENT) {
            0
        } else {
            rc as libc::c_long
        }
    })
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
pub fn overlay_options(lower: &Path, upper: &Path, work: &Path) -> String {
    format!("lowerdir={},upperdir={},workdir={}", lower.display(), upper.display(), work.display())
}
