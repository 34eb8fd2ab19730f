//! appexec: the first program of an app whose container has its own PID
//! namespace (kubelet's default, `NamespaceMode CONTAINER`), or joins another
//! container's (`TARGET`). rkt's stage1 had a program of that name and role.
//!
//! The pod's systemd (252 has no `PrivatePIDs=`) starts it as the unit's
//! ExecStart, in the pod's mount namespace, with the app's environment and
//! stdio, with the app's seccomp filter widened by what this program needs
//! and without dropping root or any capability. This program then:
//!
//! 0. with `cgwait=`, waits until the daemon has moved it into the app's
//!    cgroup v1 directories (nothing in the pod can, and on v1 what a
//!    process charged before its move stays where it was: an app moved
//!    after its exec could outgrow its memory limit unseen);
//! 1. enters a new PID namespace (`pid=new`) or the target's (`pid=<pid>`),
//!    or stays in its own (`pid=keep`: the pod's for an app with a volume
//!    whose mounts propagate both ways, which systemd cannot give it;
//!    `pid=host`: the same, for the template of a host-PID app, below);
//! 2. forks: the child is the container (PID 1 of a new namespace); the
//!    parent stays as the unit's main process, ignores the stop signals
//!    (systemd signals every process of the unit) and ends as the child did,
//!    with its exit code or by its signal;
//! 3. in the child: makes the app's mount namespace and pivots into its
//!    rootfs (`root=`), leaving the pod's mounts behind, with the binds
//!    (`bind=`, `rbind=`, `robind=`, `rrobind=`) and the app's own cgroups
//!    at /sys/fs/cgroup (`cgroupfs=`); mounts a /proc of the new
//!    PID namespace, then the app's masked (`mask=`) and read-only (`ro=`)
//!    paths, /proc's and the others; makes the root read-only (`rootro`);
//!    enters the working directory (`cwd=`, made when missing); asks AppArmor
//!    for the app's profile at its execve (`aa=`); installs a filter that denies again what the app's own
//!    seccomp profile denied and systemd had to let through (`deny=`: all
//!    but the few calls still made after it: prctl, capget, capset,
//!    setgroups, setresgid, setresuid, poll, execve, write, exit_group); drops
//!    the capability bounding set to the app's (`caps=`), sets its groups,
//!    gid and uid (`groups=`, `gid=`, `uid=`), no_new_privs (`nnp`), and
//!    exec's the app: `appexec OPTION... -- PATH ARGV0 ARG...`.
//!
//! In every mode but `pid=host` the child first leads a session of its
//! own (CRIU will not checkpoint a container whose session leader, this
//! program, is outside its PID namespace).
//!
//! With `started=FIFO`, once systemd is told the unit started, a byte to
//! that FIFO of the pod's tells the daemon too: StartContainer returns
//! then, without waiting for systemd to end its job and say so.
//!
//! The app's own v1 cgroups are copied out of the pod's own mounts of the
//! hierarchies (`cgroupviews=DIR`: the daemon mounts them once per pod);
//! a hierarchy not there is mounted for this app and parked on a tmpfs at
//! the pod's /tmp (in the child's namespace only) while its cgroup is
//! copied out, so that it goes with the pod's mounts at the pivot, in one
//! unmount; each detached mount closed would wait for an RCU grace period
//! of its own.
//!
//! With `restore=PIDFILE` (a container created from a checkpoint) none of
//! the above: the program after `--` is `criu restore --restore-sibling`,
//! run as a child (with `rootro`, in a mount namespace where the app's
//! `root=` is read-only, for CRIU to restore it so); the task it restores becomes this process's child, and
//! this process tells systemd the unit started and ends as it does.
//!
//! With `pid=host` the child does all of the above but the exec, and
//! mounts no /proc (the daemon binds the node's, `bind=`, masks on top): it
//! is the template of an app of a host-PID pod, which nothing under the
//! pod's systemd can start in the node's PID namespace. Once confined it
//! tells the parent (a byte `r` on the pipe, which then tells systemd the
//! unit started) and parks until its parent dies or it is killed; the pod's
//! log writer, in the node's PID namespace, starts the app as a copy of it
//! (`src/stage1/exec/`, `src/stage1/crilog.rs`).
//!
//! Built by build.rs as a static executable (it runs inside any image)
//! from this crate (the standard library and libc only): the daemon embeds
//! it and binds it read-only at `/dev/.rkt-appexec` in each pod. What can be
//! told apart from the system calls (the options, the seccomp program, what
//! it reads of /proc) lives in modules of its own, with their tests.

mod plan;
mod proc;
mod seccomp;

use libc::{
    __errno_location, _exit, AT_EMPTY_PATH, AT_FDCWD, AT_RECURSIVE, CLD_DUMPED, CLD_KILLED, CLONE_NEWNS, CLONE_NEWPID,
    EINTR, EINVAL, ENOENT, FSCONFIG_CMD_CREATE, FSCONFIG_SET_FLAG, FSCONFIG_SET_STRING, FSMOUNT_CLOEXEC,
    FSOPEN_CLOEXEC, MNT_DETACH, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
    MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_SYMLINKS, MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY, MS_REC,
    MS_SLAVE, O_CLOEXEC, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK, O_PATH, O_RDONLY, O_WRONLY, OPEN_TREE_CLONE, P_PID,
    POLLHUP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, PR_CAPBSET_DROP, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG, PR_SET_SECCOMP, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS, SECCOMP_MODE_FILTER, SIG_IGN, SIGCHLD,
    SIGKILL, SIGSTOP, SYS_capget, SYS_capset, SYS_fsconfig, SYS_fsmount, SYS_fsopen, SYS_mount_setattr, SYS_move_mount,
    SYS_open_tree, SYS_openat2, SYS_pivot_root, SYS_rt_sigaction, TIOCSCTTY, WEXITED, WNOHANG, WNOWAIT, c_char, c_int,
    c_long, c_uint, c_ulong, chdir, close, execv, fork, getpid, ioctl, isatty, kill, mount, mount_attr, open, open_how,
    pipe2, poll, pollfd, prctl, read, setgroups, setns, setresgid, setresuid, setsid, syscall, umount2, unshare,
    waitid, waitpid, write,
};
use plan::Plan;
use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, Ordering};

/// In the child: the pipe end that tells the parent the app could not be
/// exec'd (a byte) rather than exec'd (the end closed by the exec).
static FAILED_FD: AtomicI32 = AtomicI32::new(-1);
/// In the child: the read end of the pipe that tells it its parent died.
static ALIVE_FD: AtomicI32 = AtomicI32::new(-1);

/// `_LINUX_CAPABILITY_VERSION_3` of `linux/capability.h` (not in libc).
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn errno() -> c_int {
    // SAFETY: glibc's thread-local errno.
    unsafe { *__errno_location() }
}

