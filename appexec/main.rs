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
//!    (`bind=`, `rbind=`, `robind=`, `rrobind=`); mounts a /proc of the new
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
//! With `pid=host` the child does all of the above but the exec, and
//! mounts no /proc (the daemon binds the node's, `bind=`, masks on top): it
//! is the template of an app of a host-PID pod, which nothing under the
//! pod's systemd can start in the node's PID namespace. Once confined it
//! tells the parent (a byte `r` on the pipe, which then tells systemd the
//! unit started) and parks until its parent dies or it is killed; the pod's
//! log writer, in the node's PID namespace, starts the app as a copy of it
//! (`src/stage1/exec.rs`, `src/stream/log.rs`).
//!
//! Built by build.rs as a static executable (it runs inside any image) from
//! this single file with the standard library only; the daemon embeds it and
//! binds it read-only at `/dev/.rkt-appexec` in each pod.

use std::ffi::{CStr, CString, c_char, c_int, c_long, c_uint, c_ulong, c_void};
use std::os::unix::ffi::OsStringExt;
use std::sync::atomic::{AtomicI32, Ordering};

unsafe extern "C" {
    fn unshare(flags: c_int) -> c_int;
    fn chdir(path: *const c_char) -> c_int;
    fn umount2(target: *const c_char, flags: c_int) -> c_int;
    fn setns(fd: c_int, nstype: c_int) -> c_int;
    fn open(path: *const c_char, flags: c_int, ...) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn fork() -> c_int;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn mount(
        src: *const c_char,
        target: *const c_char,
        fs: *const c_char,
        flags: c_ulong,
        data: *const c_void,
    ) -> c_int;
    fn prctl(option: c_int, ...) -> c_int;
    fn setgroups(size: usize, list: *const c_uint) -> c_int;
    fn setresgid(r: c_uint, e: c_uint, s: c_uint) -> c_int;
    fn setresuid(r: c_uint, e: c_uint, s: c_uint) -> c_int;
    fn syscall(number: c_long, ...) -> c_long;
    fn execv(path: *const c_char, argv: *const *const c_char) -> c_int;
    fn kill(pid: c_int, sig: c_int) -> c_int;
    fn getpid() -> c_int;
    fn pipe2(fds: *mut [c_int; 2], flags: c_int) -> c_int;
    fn poll(fds: *mut PollFd, nfds: c_ulong, timeout: c_int) -> c_int;
    fn __errno_location() -> *mut c_int;
    fn _exit(code: c_int) -> !;
    fn write(fd: c_int, buf: *const c_void, count: usize) -> isize;
    fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize;
    fn waitid(idtype: c_int, id: c_uint, info: *mut c_void, options: c_int) -> c_int;
}

/// In the child: the pipe end that tells the parent the app could not be
/// exec'd (a byte) rather than exec'd (the end closed by the exec).
static FAILED_FD: AtomicI32 = AtomicI32::new(-1);
/// In the child: the read end of the pipe that tells it its parent died.
static ALIVE_FD: AtomicI32 = AtomicI32::new(-1);

