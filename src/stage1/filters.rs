//! The seccomp filters of a running process, copied for a command exec'd
//! into its app (ExecSync, Exec, `rktlet app exec`): the command runs under
//! exactly the filters the app's main process runs under, whoever installed
//! them (the pod's systemd from `SystemCallFilter=`, appexec's own).
//!
//! The kernel hands a process's filters to a tracer that holds it stopped
//! (`PTRACE_SECCOMP_GET_FILTER`, index 0 the newest). The process is seized,
//! interrupted, read and let go within a few system calls; a call it was
//! blocked in is restarted by the kernel. A process without filters
//! (`Seccomp: 0`) is not touched.
//!
//! The kernel refuses that read to a tracer that runs under a filter itself
//! (a daemon in a node container that keeps its engine's filter, or one a
//! service manager confines). There the command's filters are built from
//! the profile the app was started with ([`Profile`], its isolators) the
//! way systemd built the app's (libseccomp, one program per architecture,
//! systemd's `@default` calls in an allow list, `RestrictNamespaces=` on the
//! clone flags); the filters the daemon runs under, which the app inherited
//! from the node too, the command inherits from the daemon.

use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};

/// A process's filters, oldest first: the order to install them in.
#[derive(Debug, Default)]
pub(crate) struct Filters {
    pub programs: Vec<Vec<libc::sock_filter>>,
}

/// The seccomp profile an app was started with, as its isolators record
/// it (`stage1::seccomp`): what its unit's filters were built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// `calls` is an allow list (else a deny list).
    pub allow: bool,
    pub calls: Vec<String>,
    /// What a denied call gets: this errno, or (None) the process is killed.
    pub errno: Option<i32>,
    /// The clone flags of the namespace types the app may make, when restricted.
    pub namespaces: Option<u64>,
}

/// The calls systemd (256) adds to every allow list (its `@default` set):
/// what no process runs without. Names an architecture lacks are skipped.
const SYSTEMD_DEFAULT: [&str; 63] = [
    "arch_prctl",
    "brk",
    "cacheflush",
    "clock_getres",
    "clock_getres_time64",
    "clock_gettime",
    "clock_gettime64",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "execve",
    "exit",
    "exit_group",
    "futex",
    "futex_time64",
    "futex_waitv",
    "get_robust_list",
    "get_thread_area",
    "getegid",
    "getegid32",
    "geteuid",
    "geteuid32",
    "getgid",
    "getgid32",
    "getgroups",
    "getgroups32",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getrandom",
    "getresgid",
    "getresgid32",
    "getresuid",
    "getresuid32",
    "getrlimit",
    "getsid",
    "gettid",
    "gettimeofday",
    "getuid",
    "getuid32",
    "membarrier",
    "mmap",
    "mmap2",
    "mprotect",
    "munmap",
    "nanosleep",
    "pause",
    "prlimit64",
    "restart_syscall",
    "riscv_flush_icache",
    "riscv_hwprobe",
    "rseq",
    "rt_sigreturn",
    "sched_getaffinity",
    "sched_yield",
    "set_robust_list",
    "set_thread_area",
    "set_tid_address",
    "set_tls",
    "sigreturn",
    "time",
    "ugetrlimit",
    "uretprobe",
];

/// The namespace types `RestrictNamespaces=` knows, as clone flags.
const NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWUTS as u64,
];

/// Whether this process runs under seccomp filters itself (then the kernel
/// refuses it the filters of others).
pub(crate) fn filtered_self() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.strip_prefix("Seccomp:").is_some_and(|v| v.trim() != "0")))
}

/// The filters a command exec'd into an app started with `profile` gets
/// (none: the app had no filter of its own), whichever way they are known:
/// read from the app's main process `pid` (whose status said `mode`), or,
/// where this process is filtered and may not read them, built from the
/// profile.
pub(crate) fn for_exec(pid: i32, mode: &str, profile: Option<&Profile>) -> io::Result<Filters> {
    if !filtered_self() {
        return of_process(pid, mode);
    }
    match profile {
        Some(p) => compile(p),
        None => Ok(Filters::default()),
    }
}