/// Reports on stderr (the container's log) and ends with 127, as a shell
/// does for a command it could not run.
fn fail(what: &str, err: c_int) -> ! {
    let fd = FAILED_FD.load(Ordering::Relaxed);
    // SAFETY: a byte to our own pipe, first (the message may fail)
    if fd >= 0 {
        unsafe { write(fd, b"x".as_ptr().cast(), 1) };
    }
    if err != 0 {
        eprintln!("appexec: {what}: {}", std::io::Error::from_raw_os_error(err));
    } else {
        eprintln!("appexec: {what}");
    }
    // SAFETY: ends this process at once (no destructors to run in a forked child).
    unsafe { _exit(127) }
}

fn check(rc: c_int, what: &str) {
    if rc < 0 {
        fail(what, errno());
    }
}

fn main() {
    let args = std::env::args_os().skip(1).map(std::os::unix::ffi::OsStringExt::into_vec);
    let plan = plan::parse(args).unwrap_or_else(|what| fail(&what, 0));
    if let Some((name, count)) = &plan.cgroup_wait {
        wait_for_cgroups(name, *count);
    }
    if let Some(file) = &plan.env_file {
        load_environment(file);
    }
    if let Some(pidfile) = &plan.restore {
        restore(&plan, pidfile);
    }
    // the parent outlives every stop signal systemd sends the unit; the
    // child puts the defaults back before its exec (ignored signals would
    // stay ignored across it)
    // (the raw call: real-time stop signals such as SIGRTMIN+3 too)
    let ignore = [SIG_IGN as u64, 0, 0, 0];
    for sig in 1..65 {
        if sig != SIGKILL && sig != SIGSTOP && sig != SIGCHLD {
            // SAFETY: rt_sigaction(2) with a kernel sigaction whose handler is SIG_IGN.
            unsafe { syscall(SYS_rt_sigaction, sig as c_long, ignore.as_ptr(), std::ptr::null::<u64>(), 8 as c_long) };
        }
    }
    match &plan.join {
        None if plan.keep_pid => {}
        // SAFETY: unshare(2) of the PID namespace for this process's future children.
        None => check(unsafe { unshare(CLONE_NEWPID) }, "new PID namespace"),
        Some((pid, start)) => {
            let ns = std::ffi::CString::new(format!("/proc/{pid}/ns/pid")).unwrap_or_default();
            // SAFETY: open(2) and setns(2) on a namespace file; only the children enter it.
            let fd = unsafe { open(ns.as_ptr(), O_RDONLY | O_CLOEXEC) };
            check(fd, "opening the target's PID namespace");
            // opened, then checked: the pid was not reused by another process meanwhile
            if start_time(*pid).as_deref() != Some(start.as_str()) {
                fail("the target container is gone", 0);
            }
            check(unsafe { setns(fd, CLONE_NEWPID) }, "entering the target's PID namespace");
            // SAFETY: closing our own descriptor.
            unsafe { close(fd) };
        }
    }
    // the child learns of this process's death from one pipe's other end;
    // this process learns from the other whether the app was exec'd
    let (mut alive, mut execd) = ([0; 2], [0; 2]);
    // SAFETY: pipe2(2) into local arrays.
    check(unsafe { pipe2(alive.as_mut_ptr(), O_CLOEXEC) }, "pipe");
    check(unsafe { pipe2(execd.as_mut_ptr(), O_CLOEXEC) }, "pipe");
    // SAFETY: fork(2) in this single-threaded program.
    let child = unsafe { fork() };
    check(child, "fork");
    if child == 0 {
        // SAFETY: closing the child's copies of the ends it does not use.
        unsafe {
            close(alive[1]);
            close(execd[0]);
        }
        FAILED_FD.store(execd[1], Ordering::Relaxed);
        ALIVE_FD.store(alive[0], Ordering::Relaxed);
        container(&plan, alive[0]);
    }
    // SAFETY: closing our copy of the child's end, then reading ours.
    let exec_failed = unsafe {
        close(execd[1]);
        let mut byte = 0u8;
        loop {
            let n = read(execd[0], (&mut byte as *mut u8).cast(), 1);
            if n >= 0 || errno() != EINTR {
                // a byte, or a read that failed: the app was not exec'd; a
                // template says `r` once confined, and never execs
                break if plan.host { !(n == 1 && byte == b'r') } else { n != 0 };
            }
        }
    } || killed_before_exec(child);
    // not told, systemd would wait for its start timeout: the app goes instead
    if !exec_failed {
        if ready() {
            tell_started(plan.started.as_deref());
        } else {
            // SAFETY: a signal to our own child.
            unsafe { kill(child, SIGKILL) };
        }
    }
    wait_and_mirror(child, plan.oom_marker.as_deref());
}

/// A container restored from a checkpoint: runs `criu restore` (the
/// program after `--`) as a child, whose restored task becomes this
/// process's child too (`--restore-sibling`: CRIU clones it with
/// CLONE_PARENT); once CRIU has exited 0 and named the task in `pidfile`,
/// tells systemd the unit started and ends as the container does. CRIU
/// failing fails the start (its log says why).
fn restore(plan: &Plan, pidfile: &CStr) -> ! {
    // SAFETY: fork(2) in this single-threaded program.
    let criu = unsafe { fork() };
    check(criu, "fork");
    if criu == 0 {
        // CRIU and what it restores start from the default dispositions
        // (the container's own come back from its images)
        let default = [0u64; 4];
        for sig in 1..65 {
            if sig != SIGKILL && sig != SIGSTOP {
                // SAFETY: rt_sigaction(2) with an all-zero (SIG_DFL) kernel sigaction.
                unsafe {
                    syscall(SYS_rt_sigaction, sig as c_long, default.as_ptr(), std::ptr::null::<u64>(), 8 as c_long)
                };
            }
        }
        mounts_for_criu(plan);
        // SAFETY: this program has a single thread.
        unsafe { std::env::remove_var("NOTIFY_SOCKET") };
        let images = pidfile.to_string_lossy();
        let stage = format!("{}/cgroups", images.rsplit_once('/').map_or(".", |(dir, _)| dir));
        let external = plan.cgroup_view.map(|_| criu_cgroup_mounts(&stage)).unwrap_or_default();
        let mut argv: Vec<*const c_char> = plan.argv.iter().chain(&external).map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        // SAFETY: execv(2) with NUL-terminated strings and a NULL-terminated array.
        unsafe { execv(plan.path.as_ptr(), argv.as_ptr()) };
        fail(&format!("exec {}", plan.path.to_string_lossy()), errno())
    }
    let mut status: c_int = 0;
    loop {
        // SAFETY: waits for our own child.
        let rc = unsafe { waitpid(criu, &mut status, 0) };
        if rc == criu {
            break;
        }
        if rc < 0 && errno() != EINTR {
            fail("waiting for criu", errno());
        }
    }
    if proc::ended(status) != Ok(0) {
        fail(&format!("criu restore failed ({})", describe(status)), 0);
    }
    let path = pidfile.to_string_lossy();
    let restored = std::fs::read_to_string(path.as_ref())
        .ok()
        .and_then(|s| s.trim().parse::<c_int>().ok())
        .unwrap_or_else(|| fail(&format!("no pid in {path} after criu restore"), 0));
    if !ready() {
        // SAFETY: a signal to the restored container, our child.
        unsafe { kill(restored, SIGKILL) };
    }
    wait_and_mirror(restored, plan.oom_marker.as_deref())
}

