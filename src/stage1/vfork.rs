//! A child made the way `posix_spawn` makes one: `CLONE_VM | CLONE_VFORK`
//! onto a stack of its own, so the daemon's page tables are not copied (a
//! fork's main cost). The calling thread is suspended until the child
//! exec'd or exited; every signal is blocked around the clone, so none of
//! the daemon's handlers can run in the child, which shares its memory.
//!
//! The child may only make raw syscalls on data prepared before the call.

use std::io;

/// Clones `child(arg)` with `CLONE_VM | CLONE_VFORK | SIGCHLD | flags` on a
/// stack of `stack_size` bytes; `ptid` is clone's parent-tid argument (where
/// `CLONE_PIDFD` puts the pidfd). Returns the child's pid.
///
/// # Safety
/// `arg` must stay valid until the child exec'd or exited (the calling
/// thread waits that long), and `child` must make only raw syscalls and end
/// in exec or `_exit`.
pub(crate) unsafe fn clone(
    child: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    stack_size: usize,
    flags: libc::c_int,
    ptid: *mut libc::c_int,
) -> io::Result<i32> {
    let mut stack = vec![0u8; stack_size];
    // the stack grows down from its end, 16-byte aligned
    let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
    // every signal, glibc's own (32, 33) included: the raw call, not pthread_sigmask
    // SAFETY: rt_sigprocmask(2) on this thread's mask with local sets.
    let old = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        std::ptr::write_bytes(&mut all as *mut libc::sigset_t as *mut u8, 0xff, size_of::<libc::sigset_t>());
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK, &all, &mut old, 8usize);
        old
    };
    // SAFETY: the caller's contract; the stack outlives the child's use of it
    // (CLONE_VFORK returns once the child exec'd or exited).
    let pid = unsafe {
        libc::clone(
            child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD | flags,
            arg,
            ptid,
        )
    };
    let err = io::Error::last_os_error();
    // SAFETY: restoring this thread's own signal mask.
    unsafe {
        libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK, &old, std::ptr::null_mut::<libc::sigset_t>(), 8usize)
    };
    drop(stack);
    if pid < 0 { Err(err) } else { Ok(pid) }
}
