//! What runs in the cloned child of an exec (`CLONE_VM | CLONE_VFORK`):
//! it shares the daemon's memory until its exec, so everything here works
//! from data prepared before the clone and makes raw syscalls only.

use super::{REPORT_SETUP, Target};
use std::ffi::CString;
use std::os::fd::{AsRawFd, RawFd};

/// What the child works from, all prepared before the clone: it may not
/// allocate (it shares the daemon's memory and allocator until its exec).
pub(super) struct ChildArgs<'a> {
    pub(super) target: &'a Target,
    pub(super) keep: &'a [RawFd],
    pub(super) candidates: &'a [CString],
    pub(super) argv: &'a [*const libc::c_char],
    pub(super) envp: &'a [*const libc::c_char],
    pub(super) stdio: [RawFd; 3],
    pub(super) tty: bool,
    pub(super) rep: RawFd,
}

/// The cloned child: signals, descriptors, cgroups, namespaces, then the command.
pub(super) extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the ChildArgs the suspended spawning thread keeps alive;
    // only raw syscalls on prepared data follow, and every path ends in exec or _exit.
    unsafe {
        let a = &*(arg as *const ChildArgs<'_>);
        // the daemon's handlers must never run here: defaults (and no
        // ignored SIGPIPE) before anything can arrive; then the empty mask
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = libc::SIG_DFL;
                libc::syscall(libc::SYS_rt_sigaction, sig, &sa, std::ptr::null_mut::<libc::sigaction>(), 8usize);
            }
        }
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty,
            std::ptr::null_mut::<libc::sigset_t>(),
            8usize,
        );
        // every other descriptor of the daemon goes first: a copy of a lock
        // file's descriptor would keep that flock held after the daemon released it
        crate::base::sys::close_all_but(a.keep);
        // the app's OOM score, not the daemon's (a protected daemon's would shield the command)
        let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 && !a.target.oom_score_adj.is_empty() {
            libc::write(fd, a.target.oom_score_adj.as_ptr().cast(), a.target.oom_score_adj.len());
        }
        if fd >= 0 {
            libc::close(fd);
        }
        // the app's resource limits, not the daemon's (a hard limit above
        // the daemon's needs CAP_SYS_RESOURCE: without it, the lower of both)
        for (resource, limit) in &a.target.rlimits {
            let none = std::ptr::null_mut::<libc::rlimit64>();
            if libc::syscall(libc::SYS_prlimit64, 0, *resource, limit, none) == 0 {
                continue;
            }
            let mut ours = libc::rlimit64 { rlim_cur: 0, rlim_max: 0 };
            if *libc::__errno_location() != libc::EPERM
                || libc::syscall(libc::SYS_prlimit64, 0, *resource, std::ptr::null::<libc::rlimit64>(), &mut ours) != 0
            {
                fail(a.rep, 13);
            }
            let max = limit.rlim_max.min(ours.rlim_max);
            let lower = libc::rlimit64 { rlim_cur: limit.rlim_cur.min(max), rlim_max: max };
            if libc::syscall(libc::SYS_prlimit64, 0, *resource, &lower, none) != 0 {
                fail(a.rep, 13);
            }
        }
        for (i, procs) in a.target.cgroup_procs.iter().enumerate() {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            // "0" is the writing process itself
            if fd < 0 || libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                fail(a.rep, super::CGROUP_STEPS + i);
            }
            libc::close(fd);
        }
        // the PID namespace was entered by the spawning thread: this process is in it already
        for (flag, fd) in a.target.ns.iter().filter(|(flag, _)| *flag != libc::CLONE_NEWPID) {
            if libc::setns(fd.as_raw_fd(), *flag) != 0 {
                fail(a.rep, 2);
            }
        }
        command(a.target, a.candidates, a.argv, a.envp, a.stdio, a.tty, a.rep)
    }
}