/// What CRIU sees, in a mount namespace of its own:
/// - the node's securityfs at /sys/kernel/security, which nspawn does not
///   give a pod: CRIU tells the node's LSM from it, and restores the
///   AppArmor profile the images carry only when it finds the LSM they were
///   dumped under ("mismatched lsm types" otherwise);
/// - for a read-only root (`rootro`): CRIU binds `--root` as the restored
///   container's root with the flags it has, so the app's root (`root=`) is
///   bound on itself, volumes below it kept, and made read-only, as a start
///   makes it.
fn mounts_for_criu(plan: &Plan) {
    // SAFETY: unshare(2) and mount(2) on this process's own new namespace,
    // with C string literals.
    unsafe {
        check(unshare(CLONE_NEWNS), "new mount namespace");
        check(
            mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), MS_REC | MS_SLAVE, std::ptr::null()),
            "making mounts slaves",
        );
        check(
            mount(
                c"securityfs".as_ptr(),
                c"/sys/kernel/security".as_ptr(),
                c"securityfs".as_ptr(),
                MS_NOSUID | MS_NODEV | MS_NOEXEC,
                std::ptr::null(),
            ),
            "mounting securityfs for criu",
        );
    }
    if !plan.root_read_only {
        return;
    }
    let root = plan.root.as_ptr();
    // SAFETY: mount(2) and mount_setattr(2) in this process's own namespace,
    // with a C string and a properly sized struct.
    unsafe {
        check(mount(root, root, std::ptr::null(), MS_BIND | MS_REC, std::ptr::null()), "binding the root");
        let attr = mount_attr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
        let rc = syscall(SYS_mount_setattr, AT_FDCWD, root, 0 as c_uint, &attr, size_of::<mount_attr>());
        check(rc as c_int, "making the root read-only");
    }
}

/// How a child ended, for a message.
fn describe(status: c_int) -> String {
    match proc::ended(status) {
        Ok(code) => format!("exit code {code}"),
        Err(signal) => format!("signal {signal}"),
    }
}

/// Makes `marker` when this process's cgroup v2 (the app's unit's, which
/// goes with it) counted an OOM kill; nothing where there is none (v1: the
/// daemon reads the app's own memory cgroup).
fn mark_oom_kills(marker: &CStr) {
    use std::os::unix::ffi::OsStrExt;
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let Some(path) = proc::v2_cgroup(&own) else { return };
    let events = std::fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.events")).unwrap_or_default();
    if proc::oom_kills(&events) > 0 {
        let _ = std::fs::write(std::ffi::OsStr::from_bytes(marker.to_bytes()), b"");
    }
}

/// Adds the entries of the environment file `file` to this process's
/// environment, which the app's execve passes on.
fn load_environment(file: &CStr) {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::OsStr::from_bytes(file.to_bytes());
    let bytes = std::fs::read(path).unwrap_or_else(|e| {
        fail(&format!("reading the environment file {}: {e}", path.to_string_lossy()), e.raw_os_error().unwrap_or(0))
    });
    for (name, value) in proc::env_entries(&bytes) {
        // SAFETY: appexec has a single thread; nothing reads the environment meanwhile.
        unsafe { std::env::set_var(std::ffi::OsStr::from_bytes(name), std::ffi::OsStr::from_bytes(value)) };
    }
}