const CLONE_NEWPID: c_int = 0x2000_0000;
const CLONE_NEWNS: c_int = 0x0002_0000;
const MS_SLAVE: c_ulong = 1 << 19;
const MNT_DETACH: c_int = 2;
const OPEN_TREE_CLONE: c_uint = 1;
const AT_EMPTY_PATH: c_uint = 0x1000;
const MOVE_MOUNT_F_EMPTY_PATH: c_uint = 4;
const MOVE_MOUNT_T_SYMLINKS: c_uint = 0x10;
/// The same numbers on every architecture (newer than their split).
const SYS_OPEN_TREE: c_long = 428;
const SYS_MOVE_MOUNT: c_long = 429;
const SYS_OPENAT2: c_long = 437;
const O_PATH: c_int = 0o10_000_000;
#[cfg(target_arch = "x86_64")]
const O_DIRECTORY: c_int = 0o200_000;
#[cfg(target_arch = "aarch64")]
const O_DIRECTORY: c_int = 0o40_000;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_IN_ROOT: u64 = 0x10;
#[cfg(target_arch = "x86_64")]
const SYS_PIVOT_ROOT: c_long = 155;
#[cfg(target_arch = "aarch64")]
const SYS_PIVOT_ROOT: c_long = 41;
const O_RDONLY: c_int = 0;
const O_WRONLY: c_int = 1;
const O_CLOEXEC: c_int = 0o2_000_000;
const MS_RDONLY: c_ulong = 1;
const MS_NOSUID: c_ulong = 2;
const MS_NODEV: c_ulong = 4;
const MS_NOEXEC: c_ulong = 8;
const MS_BIND: c_ulong = 4096;
const MS_REC: c_ulong = 16384;
const PR_SET_PDEATHSIG: c_int = 1;
const PR_SET_DUMPABLE: c_int = 4;
const PR_SET_SECCOMP: c_int = 22;
const PR_CAPBSET_DROP: c_int = 24;
const PR_SET_NO_NEW_PRIVS: c_int = 38;
const PR_CAP_AMBIENT: c_int = 47;
const PR_CAP_AMBIENT_CLEAR_ALL: c_ulong = 4;
const SECCOMP_MODE_FILTER: c_ulong = 2;
const SIG_IGN: usize = 1;
const SIGKILL: c_int = 9;
const SIGCHLD: c_int = 17;
const SIGSTOP: c_int = 19;
const POLLHUP: i16 = 0x10;
const P_PID: c_int = 1;
const WEXITED: c_int = 4;
const WNOHANG: c_int = 1;
const WNOWAIT: c_int = 0x0100_0000;
const CLD_KILLED: c_int = 2;
const CLD_DUMPED: c_int = 3;

/// `struct pollfd`.
#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}
const ENOENT: c_int = 2;
const EINTR: c_int = 4;
const EINVAL: c_int = 22;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
#[cfg(target_arch = "x86_64")]
const SYS_CAPGET: c_long = 125;
#[cfg(target_arch = "aarch64")]
const SYS_CAPGET: c_long = 90;
const SYS_CAPSET: c_long = SYS_CAPGET + 1;
/// The same number on every architecture (a syscall newer than their split).
const SYS_MOUNT_SETATTR: c_long = 442;
const AT_FDCWD: c_int = -100;
const AT_RECURSIVE: c_uint = 0x8000;
const MOUNT_ATTR_RDONLY: u64 = 1;

/// `struct mount_attr`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
#[cfg(target_arch = "x86_64")]
const SYS_RT_SIGACTION: c_long = 13;
#[cfg(target_arch = "aarch64")]
const SYS_RT_SIGACTION: c_long = 134;

/// What the daemon asked for.
#[derive(Default)]
struct Plan {
    /// `None`: a new PID namespace; `Some((pid, start time))`: join that
    /// process's, if it is still the one that started then.
    join: Option<(u32, String)>,
    /// `pid=keep`: the PID namespace this program runs in (the pod's), no
    /// new one.
    keep_pid: bool,
    /// `pid=host`: as `keep`, but the child is a host-PID app's template:
    /// no /proc mounted (the node's is bound), parked instead of the exec.
    host: bool,
    /// Paths in the app's root of volumes whose mounts propagate both ways
    /// (`shared=`): copied from the pod before the namespace is made, so the
    /// copies stay peers of the host's mounts (the namespace's own are
    /// slaves), and put back on top once in the root.
    shared: Vec<CString>,
    masks: Vec<CString>,
    read_only: Vec<CString>,
    /// Syscall names to deny again, and the errno (`None`: kill).
    deny: Vec<String>,
    errno: Option<u32>,
    caps: Option<u64>,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    no_new_privs: bool,
    /// The AppArmor profile the app's execve enters (`aa=`).
    apparmor: Option<CString>,
    /// `cgwait=NAME:N`: wait, before anything else, until N of this
    /// process's cgroup v1 hierarchies place it in a cgroup named NAME (the
    /// app's, where the daemon moves it): the app then runs under its
    /// limits from its first instruction, as children inherit cgroups.
    cgroup_wait: Option<(String, usize)>,
    /// The app's root as the pod sees it (`root=`): this program makes the
    /// mount namespace and binds, then pivots into it (required).
    root: CString,
    binds: Vec<Bind>,
    root_read_only: bool,
    cwd: Option<CString>,
    path: CString,
    argv: Vec<CString>,
}