/// Builds the filters systemd builds for an app's unit from `profile`: per
/// architecture of this machine's kernel (for x86_64: x86-64, x86, x32) one
/// program for the call list, one for the namespaces.
pub(crate) fn compile(profile: &Profile) -> io::Result<Filters> {
    use libseccomp::{ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext};
    let err = |what: &str, e: libseccomp::error::SeccompError| io::Error::other(format!("{what}: {e}"));
    if let Some(group) = profile.calls.iter().find(|c| c.starts_with('@')) {
        // (CRI profiles name calls; a systemd group is only known to systemd)
        return Err(io::Error::other(format!(
            "the profile names systemd's group {group}, which cannot be built outside systemd"
        )));
    }
    // the native architecture first
    #[cfg(target_arch = "x86_64")]
    let archs = [ScmpArch::X8664, ScmpArch::X86, ScmpArch::X32];
    #[cfg(target_arch = "aarch64")]
    let archs = [ScmpArch::Aarch64, ScmpArch::Arm];
    let deny = match profile.errno {
        Some(e) => ScmpAction::Errno(e),
        None => ScmpAction::KillProcess,
    };
    // installed in order, each under those before it with prctl(2): the
    // namespace programs (which let prctl through) first, the call lists
    // last, the native one (which an allow list may deny prctl) very last
    let (mut namespace_programs, mut call_programs) = (Vec::new(), Vec::new());
    for arch in archs {
        // a program per architecture, the others let through to the next
        let context = |default: ScmpAction| -> io::Result<ScmpFilterContext> {
            let mut ctx = ScmpFilterContext::new(default).map_err(|e| err("a filter", e))?;
            if arch != archs[0] {
                ctx.add_arch(arch).map_err(|e| err("its architecture", e))?;
                ctx.remove_arch(archs[0]).map_err(|e| err("the native architecture", e))?;
            }
            ctx.set_act_badarch(ScmpAction::Allow).map_err(|e| err("other architectures", e))?;
            ctx.set_ctl_nnp(false).map_err(|e| err("no_new_privs", e))?;
            Ok(ctx)
        };
        // the native numbers (libseccomp's own for calls only other
        // architectures have), which libseccomp translates for `arch`
        let call = |name: &str| libseccomp::ScmpSyscall::from_name(name).ok();
        let (mut ctx, listed_action) =
            if profile.allow { (context(deny)?, ScmpAction::Allow) } else { (context(ScmpAction::Allow)?, deny) };
        // (with what the command's own setup calls once its filters are in,
        // as appexec's apps get them)
        let defaults: &[&str] =
            if profile.allow { &[&SYSTEMD_DEFAULT[..], &super::appexec::STILL_NEEDED[..]].concat() } else { &[] };
        let mut names: Vec<&str> = profile.calls.iter().map(String::as_str).chain(defaults.iter().copied()).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            // a call this architecture lacks is left out, as systemd leaves it
            if let Some(nr) = call(name) {
                ctx.add_rule(listed_action, nr).map_err(|e| err(name, e))?;
            }
        }
        call_programs.insert(0, export(&ctx)?);
        if let Some(allowed) = profile.namespaces {
            let mut ctx = context(ScmpAction::Allow)?;
            let refused: Vec<u64> = NAMESPACE_FLAGS.into_iter().filter(|f| allowed & f == 0).collect();
            let eperm = ScmpAction::Errno(libc::EPERM);
            // clone3's flags are behind a pointer: ENOSYS, and libc falls back to clone
            if let Some(nr) = call("clone3") {
                ctx.add_rule(ScmpAction::Errno(libc::ENOSYS), nr).map_err(|e| err("clone3", e))?;
            }
            for flag in &refused {
                for name in ["clone", "unshare"] {
                    if let Some(nr) = call(name) {
                        let cmp = ScmpArgCompare::new(0, ScmpCompareOp::MaskedEqual(*flag), *flag);
                        ctx.add_rule_conditional(eperm, nr, &[cmp]).map_err(|e| err(name, e))?;
                    }
                }
            }
            if let Some(nr) = call("setns") {
                if allowed == 0 {
                    ctx.add_rule(eperm, nr).map_err(|e| err("setns", e))?;
                } else {
                    // a type of 0 joins whatever the descriptor is
                    let any = ScmpArgCompare::new(1, ScmpCompareOp::Equal, 0);
                    ctx.add_rule_conditional(eperm, nr, &[any]).map_err(|e| err("setns", e))?;
                    for flag in &refused {
                        let cmp = ScmpArgCompare::new(1, ScmpCompareOp::MaskedEqual(*flag), *flag);
                        ctx.add_rule_conditional(eperm, nr, &[cmp]).map_err(|e| err("setns", e))?;
                    }
                }
            }
            namespace_programs.push(export(&ctx)?);
        }
    }
    namespace_programs.extend(call_programs);
    Ok(Filters { programs: namespace_programs })
}