/// Waits until `count` lines of /proc/self/cgroup (v1 hierarchies) end
/// with `suffix`, checking every 100 µs; after 10 s the app does not run
/// (the daemon that was to move it is gone, or could not).
fn wait_for_cgroups(suffix: &str, count: usize) {
    let own = || std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !proc::placed(&own(), suffix, count) {
        if std::time::Instant::now() > deadline {
            let now = own().replace('\n', " ");
            fail(&format!("not placed in {count} cgroups named {suffix} within 10 s; in: {now}"), 0);
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}

/// Whether the child is already gone by a signal as its end of the pipe
/// closed: killed before its exec (by the filter, an abort, the OOM killer)
/// rather than an app that ran for no time at all. It stays waitable.
fn killed_before_exec(child: c_int) -> bool {
    // SAFETY: an all-zero siginfo_t is valid (and stays so when no child changed state)
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid(2) on our own child into a siginfo_t.
    let rc = unsafe { waitid(P_PID, child as libc::id_t, &mut info, WEXITED | WNOHANG | WNOWAIT) };
    // SAFETY: si_pid is the field waitid(2) fills for SIGCHLD (zero when nothing changed).
    rc == 0 && unsafe { info.si_pid() } == child && matches!(info.si_code, CLD_KILLED | CLD_DUMPED)
}

/// Tells the daemon the unit has started, after systemd (`started=`): a
/// byte to its FIFO, if it still reads it. Best effort: the daemon also
/// learns it from systemd's job.
fn tell_started(fifo: Option<&CStr>) {
    let Some(fifo) = fifo else { return };
    // (non-blocking: no reader fails at once; no link followed)
    // SAFETY: open(2) of a NUL-terminated path, write(2) of one byte from a static, close(2) of our descriptor.
    unsafe {
        let fd = open(fifo.as_ptr(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
        if fd >= 0 {
            write(fd, b"r".as_ptr().cast(), 1);
            close(fd);
        }
    }
}

/// Tells systemd the unit has started (`Type=notify`): the app was exec'd.
/// Before, systemd's start job, and so StartContainer, waits; a child that
/// fails instead makes it fail.
fn ready() -> bool {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        eprintln!("appexec: no NOTIFY_SOCKET to tell systemd the app started");
        return false;
    };
    let sent = std::os::unix::net::UnixDatagram::unbound().and_then(|sender| match socket.as_encoded_bytes() {
        [b'@', name @ ..] => {
            <std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(name)
                .and_then(|addr| sender.send_to_addr(b"READY=1", &addr))
        }
        _ => sender.send_to(b"READY=1", &socket),
    });
    if let Err(e) = &sent {
        eprintln!("appexec: telling systemd the app started: {e}");
    }
    sent.is_ok()
}

/// Field 22 of `/proc/<pid>/stat`: when the process started (clock ticks since boot).
fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    proc::start_time(&stat).map(str::to_string)
}

/// The parent: waits for the container and ends the same way.
fn wait_and_mirror(child: c_int, oom_marker: Option<&CStr>) -> ! {
    let mut status: c_int = 0;
    loop {
        // SAFETY: waits for our own child.
        let rc = unsafe { waitpid(child, &mut status, 0) };
        if rc == child {
            break;
        }
        if rc < 0 && errno() != EINTR {
            fail("waiting for the container", errno());
        }
    }
    if let Some(marker) = oom_marker {
        mark_oom_kills(marker);
    }
    let signaled = match proc::ended(status) {
        // SAFETY: ends this process.
        Ok(code) => unsafe { _exit(code) },
        Err(signal) => signal,
    };
    // killed: die of the same signal, without a core of this program
    // SAFETY: dumpable flag, default disposition and a signal to ourselves.
    unsafe {
        prctl(PR_SET_DUMPABLE, 0 as c_ulong);
        syscall(SYS_rt_sigaction, signaled as c_long, [0u64; 4].as_ptr(), std::ptr::null::<u64>(), 8 as c_long);
        kill(getpid(), signaled);
        _exit(128 + signaled)
    }
}

/// The child, PID 1 of its namespace (or a member of the target's).
fn container(plan: &Plan, alive: c_int) -> ! {
    // every disposition back to the default: the raw call, which also
    // reaches 32 and 33 (glibc refuses them; systemd leaves them ignored)
    let default = [0u64; 4];
    for sig in 1..65 {
        if sig != SIGKILL && sig != SIGSTOP {
            // SAFETY: rt_sigaction(2) with an all-zero (SIG_DFL) kernel sigaction.
            unsafe { syscall(SYS_rt_sigaction, sig as c_long, default.as_ptr(), std::ptr::null::<u64>(), 8 as c_long) };
        }
    }
    if !plan.host {
        own_session();
    }
    let cgroups_read_only = enter_root(plan, &plan.root);
    proc_mount(plan, cgroups_read_only);
    // made when missing (runc's way), before the root may turn read-only
    working_directory(plan.cwd.as_deref().unwrap_or(c"/"));
    if plan.root_read_only {
        // the root itself, after the mount points were made in it; volumes
        // and binds keep their own flags (runc's way)
        let attr = mount_attr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
        // SAFETY: mount_setattr(2) on "/" with a properly sized struct.
        let rc =
            unsafe { syscall(SYS_mount_setattr, AT_FDCWD, c"/".as_ptr(), 0 as c_uint, &attr, size_of::<mount_attr>()) };
        check(rc as c_int, "making the root read-only");
    }
    if let Some(attr) = &plan.apparmor {
        apparmor_on_exec(attr);
    }
    if !plan.deny.is_empty() {
        deny_again(plan);
    }
    credentials(plan);
    // the unit's main process gone means the container is gone: asked for
    // after the ids changed (a change clears it), then checked, in case the
    // parent died before
    // SAFETY: prctl(2) and poll(2) on this process and our pipe's read end.
    unsafe {
        prctl(PR_SET_PDEATHSIG, SIGKILL as c_ulong);
        let mut fd = pollfd { fd: alive, events: 0, revents: 0 };
        if poll(&mut fd, 1, 0) > 0 && fd.revents & POLLHUP != 0 {
            _exit(128 + SIGKILL);
        }
    }
    if plan.host {
        park();
    }
    // systemd's notification socket is appexec's, not the app's
    // SAFETY: this program has a single thread.
    unsafe { std::env::remove_var("NOTIFY_SOCKET") };
    let mut argv: Vec<*const c_char> = plan.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: execv(2) with NUL-terminated strings and a NULL-terminated array; the environment is systemd's.
    unsafe { execv(plan.path.as_ptr(), argv.as_ptr()) };
    fail(&format!("exec {}", plan.path.to_string_lossy()), errno())
}

/// The container leads a session of its own, as runc's init does: one led
/// by appexec (systemd made it) would have its leader outside the
/// container's PID namespace, which CRIU refuses to checkpoint. A terminal
/// the unit was given stays the container's controlling terminal.
fn own_session() {
    // SAFETY: setsid(2) on this process (not a group leader: a forked child).
    check(unsafe { setsid() }, "new session");
    for fd in 0..3 {
        // SAFETY: isatty(3) and ioctl(2) TIOCSCTTY on our own descriptor; taking
        // it from appexec's session needs CAP_SYS_ADMIN, held until credentials()
        if unsafe { isatty(fd) } == 1 {
            check(unsafe { ioctl(fd, TIOCSCTTY, 1 as c_int) }, "taking the terminal");
            break;
        }
    }
}

/// A host-PID app's template, confined: tells the parent (`r`, then it
/// tells systemd), then waits, with the app's own filters, ids and
/// capabilities, for its parent's end (or a signal: its dispositions are
/// the defaults, so the unit's stop signal ends it). Only `write`, `poll`
/// and `exit_group` are called here: calls every filter lets appexec make.
/// Asks AppArmor to confine this process from its next execve on
/// (`exec PROFILE`); a profile that cannot be set fails the app.
fn apparmor_on_exec(attr: &CStr) {
    // SAFETY: open(2) of a C string literal; closed below.
    let fd = unsafe { open(c"/proc/self/attr/apparmor/exec".as_ptr(), O_WRONLY | O_CLOEXEC) };
    check(fd, "opening /proc/self/attr/apparmor/exec");
    let bytes = attr.to_bytes();
    // SAFETY: write(2) of our own buffer to our own descriptor.
    let n = unsafe { write(fd, bytes.as_ptr().cast(), bytes.len()) };
    let err = errno();
    // SAFETY: close(2) of the descriptor opened above.
    unsafe { close(fd) };
    if n != bytes.len() as isize {
        fail(&format!("setting AppArmor profile ({})", attr.to_string_lossy()), err);
    }
}

fn park() -> ! {
    let fd = FAILED_FD.load(Ordering::Relaxed);
    // SAFETY: a byte to our own pipe.
    if unsafe { write(fd, b"r".as_ptr().cast(), 1) } != 1 {
        // SAFETY: ends this process.
        unsafe { _exit(127) }
    }
    // the pipe whose other end only the parent holds: POLLHUP at its death
    let alive = ALIVE_FD.load(Ordering::Relaxed);
    loop {
        let mut pfd = pollfd { fd: alive, events: 0, revents: 0 };
        // SAFETY: poll(2) on our own descriptor.
        if unsafe { poll(&mut pfd, 1, -1) } > 0 && pfd.revents & POLLHUP != 0 {
            // SAFETY: ends this process.
            unsafe { _exit(0) }
        }
    }
}

/// Opens (`O_PATH`) `inner`, relative to `root`, resolved as if `root` were
/// `/`: no symlink on the way (of the image or of a volume's content) leads
/// out of it. A descriptor, or -1 with errno set.
fn open_in_root(root: &CStr, inner: &CStr) -> c_int {
    // SAFETY: open(2) of a prepared C string; closed below.
    let root_fd = unsafe { open(root.as_ptr(), O_PATH | O_DIRECTORY | O_CLOEXEC) };
    if root_fd < 0 {
        return -1;
    }
    // SAFETY: `struct open_how` is plain integers (libc's may grow: no struct expression)
    let mut how: open_how = unsafe { std::mem::zeroed() };
    how.flags = (O_PATH | O_CLOEXEC) as u64;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2(2) with our descriptor, a prepared C string and a properly sized struct.
    let fd = unsafe { syscall(SYS_openat2, root_fd, inner.as_ptr(), &how, size_of::<open_how>()) } as c_int;
    // SAFETY: closing our descriptor (a successful close keeps errno).
    unsafe { close(root_fd) };
    fd
}

/// The app's mount namespace, as systemd would make it for `RootDirectory=`
/// and `BindPaths=`, but small: the pod's mounts are left behind.
///
/// 1. A new mount namespace whose mounts receive the pod's but give nothing
///    back (slaves);
/// 2. a detached copy of each bind's source, taken from the pod's tree;
/// 3. `pivot_root` into the app's rootfs and the pod's tree lazily
///    unmounted: the namespace keeps the app's rootfs and its volumes, so
///    what the pod mounts later (other apps' roots) no longer reaches it;
/// 4. each copy moved onto its target, resolved inside the app's root now
///    (a symlink in the image cannot point out of it), the target made
///    when missing.
///
/// Returns whether the app's own cgroups are at /sys/fs/cgroup, read-only.
fn enter_root(plan: &Plan, root: &CStr) -> bool {
    // copies of the shared volumes while they are still peers of the host's
    let mut shared = Vec::new();
    for path in &plan.shared {
        let at = open_in_root(root, path);
        check(at, &format!("finding {} in {}", path.to_string_lossy(), root.to_string_lossy()));
        let flags = OPEN_TREE_CLONE | O_CLOEXEC as c_uint | AT_RECURSIVE as c_uint | AT_EMPTY_PATH as c_uint;
        // SAFETY: open_tree(2) of the descriptor just opened; closed right after.
        let fd = unsafe { syscall(SYS_open_tree, at, c"".as_ptr(), flags) } as c_int;
        // SAFETY: closing our descriptor (a successful close keeps errno).
        unsafe { close(at) };
        check(fd, &format!("copying the shared volume {}", path.to_string_lossy()));
        shared.push((fd, path));
    }
    // SAFETY: unshare(2) and mount(2) on this process's namespace with C string literals.
    unsafe {
        check(unshare(CLONE_NEWNS), "new mount namespace");
        check(
            mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), MS_REC | MS_SLAVE, std::ptr::null()),
            "making mounts slaves",
        );
    }
    let mut trees = Vec::new();
    for bind in &plan.binds {
        let flags = OPEN_TREE_CLONE | O_CLOEXEC as c_uint | if bind.recursive { AT_RECURSIVE as c_uint } else { 0 };
        let fd = if bind.in_root {
            let at = open_in_root(root, &bind.source);
            if at < 0 && bind.optional && errno() == ENOENT {
                continue;
            }
            check(at, &format!("finding {} in {}", bind.source.to_string_lossy(), root.to_string_lossy()));
            // SAFETY: open_tree(2) of the descriptor just opened; closed right after.
            let fd = unsafe { syscall(SYS_open_tree, at, c"".as_ptr(), flags | AT_EMPTY_PATH as c_uint) } as c_int;
            // SAFETY: closing our descriptor (a successful close keeps errno).
            unsafe { close(at) };
            fd
        } else {
            // SAFETY: open_tree(2) with a prepared C string; returns a descriptor or -1.
            unsafe { syscall(SYS_open_tree, AT_FDCWD, bind.source.as_ptr(), flags) as c_int }
        };
        if fd < 0 && bind.optional && errno() == ENOENT {
            continue;
        }
        check(fd, &format!("copying {}", bind.source.to_string_lossy()));
        if bind.read_only {
            read_only_tree(fd, bind.recursive, &bind.source);
        }
        // the source's kind, for the mount point (told by the copy itself)
        let is_dir = is_dir(fd);
        trees.push((fd, bind, is_dir));
    }
    let cgroups = plan.cgroup_view.and_then(|ro| Some((own_cgroups(plan.cgroup_views.as_deref())?, ro)));
    // SAFETY: chdir(2), pivot_root(2) and umount2(2) with C strings: the old
    // root ends up on top of the new one, at ".", and is detached from there.
    unsafe {
        check(chdir(root.as_ptr()), &format!("entering {}", root.to_string_lossy()));
        check(syscall(SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as c_int, "pivot_root");
        check(umount2(c".".as_ptr(), MNT_DETACH), "leaving the pod's mounts");
        check(chdir(c"/".as_ptr()), "chdir /");
    }
    for (fd, path) in shared {
        attach_tree(fd, path, &format!("mounting the shared volume {}", path.to_string_lossy()));
    }
    for (fd, bind, is_dir) in trees {
        let path = bind.target.to_string_lossy();
        make_target(&path, is_dir);
        attach_tree(fd, &bind.target, &format!("mounting {}", path));
    }
    // in place of the pod's, below the /sys the binds brought
    let made_read_only = cgroups.as_ref().is_some_and(|(_, ro)| *ro);
    if let Some((cgroups, read_only)) = cgroups {
        mount_own_cgroups(cgroups, read_only);
    }
    made_read_only
}

/// Whether descriptor `fd` (an `O_PATH` one, a tree's) is a directory: one
/// fstat(2), not a lookup of /proc/self/fd/FD (procfs makes an inode per
/// lookup: tens of µs for the few binds of each start).
fn is_dir(fd: c_int) -> bool {
    // SAFETY: fstat(2) of our descriptor into a zeroed (valid) struct.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR
    }
}