/// Writes one report (two or three i32 words) to the status pipe.
///
/// # Safety
/// Async-signal-safe: one write(2) of a stack buffer.
unsafe fn report(fd: RawFd, words: &[i32]) {
    let mut buf = [0u8; 12];
    for (i, w) in words.iter().take(3).enumerate() {
        buf[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
    }
    // SAFETY: writing our own stack buffer to a pipe we own.
    unsafe { libc::write(fd, buf.as_ptr().cast(), words.len().min(3) * 4) };
}

/// Reports a failed step with the current errno and exits.
///
/// # Safety
/// Only in the cloned child: raw syscalls, then _exit.
unsafe fn fail(fd: RawFd, step: usize) -> ! {
    // SAFETY: the errno slot is the suspended spawning thread's; write and _exit are async-signal-safe.
    unsafe {
        let errno = *libc::__errno_location();
        report(fd, &[REPORT_SETUP, step as i32, errno]);
        libc::syscall(libc::SYS_exit_group, 126);
        libc::_exit(126)
    }
}

/// `struct __user_cap_header_struct` of capset(2).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct` of capset(2).
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// The command: session, root, stdio, credentials, capabilities, exec.
///
/// # Safety
/// Only in the cloned child (shared memory with the daemon): raw syscalls only.
unsafe fn command(
    t: &Target,
    candidates: &[CString],
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    stdio: [RawFd; 3],
    tty: bool,
    rep: RawFd,
) -> ! {
    // SAFETY: raw syscalls on prepared data; every path ends in exec or _exit.
    unsafe {
        // its own session: a timeout kills it and what it started
        if libc::setsid() < 0 {
            fail(rep, 0);
        }
        // a terminal on stdin becomes the session's controlling terminal
        // (1: taken even from another session, as a host-PID app takes its
        // template's; an exec's own new terminal is nobody's yet)
        if tty && libc::ioctl(stdio[0], libc::TIOCSCTTY, 1) != 0 {
            fail(rep, 5);
        }
        if libc::fchdir(t.root.as_raw_fd()) != 0 || libc::chroot(c".".as_ptr()) != 0 {
            fail(rep, 4);
        }
        if libc::chdir(t.cwd.as_ptr()) != 0 && libc::chdir(c"/".as_ptr()) != 0 {
            fail(rep, 4);
        }
        for (i, fd) in stdio.iter().enumerate() {
            if libc::dup2(*fd, i as RawFd) < 0 {
                fail(rep, 5);
            }
        }
        // the app's AppArmor profile, entered at the execve below
        if let Some(attr) = &t.apparmor {
            let fd = libc::open(c"/proc/self/attr/apparmor/exec".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                fail(rep, 14);
            }
            let bytes = attr.as_bytes();
            if libc::write(fd, bytes.as_ptr().cast(), bytes.len()) != bytes.len() as isize {
                fail(rep, 14);
            }
            libc::close(fd);
        }
        let [eff, prm, inh, bnd, amb] = t.caps;
        for cap in 0..64u64 {
            // EINVAL: beyond the kernel's last capability
            if bnd & (1 << cap) == 0
                && libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0
                && *libc::__errno_location() != libc::EINVAL
            {
                fail(rep, 6);
            }
        }
        // without no_new_privs a filter needs CAP_SYS_ADMIN, which is still
        // held here; the rest of the setup then runs under the app's filters
        // as the app's own start did
        if !t.no_new_privs {
            install_filters(t, rep);
        }
        // keep the permitted set across the uid change; it is set exactly below
        libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0);
        // raw syscalls: glibc's wrappers would apply the change to every
        // thread of the (shared-memory) daemon
        if libc::syscall(libc::SYS_setgroups, t.groups.len(), t.groups.as_ptr()) != 0 {
            fail(rep, 7);
        }
        if libc::syscall(libc::SYS_setresgid, t.gid, t.gid, t.gid) != 0 {
            fail(rep, 8);
        }
        if libc::syscall(libc::SYS_setresuid, t.uid, t.uid, t.uid) != 0 {
            fail(rep, 9);
        }
        let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
        let half = |v: u64, i: usize| (v >> (32 * i)) as u32;
        let data =
            [0, 1].map(|i| CapData { effective: half(eff, i), permitted: half(prm, i), inheritable: half(inh, i) });
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            fail(rep, 10);
        }
        for cap in 0..64u64 {
            if amb & (1 << cap) != 0 {
                libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE, cap as libc::c_ulong, 0, 0);
            }
        }
        if t.no_new_privs {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            install_filters(t, rep);
        }
        let mut errno = libc::ENOENT;
        for path in candidates {
            libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
            let e = *libc::__errno_location();
            // as execvp: keep looking after "not there", remember "there but not runnable"
            if e != libc::ENOENT && e != libc::ENOTDIR {
                errno = e;
            }
        }
        *libc::__errno_location() = errno;
        fail(rep, super::EXEC_STEP)
    }
}

/// Installs the app's seccomp filters, oldest first.
///
/// # Safety
/// Only in the cloned child: raw syscalls on prepared data.
unsafe fn install_filters(t: &Target, rep: RawFd) {
    for program in &t.seccomp.programs {
        // SAFETY: one seccomp(2) on instructions read before the clone.
        if !unsafe { crate::stage1::filters::install(program) } {
            // SAFETY: as above; fail() ends the child.
            unsafe { fail(rep, 12) }
        }
    }
}
