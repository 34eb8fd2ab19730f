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

use std::io;

/// A process's filters, oldest first: the order to install them in.
#[derive(Debug, Default)]
pub struct Filters {
    pub programs: Vec<Vec<libc::sock_filter>>,
}

/// `PTRACE_SECCOMP_GET_FILTER` of <linux/ptrace.h> (the libc crate lacks it).
const PTRACE_SECCOMP_GET_FILTER: libc::c_uint = 0x420c;

/// The most filters one process can have: the kernel caps a stack at 32768
/// instructions, counting 4 more per filter, and a filter has at least one.
const MAX_FILTERS: usize = 32768 / 5 + 1;

/// Reads the filters of `pid`, whose `/proc/<pid>/status` said `Seccomp:
/// mode` (0 none, 1 strict, 2 filters). Blocking; call from one thread.
pub fn of_process(pid: i32, mode: &str) -> io::Result<Filters> {
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
pub unsafe fn install(program: &[libc::sock_filter]) -> bool {
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
}