/// Makes the detached mount `fd` read-only or writable; `target` names it in an error.
fn set_read_only(fd: c_int, read_only: bool, target: &CStr) {
    if read_only {
        return read_only_tree(fd, false, target);
    }
    let attr = mount_attr { attr_set: 0, attr_clr: MOUNT_ATTR_RDONLY, propagation: 0, userns_fd: 0 };
    // SAFETY: mount_setattr(2) on our detached mount with a properly sized struct.
    let rc = unsafe {
        syscall(SYS_mount_setattr, fd, c"".as_ptr(), AT_EMPTY_PATH as c_uint, &attr, size_of::<mount_attr>())
    };
    check(rc as c_int, &format!("making {} writable", target.to_string_lossy()));
}

/// Makes the detached tree `fd` (with the mounts below it when `recursive`)
/// read-only; `source` names it in an error.
fn read_only_tree(fd: c_int, recursive: bool, source: &CStr) {
    let attr = mount_attr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
    let at = AT_EMPTY_PATH as c_uint | if recursive { AT_RECURSIVE as c_uint } else { 0 };
    // SAFETY: mount_setattr(2) on our tree descriptor with a properly sized struct.
    let rc = unsafe { syscall(SYS_mount_setattr, fd, c"".as_ptr(), at, &attr, size_of::<mount_attr>()) };
    check(rc as c_int, &format!("making {} read-only", source.to_string_lossy()));
}

