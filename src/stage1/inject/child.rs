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
        if libc::setns(job.ns, libc::CLONE_NEWNS) != 0 {
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
