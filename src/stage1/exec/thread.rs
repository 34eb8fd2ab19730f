//! What runs in the daemon's short-lived spawning thread of an exec: it
//! enters the app's PID namespace (which changes only where this thread's
//! children go) and clones the child, then waits until the child exec'd.

use super::child::{ChildArgs, child_main};
use std::io;
use std::os::fd::RawFd;

/// Stack of the cloned child until its exec.
const CHILD_STACK: usize = 256 * 1024;

/// In the spawning thread: enters the PID namespace, clones the child
/// (`CLONE_VM | CLONE_VFORK`: this thread waits until the child exec'd or
/// exited) with every signal blocked, and returns its pid.
pub(super) fn clone_child(
    child: &ChildArgs<'_>,
    pidns: Option<RawFd>,
    pidfd_slot: &std::sync::atomic::AtomicI32,
) -> io::Result<i32> {
    // SAFETY: setns(2) on a namespace descriptor we hold; it affects only this thread's future children.
    if let Some(fd) = pidns
        && unsafe { libc::setns(fd, libc::CLONE_NEWPID) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `child` outlives the child's use of it (the call returns once it
    // exec'd or exited) and child_main makes raw syscalls only; CLONE_PIDFD
    // makes the kernel write the child's pidfd into the slot first.
    unsafe {
        crate::stage1::vfork::clone(
            child_main,
            child as *const ChildArgs<'_> as *mut libc::c_void,
            CHILD_STACK,
            libc::CLONE_PIDFD,
            pidfd_slot.as_ptr(),
        )
    }
}