/// The app's own cgroups (`cgroupfs=`), taken while this process still
/// sees the pod (`proc::cgroup_view`): on pure v2 a copy of its cgroup in
/// the pod's /sys/fs/cgroup; on v1 the app's cgroup copied from each
/// hierarchy, the pod's own mount of it (`cgroupviews=`) or one mounted
/// afresh (in the pod's cgroup namespace, whose v1 hierarchies the pod does
/// not show). A hierarchy that cannot be had (a pod in a user namespace
/// may not mount v1 ones) is left out.
enum OwnCgroups {
    V2(c_int),
    /// (place, controllers, tree) for each hierarchy.
    V1(Vec<(String, Vec<String>, c_int)>),
}

fn own_cgroups(views: Option<&str>) -> Option<OwnCgroups> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let flags = OPEN_TREE_CLONE | O_CLOEXEC as c_uint;
    match proc::cgroup_view(&own)? {
        proc::CgroupView::V2 { path } => {
            let source = std::ffi::CString::new(format!("/sys/fs/cgroup/{path}")).ok()?;
            // SAFETY: open_tree(2) with a prepared C string; returns a descriptor or -1.
            let fd = unsafe { syscall(SYS_open_tree, AT_FDCWD, source.as_ptr(), flags) as c_int };
            (fd >= 0).then_some(OwnCgroups::V2(fd))
        }
        proc::CgroupView::V1(hierarchies) => {
            let mut trees = Vec::new();
            // (made for the first hierarchy had: in a user namespace none is)
            let mut staged = None;
            for (i, h) in hierarchies.into_iter().enumerate() {
                if let Some(fd) = views.and_then(|dir| premounted_copy(dir, &h)) {
                    trees.push((h.place, h.controllers, fd));
                    continue;
                }
                let Some(mount) = v1_hierarchy(&h) else { continue };
                let fd = match staged.get_or_insert_with(stage).then(|| staged_copy(mount, i, &h.path)) {
                    Some(Ok(fd)) => fd,
                    Some(Err(())) | None => detached_copy(mount, &h.path),
                };
                if fd >= 0 {
                    trees.push((h.place, h.controllers, fd));
                }
            }
            // (none to be had: the pod's stay)
            (!trees.is_empty()).then_some(OwnCgroups::V1(trees))
        }
    }
}

/// Where the v1 hierarchies are parked while the app's cgroups are copied
/// out of them: a tmpfs on the pod's /tmp, in this mount namespace only.
/// It and they stay behind with the pod's mounts at the pivot, so letting
/// go of them all waits for that unmount's one RCU grace period; a
/// detached mount waits for one of its own when closed (each an expedited
/// grace period, about 70 µs on a 2-CPU node, nine on a v1 node).
const STAGE: &CStr = c"/tmp";

/// Mounts the tmpfs of [`STAGE`]; false when it cannot be had (the copies
/// are then taken from detached mounts).
fn stage() -> bool {
    // SAFETY: mount(2) with C string literals, in this process's own mount namespace.
    unsafe {
        mount(
            c"tmpfs".as_ptr(),
            STAGE.as_ptr(),
            c"tmpfs".as_ptr(),
            MS_NOSUID | MS_NODEV | MS_NOEXEC,
            c"mode=700,size=16k".as_ptr().cast(),
        ) == 0
    }
}

/// A copy of `path` below hierarchy `mount` (its `i`th), the hierarchy
/// parked on [`STAGE`] first; Err when it cannot be parked there (`mount`
/// is still open then). The copy is a descriptor or -1.
fn staged_copy(mount: c_int, i: usize, path: &str) -> Result<c_int, ()> {
    let place = format!("{}/{i}", STAGE.to_string_lossy());
    let target = std::ffi::CString::new(place.as_str()).map_err(drop)?;
    std::fs::create_dir(&place).map_err(drop)?;
    // SAFETY: move_mount(2) of our own detached mount onto a C string.
    let rc = unsafe {
        syscall(SYS_move_mount, mount, c"".as_ptr(), AT_FDCWD, target.as_ptr(), MOVE_MOUNT_F_EMPTY_PATH) as c_int
    };
    if rc < 0 {
        return Err(());
    }
    // SAFETY: closing our descriptor of what is now an attached mount (nothing is unmounted).
    unsafe { close(mount) };
    let source = std::ffi::CString::new(format!("{place}/{path}")).unwrap_or_default();
    // SAFETY: open_tree(2) with a prepared C string; returns a descriptor or -1.
    Ok(unsafe { syscall(SYS_open_tree, AT_FDCWD, source.as_ptr(), OPEN_TREE_CLONE | O_CLOEXEC as c_uint) as c_int })
}

/// A copy of the app's cgroup of hierarchy `h` from the pod's own mount of
/// it (`cgroupviews=`: `DIR/PLACE`, made once per pod): no file system
/// context per app, whose creation on v1 drains every offline cgroup of
/// the node's default hierarchy. None when that is not a cgroup file
/// system there (a pod whose hierarchies were not mounted).
fn premounted_copy(dir: &str, h: &proc::Hierarchy) -> Option<c_int> {
    let source = std::ffi::CString::new(format!("{dir}/{}/{}", h.place, h.path)).ok()?;
    // SAFETY: open_tree(2) with a prepared C string; returns a descriptor or -1.
    let fd =
        unsafe { syscall(SYS_open_tree, AT_FDCWD, source.as_ptr(), OPEN_TREE_CLONE | O_CLOEXEC as c_uint) } as c_int;
    if fd < 0 {
        return None;
    }
    // SAFETY: fstatfs(2) of our descriptor into a zeroed (valid) struct.
    let cgroup = unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        libc::fstatfs(fd, &mut fs) == 0 && fs.f_type == libc::CGROUP_SUPER_MAGIC
    };
    if cgroup {
        return Some(fd);
    }
    // SAFETY: closing our descriptor of a detached copy of something else.
    unsafe { close(fd) };
    None
}

/// A copy of `path` below the detached hierarchy `mount`, which is closed
/// (and so unmounted). A descriptor or -1.
fn detached_copy(mount: c_int, path: &str) -> c_int {
    let path = std::ffi::CString::new(path).unwrap_or_default();
    let at = if path.is_empty() { AT_EMPTY_PATH as c_uint } else { 0 };
    // SAFETY: open_tree(2) below our own detached mount, closed right after.
    unsafe {
        let fd = syscall(SYS_open_tree, mount, path.as_ptr(), OPEN_TREE_CLONE | O_CLOEXEC as c_uint | at) as c_int;
        close(mount);
        fd
    }
}

