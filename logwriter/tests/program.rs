//! The `logwriter` program as the sandbox process execs it: the listening
//! socket and the pidfd to outlive passed open by number.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn pidfd_open(pid: u32) -> OwnedFd {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// The program started on `listener`, watching `pidfd`, both left open
/// across its exec as the sandbox process leaves them.
fn start(listener: &UnixListener, pidfd: &OwnedFd, extra: &[&str]) -> std::process::Child {
    let (l, p) = (listener.as_raw_fd(), pidfd.as_raw_fd());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_logwriter"));
    cmd.args([format!("listen={l}"), format!("pidfd={p}"), "--uuid=test".into()]).args(extra);
    cmd.stderr(Stdio::piped());
    // SAFETY: only fcntl, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for fd in [l, p] {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn().expect("start logwriter")
}

fn wait_exit(child: &mut std::process::Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn the_program_writes_logs_refuses_run_and_ends_with_the_pod() {
    let t = tempfile::tempdir().expect("tempdir");
    let sock = t.path().join(logwriter::SOCKET_FILE);
    let listener = UnixListener::bind(&sock).expect("bind");
    let mut pod = Command::new("sleep").arg("30").spawn().expect("sleep");
    let pidfd = pidfd_open(pod.id());
    let mut writer = start(&listener, &pidfd, &[]);
    drop((listener, pidfd));

    let log = t.path().join("app/0.log");
    let (r, mut w) = std::io::pipe().expect("pipe");
    logwriter::attach(&sock, "app", logwriter::Stream::Stdout, &log, r.as_raw_fd()).expect("attach");
    drop(r);
    // (serving: it has named itself)
    assert_eq!(std::fs::read_to_string(format!("/proc/{}/comm", writer.id())).expect("comm").trim(), "rkt-logwriter");
    w.write_all(b"hello\n").expect("write");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.ends_with(" stdout F hello\n")) {
        assert!(Instant::now() < deadline, "no log line: {:?}", std::fs::read_to_string(&log));
        std::thread::sleep(Duration::from_millis(10));
    }
    // this writer starts no apps: a host-PID pod's is rktlet's own
    let err = logwriter::run_host_app(&sock, "app", 1, "0").expect_err("run refused");
    assert_eq!(err.to_string(), "this log writer runs no apps");
    let err = UnixStream::connect(&sock).and_then(|mut c| {
        c.write_all(b"bogus")?;
        let mut answer = String::new();
        c.read_to_string(&mut answer)?;
        Ok(answer)
    });
    assert_eq!(err.expect("answer"), "error: unknown command \"bogus\"\n");

    // the pod's process gone and its last pipe ended: the writer ends
    pod.kill().expect("kill");
    pod.wait().expect("reap");
    assert_eq!(wait_exit(&mut writer, Duration::from_millis(300)), None, "it waits for the pipe's end");
    drop(w);
    let status = wait_exit(&mut writer, Duration::from_secs(10)).expect("the writer ends with the pod");
    assert!(status.success(), "{status:?}");
}

#[test]
fn the_program_refuses_descriptors_that_are_not_what_they_say() {
    let t = tempfile::tempdir().expect("tempdir");
    let mut pod = Command::new("sleep").arg("30").spawn().expect("sleep");
    let pidfd = pidfd_open(pod.id());
    // a socket that does not listen, named as the listener
    let (a, _b) = UnixStream::pair().expect("pair");
    let not_listening = UnixListener::bind(t.path().join("x")).expect("bind");
    let out = Command::new(env!("CARGO_BIN_EXE_logwriter"))
        .args([format!("listen={}", a.as_raw_fd()), format!("pidfd={}", pidfd.as_raw_fd())])
        .output()
        .expect("run");
    assert!(!out.status.success());
    // (not open in the child: close-on-exec)
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not open"), "{out:?}");
    let mut child = start(&not_listening, &pidfd, &["extra"]);
    let status = wait_exit(&mut child, Duration::from_secs(10)).expect("exits");
    assert!(!status.success());
    let mut err = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read");
    assert!(err.contains("unknown argument \"extra\""), "{err}");
    let _ = pod.kill();
    let _ = pod.wait();
}