/// The BPF program of `ctx`, through a memory file.
fn export(ctx: &libseccomp::ScmpFilterContext) -> io::Result<Vec<libc::sock_filter>> {
    use std::io::{Read, Seek};
    // SAFETY: memfd_create(2) with a static name; the descriptor is owned below.
    let fd = unsafe { libc::memfd_create(c"rktlet-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just made and owned by nothing else.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    ctx.export_bpf(file.as_fd()).map_err(|e| io::Error::other(format!("exporting the filter: {e}")))?;
    let mut bytes = Vec::new();
    file.seek(io::SeekFrom::Start(0))?;
    file.read_to_end(&mut bytes)?;
    let size = std::mem::size_of::<libc::sock_filter>();
    if bytes.len() % size != 0 || bytes.len() / size > u16::MAX as usize {
        return Err(io::Error::other(format!("a filter of {} bytes", bytes.len())));
    }
    Ok(bytes
        .chunks_exact(size)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}

/// `PTRACE_SECCOMP_GET_FILTER` of <linux/ptrace.h> (the libc crate lacks it).
const PTRACE_SECCOMP_GET_FILTER: libc::c_uint = 0x420c;

/// The most filters one process can have: the kernel caps a stack at 32768
/// instructions, counting 4 more per filter, and a filter has at least one.
const MAX_FILTERS: usize = 32768 / 5 + 1;

/// Reads the filters of `pid`, whose `/proc/<pid>/status` said `Seccomp:
/// mode` (0 none, 1 strict, 2 filters). Blocking; call from one thread.
pub(crate) fn of_process(pid: i32, mode: &str) -> io::Result<Filters> {
    match mode {
        "0" => return Ok(Filters::default()),
        "2" => {}
        other => return Err(io::Error::other(format!("seccomp mode {other} cannot be copied"))),
    }
    // SAFETY: ptrace(2) requests on `pid` with no memory passed; the process
    // is detached again on every path below.
    if unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let stopped = stop(pid);
    let read = match &stopped {
        Ok(Some(_)) => read_stopped(pid),
        Ok(None) => Err(io::Error::from_raw_os_error(libc::ESRCH)),
        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
    };
    if let Ok(Some(signal)) = stopped {
        // SAFETY: detaching the tracee stopped above; a signal it was
        // stopped for is delivered as it would have been.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, signal as libc::c_long) };
    }
    read
}

/// Interrupts the seized `pid` and waits for its stop. `Some(signal)`: it
/// stopped, with the signal to give back on detach (0 for none); `None`: it
/// exited meanwhile.
fn stop(pid: i32) -> io::Result<Option<i32>> {
    // SAFETY: as above.
    if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, pid, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) for our tracee, status into a local.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return Ok(None);
        }
        if libc::WIFSTOPPED(status) {
            // an event stop (ours, or a group stop) carries no signal to
            // deliver; a signal-delivery stop does
            let event = status >> 16;
            let signal = libc::WSTOPSIG(status);
            return Ok(Some(if event != 0 || signal == libc::SIGTRAP { 0 } else { signal }));
        }
    }
}

fn read_stopped(pid: i32) -> io::Result<Filters> {
    let mut newest_first = Vec::new();
    let mut complete = false;
    for index in 0..MAX_FILTERS {
        // SAFETY: with a null buffer the request returns the filter's length only.
        let len = unsafe { libc::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, index as libc::c_long, 0) };
        if len < 0 {
            let e = io::Error::last_os_error();
            // ENOENT: past the oldest filter
            if e.raw_os_error() == Some(libc::ENOENT) && index > 0 {
                complete = true;
                break;
            }
            return Err(e);
        }
        let mut program = vec![libc::sock_filter { code: 0, jt: 0, jf: 0, k: 0 }; len as usize];
        // SAFETY: the buffer holds the `len` instructions the kernel just reported.
        let got = unsafe { libc::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, index as libc::c_long, program.as_mut_ptr()) };
        if got != len {
            return Err(io::Error::other("the filter changed while being read"));
        }
        newest_first.push(program);
    }
    // fail closed: copying only the newest filters would drop the oldest,
    // which are the runtime's own
    if !complete {
        return Err(io::Error::other(format!("more than {MAX_FILTERS} seccomp filters")));
    }
    newest_first.reverse();
    Ok(Filters { programs: newest_first })
}