/// A path of the pod put at one of the app's (`bind=`, `rbind=` with the
/// tree below it, `robind=` and `rrobind=` read-only; a source written
/// `-/path` may be missing; one written `@path` is inside the app's root,
/// resolved there as if it were `/`): `KEY=SOURCE TARGET`, the target the
/// next argument.
struct Bind {
    source: CString,
    in_root: bool,
    target: CString,
    recursive: bool,
    read_only: bool,
    optional: bool,
}

fn cstring(s: Vec<u8>) -> CString {
    CString::new(s).unwrap_or_else(|_| fail("an argument contains a NUL byte", 0))
}

fn number<T: std::str::FromStr>(key: &str, v: &str) -> T {
    v.parse().unwrap_or_else(|_| fail(&format!("{key}={v} is not a number"), 0))
}

fn parse() -> Plan {
    let mut args = std::env::args_os().skip(1).map(OsStringExt::into_vec);
    let mut plan = Plan::default();
    while let Some(arg) = args.next() {
        if arg == b"--" {
            break;
        }
        let arg = String::from_utf8(arg).unwrap_or_else(|_| fail("an option is not UTF-8", 0));
        let (key, value) = arg.split_once('=').unwrap_or((arg.as_str(), ""));
        match key {
            "root" => plan.root = cstring(value.into()),
            "rootro" => plan.root_read_only = true,
            "cwd" => plan.cwd = Some(cstring(value.into())),
            "bind" | "rbind" | "robind" | "rrobind" => {
                let target = args.next().unwrap_or_else(|| fail(&format!("no target after {arg}"), 0));
                let (optional, source) = match value.strip_prefix('-') {
                    Some(source) => (true, source),
                    None => (false, value),
                };
                let (in_root, source) = match source.strip_prefix('@') {
                    Some(source) => (true, source),
                    None => (false, source),
                };
                plan.binds.push(Bind {
                    source: cstring(source.into()),
                    in_root,
                    target: cstring(target),
                    recursive: matches!(key, "rbind" | "rrobind"),
                    read_only: key.ends_with("robind"),
                    optional,
                });
            }
            "pid" if value == "new" => plan.join = None,
            "pid" if value == "keep" => plan.keep_pid = true,
            "pid" if value == "host" => (plan.keep_pid, plan.host) = (true, true),
            "shared" => plan.shared.push(cstring(value.into())),
            "pid" => {
                let (pid, start) = value.split_once('@').unwrap_or_else(|| fail("pid= is new or PID@STARTTIME", 0));
                plan.join = Some((number(key, pid), start.to_string()));
            }
            "mask" => plan.masks.push(cstring(value.into())),
            "ro" => plan.read_only.push(cstring(value.into())),
            "deny" => plan.deny = value.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect(),
            "errno" => plan.errno = Some(number(key, value)),
            "caps" => plan.caps = Some(u64::from_str_radix(value, 16).unwrap_or_else(|_| fail("caps= is not hex", 0))),
            "uid" => plan.uid = number(key, value),
            "gid" => plan.gid = number(key, value),
            "groups" => plan.groups = value.split(',').filter(|s| !s.is_empty()).map(|g| number(key, g)).collect(),
            "nnp" => plan.no_new_privs = true,
            "aa" => plan.apparmor = Some(cstring(format!("exec {value}").into_bytes())),
            "cgwait" => {
                let (name, n) = value.rsplit_once(':').unwrap_or_else(|| fail("cgwait= is NAME:COUNT", 0));
                plan.cgroup_wait = Some((format!("/{name}"), number(key, n)));
            }
            _ => fail(&format!("unknown option {arg:?}"), 0),
        }
    }
    if plan.root.is_empty() {
        fail("no root=", 0);
    }
    plan.path = cstring(args.next().unwrap_or_else(|| fail("no program after --", 0)));
    plan.argv = args.map(cstring).collect();
    if plan.argv.is_empty() {
        fail("no argv[0] after the program", 0);
    }
    plan
}

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
    let plan = parse();
    if let Some((name, count)) = &plan.cgroup_wait {
        wait_for_cgroups(name, *count);
    }
    // the parent outlives every stop signal systemd sends the unit; the
    // child puts the defaults back before its exec (ignored signals would
    // stay ignored across it)
    // (the raw call: real-time stop signals such as SIGRTMIN+3 too)
    let ignore = [SIG_IGN as u64, 0, 0, 0];
    for sig in 1..65 {
        if sig != SIGKILL && sig != SIGSTOP && sig != SIGCHLD {
            // SAFETY: rt_sigaction(2) with a kernel sigaction whose handler is SIG_IGN.
            unsafe { syscall(SYS_RT_SIGACTION, sig as c_long, ignore.as_ptr(), std::ptr::null::<u64>(), 8 as c_long) };
        }
    }
    match &plan.join {
        None if plan.keep_pid => {}
        // SAFETY: unshare(2) of the PID namespace for this process's future children.
        None => check(unsafe { unshare(CLONE_NEWPID) }, "new PID namespace"),
        Some((pid, start)) => {
            let ns = cstring(format!("/proc/{pid}/ns/pid").into_bytes());
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
    check(unsafe { pipe2(&mut alive, O_CLOEXEC) }, "pipe");
    check(unsafe { pipe2(&mut execd, O_CLOEXEC) }, "pipe");
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
    if !exec_failed && !ready() {
        // SAFETY: a signal to our own child.
        unsafe { kill(child, SIGKILL) };
    }
    wait_and_mirror(child);
}

/// Waits until `count` lines of /proc/self/cgroup (v1 hierarchies) end
/// with `suffix`, checking every 100 µs; after 10 s the app does not run
/// (the daemon that was to move it is gone, or could not).
fn wait_for_cgroups(suffix: &str, count: usize) {
    let own = || std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let placed = || own().lines().filter(|l| !l.starts_with("0::") && l.ends_with(suffix)).count() >= count;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !placed() {
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
    // siginfo_t: si_signo, si_errno, si_code, then (padded) si_pid; 128 bytes
    let mut info = [0i32; 32];
    // SAFETY: waitid(2) on our own child into a buffer of siginfo_t's size.
    let rc = unsafe { waitid(P_PID, child as c_uint, info.as_mut_ptr().cast(), WEXITED | WNOHANG | WNOWAIT) };
    rc == 0 && info[4] == child && matches!(info[2], CLD_KILLED | CLD_DUMPED)
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
    stat.rsplit_once(')')?.1.split_whitespace().nth(19).map(str::to_string)
}

/// The parent: waits for the container and ends the same way.
fn wait_and_mirror(child: c_int) -> ! {
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
    let (signaled, code) = (status & 0x7f, (status >> 8) & 0xff);
    if signaled == 0 {
        // SAFETY: ends this process.
        unsafe { _exit(code) };
    }
    // killed: die of the same signal, without a core of this program
    // SAFETY: dumpable flag, default disposition and a signal to ourselves.
    unsafe {
        prctl(PR_SET_DUMPABLE, 0 as c_ulong);
        syscall(SYS_RT_SIGACTION, signaled as c_long, [0u64; 4].as_ptr(), std::ptr::null::<u64>(), 8 as c_long);
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
            unsafe { syscall(SYS_RT_SIGACTION, sig as c_long, default.as_ptr(), std::ptr::null::<u64>(), 8 as c_long) };
        }
    }
    enter_root(plan, &plan.root);
    proc_mount(plan);
    // made when missing (runc's way), before the root may turn read-only
    working_directory(plan.cwd.as_deref().unwrap_or(c"/"));
    if plan.root_read_only {
        // the root itself, after the mount points were made in it; volumes
        // and binds keep their own flags (runc's way)
        let attr = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
        // SAFETY: mount_setattr(2) on "/" with a properly sized struct.
        let rc =
            unsafe { syscall(SYS_MOUNT_SETATTR, AT_FDCWD, c"/".as_ptr(), 0 as c_uint, &attr, size_of::<MountAttr>()) };
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
        let mut fd = PollFd { fd: alive, events: 0, revents: 0 };
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
        let mut pfd = PollFd { fd: alive, events: 0, revents: 0 };
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
    let how = OpenHow { flags: (O_PATH | O_CLOEXEC) as u64, mode: 0, resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
    // SAFETY: openat2(2) with our descriptor, a prepared C string and a properly sized struct.
    let fd = unsafe { syscall(SYS_OPENAT2, root_fd, inner.as_ptr(), &how, size_of::<OpenHow>()) } as c_int;
    // SAFETY: closing our descriptor (a successful close keeps errno).
    unsafe { close(root_fd) };
    fd
}

/// `struct open_how` of openat2(2).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
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
fn enter_root(plan: &Plan, root: &CStr) {
    // copies of the shared volumes while they are still peers of the host's
    let mut shared = Vec::new();
    for path in &plan.shared {
        let at = open_in_root(root, path);
        check(at, &format!("finding {} in {}", path.to_string_lossy(), root.to_string_lossy()));
        let flags = OPEN_TREE_CLONE | O_CLOEXEC as c_uint | AT_RECURSIVE | AT_EMPTY_PATH;
        // SAFETY: open_tree(2) of the descriptor just opened; closed right after.
        let fd = unsafe { syscall(SYS_OPEN_TREE, at, c"".as_ptr(), flags) } as c_int;
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
        let flags = OPEN_TREE_CLONE | O_CLOEXEC as c_uint | if bind.recursive { AT_RECURSIVE } else { 0 };
        let fd = if bind.in_root {
            let at = open_in_root(root, &bind.source);
            if at < 0 && bind.optional && errno() == ENOENT {
                continue;
            }
            check(at, &format!("finding {} in {}", bind.source.to_string_lossy(), root.to_string_lossy()));
            // SAFETY: open_tree(2) of the descriptor just opened; closed right after.
            let fd = unsafe { syscall(SYS_OPEN_TREE, at, c"".as_ptr(), flags | AT_EMPTY_PATH) } as c_int;
            // SAFETY: closing our descriptor (a successful close keeps errno).
            unsafe { close(at) };
            fd
        } else {
            // SAFETY: open_tree(2) with a prepared C string; returns a descriptor or -1.
            unsafe { syscall(SYS_OPEN_TREE, AT_FDCWD, bind.source.as_ptr(), flags) as c_int }
        };
        if fd < 0 && bind.optional && errno() == ENOENT {
            continue;
        }
        check(fd, &format!("copying {}", bind.source.to_string_lossy()));
        if bind.read_only {
            let attr = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
            let at = AT_EMPTY_PATH | if bind.recursive { AT_RECURSIVE } else { 0 };
            // SAFETY: mount_setattr(2) on our tree descriptor with a properly sized struct.
            let rc = unsafe { syscall(SYS_MOUNT_SETATTR, fd, c"".as_ptr(), at, &attr, size_of::<MountAttr>()) };
            check(rc as c_int, &format!("making {} read-only", bind.source.to_string_lossy()));
        }
        // the source's kind, for the mount point (told by the copy itself)
        let is_dir = std::fs::metadata(format!("/proc/self/fd/{fd}")).is_ok_and(|m| m.is_dir());
        trees.push((fd, bind, is_dir));
    }
    // SAFETY: chdir(2), pivot_root(2) and umount2(2) with C strings: the old
    // root ends up on top of the new one, at ".", and is detached from there.
    unsafe {
        check(chdir(root.as_ptr()), &format!("entering {}", root.to_string_lossy()));
        check(syscall(SYS_PIVOT_ROOT, c".".as_ptr(), c".".as_ptr()) as c_int, "pivot_root");
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
}

/// Moves the detached tree `fd` onto `target` (resolved inside the current
/// root, symlinks followed there), then closes `fd`.
fn attach_tree(fd: c_int, target: &CStr, what: &str) {
    // SAFETY: move_mount(2) of our own tree descriptor onto a C string.
    let rc = unsafe {
        syscall(
            SYS_MOVE_MOUNT,
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
fn proc_mount(plan: &Plan) {
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
                let attr = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
                syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.as_ptr(), AT_RECURSIVE, &attr, size_of::<MountAttr>())
                    as c_int
            }
        };
        check(rc, &format!("making {} read-only", path.to_string_lossy()));
    }
}

/// `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

/// `struct sock_fprog`.
#[repr(C)]
struct Prog {
    len: u16,
    filter: *const Insn,
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_AND_K: u16 = 0x54;
/// x32 calls are x86_64's with bit 30 set, the same numbers but for a few
/// of x32's own above 511 (none of which is an x86_64 call): the filter
/// compares numbers without that bit, on every architecture (no other sets it).
const X32_BIT: u32 = 0x4000_0000;
const BPF_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;

/// The syscalls this program may be asked to deny again, per architecture
/// the kernel may run the app's code as: (audit arch, [(name, number)]).
#[cfg(target_arch = "x86_64")]
const TABLES: &[(u32, &[(&str, u32)])] = &[
    // x86_64, and x32
    (
        0xc000_003e,
        &[
            ("mount", 165),
            ("unshare", 272),
            ("setns", 308),
            ("mount_setattr", 442),
            ("open_tree", 428),
            ("move_mount", 429),
            ("pivot_root", 155),
            ("umount2", 166),
            ("chdir", 80),
            ("mkdir", 83),
            ("mkdirat", 258),
            ("openat", 257),
            ("openat2", 437),
            ("socket", 41),
            ("sendto", 44),
            ("read", 0),
            ("close", 3),
            ("clone", 56),
            ("wait4", 61),
            ("kill", 62),
            ("getpid", 39),
            ("pipe2", 293),
            ("newfstatat", 262),
            ("statx", 332),
            ("rt_sigaction", 13),
            ("waitid", 247),
            // x32's own number for it (see X32_BIT)
            ("rt_sigaction", 512),
        ],
    ),
    // i386 (its fstatat64 for newfstatat)
    (
        0x4000_0003,
        &[
            ("mount", 21),
            ("unshare", 310),
            ("setns", 346),
            ("mount_setattr", 442),
            ("open_tree", 428),
            ("move_mount", 429),
            ("pivot_root", 217),
            ("umount2", 52),
            ("chdir", 12),
            ("mkdir", 39),
            ("mkdirat", 296),
            ("openat", 295),
            ("openat2", 437),
            ("socket", 359),
            ("sendto", 369),
            ("read", 3),
            ("close", 6),
            ("clone", 120),
            ("wait4", 114),
            ("kill", 37),
            ("getpid", 20),
            ("pipe2", 331),
            ("newfstatat", 300),
            ("statx", 383),
            ("rt_sigaction", 174),
            ("waitid", 284),
        ],
    ),
];
#[cfg(target_arch = "aarch64")]
const TABLES: &[(u32, &[(&str, u32)])] = &[
    (
        0xc000_00b7,
        &[
            ("mount", 40),
            ("unshare", 97),
            ("setns", 268),
            ("mount_setattr", 442),
            ("open_tree", 428),
            ("move_mount", 429),
            ("pivot_root", 41),
            ("umount2", 39),
            ("chdir", 49),
            ("mkdirat", 34),
            ("openat", 56),
            ("openat2", 437),
            ("socket", 198),
            ("sendto", 206),
            ("read", 63),
            ("close", 57),
            ("clone", 220),
            ("wait4", 260),
            ("kill", 129),
            ("getpid", 172),
            ("pipe2", 59),
            ("newfstatat", 79),
            ("statx", 291),
            ("rt_sigaction", 134),
            ("waitid", 95),
        ],
    ),
    // 32-bit arm (its fstatat64 for newfstatat)
    (
        0x4000_0028,
        &[
            ("mount", 21),
            ("unshare", 337),
            ("setns", 375),
            ("mount_setattr", 442),
            ("open_tree", 428),
            ("move_mount", 429),
            ("pivot_root", 218),
            ("umount2", 52),
            ("chdir", 12),
            ("mkdir", 39),
            ("mkdirat", 323),
            ("openat", 322),
            ("openat2", 437),
            ("socket", 281),
            ("sendto", 290),
            ("read", 3),
            ("close", 6),
            ("clone", 120),
            ("wait4", 114),
            ("kill", 37),
            ("getpid", 20),
            ("pipe2", 359),
            ("newfstatat", 327),
            ("statx", 397),
            ("rt_sigaction", 174),
            ("waitid", 280),
        ],
    ),
];

/// A filter on top of systemd's: the named syscalls fail with the profile's
/// errno (or kill, as the profile would); everything else is left to it.
fn deny_again(plan: &Plan) {
    let ret_deny = plan.errno.map_or(SECCOMP_RET_KILL_PROCESS, |e| SECCOMP_RET_ERRNO | (e & 0xffff));
    let mut prog = Vec::new();
    for (arch, table) in TABLES {
        let numbers: Vec<u32> =
            table.iter().filter(|(name, _)| plan.deny.iter().any(|d| d == name)).map(|(_, nr)| *nr).collect();
        // [arch check] [load nr] [clear the x32 bit] [one jeq per number] [allow] [deny]
        let n = numbers.len() as u8;
        prog.push(Insn { code: BPF_LD_W_ABS, jt: 0, jf: 0, k: 4 });
        prog.push(Insn { code: BPF_JEQ_K, jt: 0, jf: n + 4, k: *arch });
        prog.push(Insn { code: BPF_LD_W_ABS, jt: 0, jf: 0, k: 0 });
        prog.push(Insn { code: BPF_AND_K, jt: 0, jf: 0, k: !X32_BIT });
        for (i, nr) in numbers.iter().enumerate() {
            // to the deny return: past the rest of the jeqs and the allow
            prog.push(Insn { code: BPF_JEQ_K, jt: n - i as u8, jf: 0, k: *nr });
        }
        prog.push(Insn { code: BPF_RET_K, jt: 0, jf: 0, k: SECCOMP_RET_ALLOW });
        prog.push(Insn { code: BPF_RET_K, jt: 0, jf: 0, k: ret_deny });
    }
    prog.push(Insn { code: BPF_RET_K, jt: 0, jf: 0, k: SECCOMP_RET_ALLOW });
    let fprog = Prog { len: prog.len() as u16, filter: prog.as_ptr() };
    // SAFETY: prctl(2) with a filter program that outlives the call; root
    // with CAP_SYS_ADMIN here, so no no_new_privs is needed for it.
    let rc = unsafe { prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog as *const Prog) };
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
    let rc = unsafe { syscall(SYS_CAPGET, header.as_ptr(), data.as_mut_ptr()) };
    check(rc as c_int, "reading capabilities");
    data
}

fn set_capabilities(data: &[u32; 6]) {
    let header: [u32; 2] = [LINUX_CAPABILITY_VERSION_3, 0];
    // SAFETY: capset(2) with a v3 header and two data words.
    let rc = unsafe { syscall(SYS_CAPSET, header.as_ptr(), data.as_ptr()) };
    check(rc as c_int, "setting capabilities");
}