/// A detached mount of cgroup v1 hierarchy `h` (fsopen, fsconfig,
/// fsmount), its root the root of this process's cgroup namespace; None if
/// the kernel refuses it.
fn v1_hierarchy(h: &proc::Hierarchy) -> Option<c_int> {
    // SAFETY: fsopen(2), fsconfig(2) and fsmount(2) on our own context
    // descriptor with C strings alive for each call; the context is closed.
    unsafe {
        let fs = syscall(SYS_fsopen, c"cgroup".as_ptr(), FSOPEN_CLOEXEC) as c_int;
        if fs < 0 {
            return None;
        }
        let flag = |key: &str| {
            let key = std::ffi::CString::new(key).unwrap_or_default();
            syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, key.as_ptr(), std::ptr::null::<c_char>(), 0) >= 0
        };
        let mut ok = h.controllers.iter().all(|c| flag(c));
        if let Some(name) = &h.name {
            let name = std::ffi::CString::new(name.as_str()).unwrap_or_default();
            ok &=
                flag("none") && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, c"name".as_ptr(), name.as_ptr(), 0) >= 0;
        }
        ok &= syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, std::ptr::null::<c_char>(), std::ptr::null::<c_char>(), 0)
            >= 0;
        let attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
        let mount = if ok { syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, attrs as c_uint) as c_int } else { -1 };
        close(fs);
        (mount >= 0).then_some(mount)
    }
}

/// Puts the app's own cgroups at /sys/fs/cgroup, read-only when
/// `read_only`, in place of the pod's (one mount at each place: CRIU knows
/// a mount by its place): on v1 a tmpfs there with each hierarchy at its
/// place, a link by each controller's name to a hierarchy of several.
fn mount_own_cgroups(cgroups: OwnCgroups, read_only: bool) {
    const ROOT: &CStr = c"/sys/fs/cgroup";
    // SAFETY: umount2(2) of the pod's cgroup file system in our namespace (none there: EINVAL, nothing to do).
    unsafe { umount2(ROOT.as_ptr(), MNT_DETACH) };
    match cgroups {
        OwnCgroups::V2(fd) => {
            if read_only {
                read_only_tree(fd, false, ROOT);
            }
            attach_tree(fd, ROOT, "mounting the app's cgroup at /sys/fs/cgroup");
        }
        OwnCgroups::V1(trees) => {
            // SAFETY: mount(2) with C string literals.
            let rc = unsafe {
                mount(
                    c"tmpfs".as_ptr(),
                    ROOT.as_ptr(),
                    c"tmpfs".as_ptr(),
                    MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    c"mode=755,size=64k".as_ptr().cast(),
                )
            };
            check(rc, "mounting a tmpfs at /sys/fs/cgroup");
            for (place, controllers, fd) in trees {
                let dir = format!("/sys/fs/cgroup/{place}");
                make_target(&dir, true);
                let target = std::ffi::CString::new(dir.as_str()).unwrap_or_default();
                // (a copy of the pod's read-only mount is made writable for a privileged app)
                set_read_only(fd, read_only, &target);
                attach_tree(fd, &target, &format!("mounting the app's cgroup at {dir}"));
                if controllers.len() > 1 {
                    for c in &controllers {
                        let _ = std::os::unix::fs::symlink(&place, format!("/sys/fs/cgroup/{c}"));
                    }
                }
            }
            if read_only {
                let attr = mount_attr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
                // SAFETY: mount_setattr(2) on the tmpfs just mounted, with a properly sized struct.
                let rc =
                    unsafe { syscall(SYS_mount_setattr, AT_FDCWD, ROOT.as_ptr(), 0, &attr, size_of::<mount_attr>()) };
                check(rc as c_int, "making /sys/fs/cgroup read-only");
            }
        }
    }
}

/// CRIU's options that put the restored container's own cgroups where the
/// checkpoint had them (`cgroupfs=`; the daemon names every other external
/// mount): `--external mnt[PLACE]:SOURCE` for each. On v1 the hierarchies
/// are mounted for CRIU in `stage` (a directory of the images'), in CRIU's
/// own mount namespace.
fn criu_cgroup_mounts(stage: &str) -> Vec<std::ffi::CString> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut places = Vec::new();
    match proc::cgroup_view(&own) {
        None => {}
        Some(proc::CgroupView::V2 { path }) => {
            places.push(("/sys/fs/cgroup".to_string(), format!("/sys/fs/cgroup/{path}")))
        }
        Some(proc::CgroupView::V1(hierarchies)) => {
            make_target(stage, true);
            let stage_c = std::ffi::CString::new(stage).unwrap_or_default();
            // SAFETY: mount(2) in CRIU's own mount namespace, with C strings.
            let rc = unsafe {
                mount(c"tmpfs".as_ptr(), stage_c.as_ptr(), c"tmpfs".as_ptr(), MS_NOSUID | MS_NODEV, std::ptr::null())
            };
            check(rc, &format!("mounting a tmpfs at {stage}"));
            for h in hierarchies {
                let Some(mount) = v1_hierarchy(&h) else { continue };
                let dir = format!("{stage}/{}", h.place);
                make_target(&dir, true);
                let target = std::ffi::CString::new(dir.as_str()).unwrap_or_default();
                attach_tree(mount, &target, &format!("mounting cgroup {} for criu", h.place));
                places.push((format!("/sys/fs/cgroup/{}", h.place), format!("{dir}/{}", h.path)));
            }
        }
    }
    places
        .into_iter()
        .filter(|(_, source)| std::path::Path::new(source).is_dir())
        .flat_map(|(place, source)| ["--external".to_string(), format!("mnt[{place}]:{source}")])
        .filter_map(|a| std::ffi::CString::new(a).ok())
        .collect()
}

/// Moves the detached tree `fd` onto `target` (resolved inside the current
/// root, symlinks followed there), then closes `fd`.
fn attach_tree(fd: c_int, target: &CStr, what: &str) {
    // SAFETY: move_mount(2) of our own tree descriptor onto a C string.
    let rc = unsafe {
        syscall(
            SYS_move_mount,
            fd,
            c"".as_ptr(),
            AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_SYMLINKS,
        )
    };
    check(rc as c_int, what);
    // SAFETY: closing our own descriptor.
    unsafe { close(fd) };
}

/// A mount point at `path` in the app's root, as systemd makes one: a
/// directory, or an empty file, with the directories above it.
fn make_target(path: &str, dir: bool) {
    match std::fs::metadata(path) {
        Ok(_) => return,
        Err(e) if e.raw_os_error() == Some(ENOENT) => {}
        Err(e) => fail(&format!("mount point {path}"), e.raw_os_error().unwrap_or(0)),
    }
    let made = if dir {
        std::fs::create_dir_all(path)
    } else {
        let parent = std::path::Path::new(path).parent().unwrap_or(std::path::Path::new("/"));
        std::fs::create_dir_all(parent)
            .and_then(|()| std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).map(drop))
    };
    if let Err(e) = made {
        fail(&format!("making mount point {path}"), e.raw_os_error().unwrap_or(0));
    }
}