/// Installs `program` on the calling thread (the exec'd command's child,
/// before its exec).
///
/// # Safety
/// For the cloned child: one raw syscall on memory prepared before the clone.
pub(crate) unsafe fn install(program: &[libc::sock_filter]) -> bool {
    let prog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr() as *mut libc::sock_filter };
    // prctl, not seccomp(2): the app's own start installed its later filters
    // with prctl, so the earlier filters let prctl through (appexec's widened
    // profile does not let seccomp(2) through)
    // SAFETY: prctl(2) reads `prog` and the instructions it points to, both alive for the call.
    unsafe {
        libc::syscall(
            libc::SYS_prctl,
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &prog as *const libc::sock_fprog,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_without_filters_is_not_touched_and_strict_mode_is_refused() {
        // pid 0 would fail any ptrace request: mode 0 never makes one
        assert!(of_process(0, "0").expect("none").programs.is_empty());
        assert!(of_process(0, "1").is_err());
    }

    /// Runs `probe` in a forked child under `filters` (with no_new_privs,
    /// as an ordinary user may install them): its exit code.
    fn under(filters: &Filters, probe: fn() -> i32) -> i32 {
        // SAFETY: fork(2) in a test; the child makes raw syscalls only and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: in the child, prctl(2) and the filters' installation, then the probe's syscalls.
            unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                for p in &filters.programs {
                    if !install(p) {
                        libc::_exit(100);
                    }
                }
                libc::_exit(probe());
            }
        }
        let mut status = 0;
        // SAFETY: waitpid(2) for our child into a local.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if libc::WIFSIGNALED(status) { 128 + libc::WTERMSIG(status) } else { libc::WEXITSTATUS(status) }
    }

    /// The errno of a raw syscall (0: it succeeded).
    fn errno_of(r: libc::c_long) -> i32 {
        if r < 0 { io::Error::last_os_error().raw_os_error().unwrap_or(-1) } else { 0 }
    }

    fn mkdirat_probe() -> i32 {
        // SAFETY: mkdirat(2) of a path that cannot be made (EEXIST unfiltered).
        errno_of(unsafe { libc::syscall(libc::SYS_mkdirat, libc::AT_FDCWD, c"/".as_ptr(), 0o755) })
    }

    #[test]
    fn a_deny_list_profile_denies_its_calls_with_its_errno() {
        let deny = |errno| Profile { allow: false, calls: vec!["mkdirat".into()], errno, namespaces: None };
        let filters = compile(&deny(Some(libc::EACCES))).expect("compiled");
        // a program per x86 architecture (or arm's two)
        assert!(filters.programs.len() >= 2, "{}", filters.programs.len());
        assert_eq!(under(&Filters::default(), mkdirat_probe), libc::EEXIST);
        assert_eq!(under(&filters, mkdirat_probe), libc::EACCES);
        // without an errno the process is killed
        let kill = compile(&deny(None)).expect("compiled");
        assert_eq!(under(&kill, mkdirat_probe), 128 + libc::SIGSYS);
        // a systemd group is known to systemd only: refused, not guessed
        let group = Profile { allow: true, calls: vec!["@system-service".into()], errno: Some(1), namespaces: None };
        assert!(compile(&group).is_err());
    }

    #[test]
    fn an_allow_list_profile_lets_through_its_calls_and_systemds_defaults() {
        // write(2) and mkdirat are not listed; exit_group (systemd's @default) is
        let profile =
            Profile { allow: true, calls: vec!["getcwd".into()], errno: Some(libc::ENOSYS), namespaces: None };
        let filters = compile(&profile).expect("compiled");
        assert_eq!(under(&filters, mkdirat_probe), libc::ENOSYS);
        fn getcwd_probe() -> i32 {
            let mut buf = [0u8; 64];
            // SAFETY: getcwd(2) into a local buffer.
            errno_of(unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) })
        }
        assert_eq!(under(&filters, getcwd_probe), 0);
    }

    #[test]
    fn restricted_namespaces_are_refused_on_their_flags() {
        let all_but_user = NAMESPACE_FLAGS.iter().fold(0, |m, f| m | f) & !(libc::CLONE_NEWUSER as u64);
        let profile =
            Profile { allow: false, calls: vec!["kexec_load".into()], errno: Some(1), namespaces: Some(all_but_user) };
        let filters = compile(&profile).expect("compiled");
        fn setns_probe() -> i32 {
            // a bad descriptor: EBADF from the kernel, EPERM from the filter
            // SAFETY: setns(2) of descriptor -1.
            let user = errno_of(unsafe { libc::syscall(libc::SYS_setns, -1, libc::CLONE_NEWUSER) });
            // SAFETY: as above, a type the profile allows.
            let uts = errno_of(unsafe { libc::syscall(libc::SYS_setns, -1, libc::CLONE_NEWUTS) });
            // SAFETY: as above, any type.
            let any = errno_of(unsafe { libc::syscall(libc::SYS_setns, -1, 0) });
            // SAFETY: clone3(2) with a null argument: EFAULT or EINVAL from the kernel.
            let clone3 = errno_of(unsafe { libc::syscall(libc::SYS_clone3, 0, 0) });
            i32::from(user == libc::EPERM)
                | i32::from(uts == libc::EBADF) << 1
                | i32::from(any == libc::EPERM) << 2
                | i32::from(clone3 == libc::ENOSYS) << 3
        }
        assert_eq!(under(&filters, setns_probe), 0b1111);
        assert_eq!(under(&Filters::default(), setns_probe), 0b0010);
    }
}
