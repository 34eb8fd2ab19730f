//! What runs in the child of [`super::in_pod_ns`]: cloned with the daemon's
//! memory (`posix_spawn`-style), it enters the pod's mount namespace and
//! makes raw syscalls on what the daemon prepared, then `_exit`s. Nothing
//! here allocates, locks or does Rust std I/O.
//!
//! Runs in: that child only.

use super::Attach;
use std::ffi::CString;
use std::os::fd::{AsRawFd, RawFd};

const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

/// What the child of [`super::in_pod_ns`] works on: everything prepared before
/// the clone (it shares the daemon's memory and may not allocate), and
/// where it leaves its report: (index, errno), (-1, errno) if it could not
/// enter the namespace, errno 0 when all went well.
pub(super) struct NsJob<'a> {
    pub(super) ns: RawFd,
    /// The pod's cgroup namespace, entered first when there is one (-1: none).
    pub(super) cgroup_ns: RawFd,
    pub(super) count: usize,
    pub(super) op: &'a dyn Fn(usize) -> libc::c_long,
    pub(super) report: [i32; 2],
}

/// The child of [`super::in_pod_ns`]: enters the namespace, runs the items, reports.
pub(super) extern "C" fn ns_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the NsJob the suspended parent thread keeps alive;
    // raw syscalls only, and the path ends in _exit.
    unsafe {
        let job = &mut *(arg as *mut NsJob<'_>);
        let mut report = [0i32; 2];
        if (job.cgroup_ns >= 0 && libc::setns(job.cgroup_ns, libc::CLONE_NEWCGROUP) != 0)
            || libc::setns(job.ns, libc::CLONE_NEWNS) != 0
        {
            report = [-1, *libc::__errno_location()];
        } else {
            for i in 0..job.count {
                if (job.op)(i) < 0 {
                    report = [i as i32, *libc::__errno_location()];
                    break;
                }
            }
        }
        std::ptr::write_volatile(&mut job.report, report);
        libc::_exit(0)
    }
}

/// Attaches one tree at its target (inside its root, when it has one).
pub(super) fn attach_one(m: &Attach) -> libc::c_long {
    let Some(root) = &m.root else {
        // SAFETY: move_mount(2) with our tree descriptor and a prepared C string.
        return unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                m.tree.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                m.target.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        };
    };
    // SAFETY: open(2) of a prepared C string; the descriptor is closed below.
    let root_fd = unsafe { libc::open(root.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if root_fd < 0 {
        return -1;
    }
    // the struct lives on the child's stack: nothing is allocated
    // SAFETY: open_how is plain data; all-zero is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2(2) with our descriptor, a prepared C string and the struct above.
    let target_fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root_fd,
            m.target.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    } as libc::c_int;
    // SAFETY: closing the descriptor opened above (a successful close keeps errno).
    unsafe { libc::close(root_fd) };
    if target_fd < 0 {
        return -1;
    }
    // SAFETY: move_mount(2) from our tree descriptor onto the resolved target descriptor.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            m.tree.as_raw_fd(),
            c"".as_ptr(),
            target_fd,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    // SAFETY: closing the descriptor opened above (a successful close keeps errno).
    unsafe { libc::close(target_fd) };
    rc
}

/// Lazily unmounts `target`; a path that is not a mount is fine.
pub(super) fn unmount(target: &CString) -> libc::c_long {
    // SAFETY: umount2(2) on a prepared C string.
    let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    // SAFETY: reading errno right after the call.
    if rc < 0 && matches!(unsafe { *libc::__errno_location() }, libc::EINVAL | libc::ENOENT) {
        0
    } else {
        rc as libc::c_long
    }
}

/// A cgroup v1 hierarchy to mount (`super::CgroupV1`): a file system made
/// in this process's cgroup namespace (its root is that namespace's),
/// attached read-only and private at the hierarchy's directory, made first.
pub(super) fn mount_cgroup_v1(h: &super::CgroupV1) -> libc::c_long {
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSCONFIG_SET_FLAG: libc::c_uint = 0;
    const FSCONFIG_SET_STRING: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    const MOUNT_ATTR_RDONLY: libc::c_uint = 0x1;
    const MOUNT_ATTR_NOSUID: libc::c_uint = 0x2;
    const MOUNT_ATTR_NODEV: libc::c_uint = 0x4;
    const MOUNT_ATTR_NOEXEC: libc::c_uint = 0x8;
    // SAFETY: raw syscalls on C strings prepared before the clone; every
    // descriptor made here is closed, the errno of a failure kept for the report.
    unsafe {
        if libc::mkdir(h.dir.as_ptr(), 0o755) != 0 && *libc::__errno_location() != libc::EEXIST {
            return -1;
        }
        let fs = libc::syscall(libc::SYS_fsopen, c"cgroup".as_ptr(), FSOPEN_CLOEXEC) as RawFd;
        if fs < 0 {
            return -1;
        }
        let none = std::ptr::null::<libc::c_char>();
        let mut ok = true;
        for flag in &h.flags {
            ok = ok && libc::syscall(libc::SYS_fsconfig, fs, FSCONFIG_SET_FLAG, flag.as_ptr(), none, 0) >= 0;
        }
        if let Some(name) = &h.name {
            ok = ok
                && libc::syscall(libc::SYS_fsconfig, fs, FSCONFIG_SET_STRING, c"name".as_ptr(), name.as_ptr(), 0) >= 0;
        }
        ok = ok && libc::syscall(libc::SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, none, none, 0) >= 0;
        // read-only: where the pod's cgroup namespace is rooted high (a
        // systemd node roots some hierarchies at the node's root), nothing
        // that reaches the pod's mounts may write there; appexec makes a
        // privileged app's copy writable
        let attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
        let mount = if ok { libc::syscall(libc::SYS_fsmount, fs, FSMOUNT_CLOEXEC, attrs) as RawFd } else { -1 };
        let errno = *libc::__errno_location();
        libc::close(fs);
        if mount < 0 {
            *libc::__errno_location() = errno;
            return -1;
        }
        let rc = libc::syscall(
            libc::SYS_move_mount,
            mount,
            c"".as_ptr(),
            libc::AT_FDCWD,
            h.dir.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        );
        let errno = *libc::__errno_location();
        libc::close(mount);
        if rc < 0 {
            *libc::__errno_location() = errno;
            return rc;
        }
        // attached below the pod's shared /run, it joined its propagation:
        // private, so that the apps' copies carry no sharing (CRIU could
        // not restore it) and nothing of it reaches another namespace
        libc::mount(std::ptr::null(), h.dir.as_ptr(), std::ptr::null(), libc::MS_PRIVATE, std::ptr::null())
            as libc::c_long
    }
}

/// Makes directory `dir` (there already: fine).
pub(super) fn make_dir(dir: &CString) -> libc::c_long {
    // SAFETY: mkdir(2) of a C string prepared before the clone.
    unsafe {
        if libc::mkdir(dir.as_ptr(), 0o700) != 0 && *libc::__errno_location() != libc::EEXIST {
            return -1;
        }
    }
    0
}