/// The app's working directory, made when missing (runc's way).
fn working_directory(cwd: &CStr) {
    // SAFETY: chdir(2) with a C string.
    if unsafe { chdir(cwd.as_ptr()) } == 0 {
        return;
    }
    let path = cwd.to_string_lossy();
    if errno() != ENOENT || std::fs::create_dir_all(path.as_ref()).is_err() {
        fail(&format!("working directory {path}"), errno());
    }
    // SAFETY: chdir(2) with a C string.
    check(unsafe { chdir(cwd.as_ptr()) }, &format!("working directory {path}"));
}

/// A /proc of the new PID namespace, then the app's masks and read-only
/// paths (below it and elsewhere).
fn proc_mount(plan: &Plan, cgroups_read_only: bool) {
    // a template's /proc is the node's, bound by the daemon (`bind=`)
    if !plan.host {
        make_target("/proc", true);
        // SAFETY: mount(2) with C string literals.
        let rc = unsafe {
            mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                MS_NOSUID | MS_NODEV | MS_NOEXEC,
                std::ptr::null(),
            )
        };
        check(rc, "mounting /proc");
    }
    for path in &plan.masks {
        let meta = match std::fs::metadata(path.to_string_lossy().as_ref()) {
            Ok(meta) => meta,
            Err(e) if e.raw_os_error() == Some(ENOENT) => continue,
            Err(e) => fail(&format!("masking {}", path.to_string_lossy()), e.raw_os_error().unwrap_or(0)),
        };
        // SAFETY: mount(2) with prepared C strings.
        let rc = unsafe {
            if meta.is_dir() {
                mount(
                    c"tmpfs".as_ptr(),
                    path.as_ptr(),
                    c"tmpfs".as_ptr(),
                    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    c"size=0,mode=555".as_ptr().cast(),
                )
            } else {
                mount(c"/dev/null".as_ptr(), path.as_ptr(), std::ptr::null(), MS_BIND, std::ptr::null())
            }
        };
        check(rc, &format!("masking {}", path.to_string_lossy()));
    }
    for path in &plan.read_only {
        // (already so, and a bind on itself would put each of them there twice)
        if cgroups_read_only && path.as_bytes() == b"/sys/fs/cgroup" {
            continue;
        }
        match std::fs::symlink_metadata(path.to_string_lossy().as_ref()) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(ENOENT) => continue,
            Err(e) => fail(&format!("making {} read-only", path.to_string_lossy()), e.raw_os_error().unwrap_or(0)),
        }
        // SAFETY: mount(2) and mount_setattr(2) with prepared C strings: a
        // bind of the path on itself, then read-only with everything below it.
        let rc = unsafe {
            let rc = mount(path.as_ptr(), path.as_ptr(), std::ptr::null(), MS_BIND | MS_REC, std::ptr::null());
            if rc < 0 {
                rc
            } else {
                let attr = mount_attr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
                syscall(
                    SYS_mount_setattr,
                    AT_FDCWD,
                    path.as_ptr(),
                    AT_RECURSIVE as c_uint,
                    &attr,
                    size_of::<mount_attr>(),
                ) as c_int
            }
        };
        check(rc, &format!("making {} read-only", path.to_string_lossy()));
    }
}

/// `struct sock_filter`.
fn deny_again(plan: &Plan) {
    let mut prog = seccomp::program(&plan.deny, plan.errno);
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_mut_ptr() };
    // SAFETY: prctl(2) with a filter program that outlives the call; root
    // with CAP_SYS_ADMIN here, so no no_new_privs is needed for it.
    let rc = unsafe { prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER as c_ulong, &fprog as *const libc::sock_fprog) };
    check(rc, "installing the seccomp filter");
}

/// The app's capabilities, groups, gid, uid and no_new_privs.
fn credentials(plan: &Plan) {
    if let Some(keep) = plan.caps {
        for cap in 0..64u32 {
            if keep & (1 << cap) != 0 {
                continue;
            }
            // SAFETY: prctl(2) dropping one capability from the bounding set.
            let rc = unsafe { prctl(PR_CAPBSET_DROP, cap as c_ulong) };
            if rc < 0 && errno() == EINVAL {
                break; // past the last capability this kernel knows
            }
            check(rc, &format!("dropping capability {cap}"));
        }
    }
    // SAFETY: prctl(2) clearing the ambient set.
    unsafe { prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0 as c_ulong, 0 as c_ulong, 0 as c_ulong) };
    // nothing inheritable, whatever the uid (file capabilities must not get
    // back what the bounding set dropped); the ids change with what is held now
    let mut held = capabilities();
    held[2] = 0;
    held[5] = 0;
    set_capabilities(&held);
    let mut groups = vec![plan.gid];
    groups.extend(plan.groups.iter().filter(|g| **g != plan.gid));
    // SAFETY: set*id(2) on this process with prepared values.
    unsafe {
        check(setgroups(groups.len(), groups.as_ptr()), "setting groups");
        check(setresgid(plan.gid, plan.gid, plan.gid), "setting gid");
        check(setresuid(plan.uid, plan.uid, plan.uid), "setting uid");
    }
    if plan.uid == 0
        && let Some(keep) = plan.caps
    {
        // root gets the bounding set on exec; what it holds now goes down to it too
        let (lo, hi) = (keep as u32 & held[1], (keep >> 32) as u32 & held[4]);
        set_capabilities(&[lo, lo, 0, hi, hi, 0]);
    }
    if plan.no_new_privs {
        // SAFETY: prctl(2) on this process.
        check(
            unsafe { prctl(PR_SET_NO_NEW_PRIVS, 1 as c_ulong, 0 as c_ulong, 0 as c_ulong, 0 as c_ulong) },
            "no_new_privs",
        );
    }
}

/// Effective, permitted and inheritable sets, for the low then the high 32 capabilities.
fn capabilities() -> [u32; 6] {
    let header: [u32; 2] = [LINUX_CAPABILITY_VERSION_3, 0];
    let mut data = [0u32; 6];
    // SAFETY: capget(2) with a v3 header and two data words.
    let rc = unsafe { syscall(SYS_capget, header.as_ptr(), data.as_mut_ptr()) };
    check(rc as c_int, "reading capabilities");
    data
}

fn set_capabilities(data: &[u32; 6]) {
    let header: [u32; 2] = [LINUX_CAPABILITY_VERSION_3, 0];
    // SAFETY: capset(2) with a v3 header and two data words.
    let rc = unsafe { syscall(SYS_capset, header.as_ptr(), data.as_ptr()) };
    check(rc as c_int, "setting capabilities");
}
