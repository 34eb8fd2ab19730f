//! CRI container logs: the per-pod log writer.
//!
//! Runs in: a process of its own per pod, forked by the sandbox process just
//! before it execs nspawn (so it is single-threaded, costs no extra exec, lives
//! in the pod's cgroup, and keeps writing when the daemon restarts). The
//! daemon hands it the read ends of each app's stdout/stderr pipes over a unix
//! socket in the pod directory; it writes kubelet's format,
//! `<RFC3339Nano> <stdout|stderr> <P|F> <content>`, splitting long lines into
//! `P` (partial) pieces. A container created without a log path gets its
//! pipes read all the same (nothing is written then). Attach sessions
//! subscribe to an app's output over the same socket: each piece read from
//! its pipes is copied to them as it comes, framed ([`read_frame`]), and
//! their connection is closed when the app's last pipe ends. It exits when
//! the pod's nspawn exits.
//!
//! It is also the parent of the apps of a host-PID pod (`run`): living in
//! the node's PID namespace, it starts each as a copy of its template, a
//! parked appexec the pod's systemd and appexec confined
//! (`stage1::exec::spawn_in_own_pid_namespace`), and supervises it: at its
//! exit it records the exit code (`rkt/status/<app>`, first record wins)
//! and kills the template, so the unit ends; the template's end (the unit
//! stopped) kills the app; the pod's end kills them all.

use crate::sys::{pidfd_getfd, pidfd_open};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Socket of the pod's log writer, in the pod directory.
pub const SOCKET_FILE: &str = crate::pod::LOG_SOCKET_FILE;
/// Longest line written whole; longer ones are split into `P` pieces.
pub const MAX_LINE: usize = 16 * 1024;
/// Output kept for an attach session that does not read fast enough; past
/// it the session is let go (the app is never held back by a reader).
pub const SUBSCRIBER_BACKLOG: usize = 4 << 20;
/// The largest frame a subscriber takes.
const MAX_FRAME: usize = 1 << 20;

/// Which stream a pipe carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    fn parse(s: &str) -> Option<Stream> {
        match s {
            "stdout" => Some(Stream::Stdout),
            "stderr" => Some(Stream::Stderr),
            _ => None,
        }
    }
}

/// Turns a byte stream into CRI log lines; keeps an unfinished line until
/// its newline (or until it grows past [`MAX_LINE`]).
#[derive(Debug, Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
}

impl LineSplitter {
    /// Feeds bytes; returns the records to write as (partial?, content).
    pub fn feed(&mut self, mut data: &[u8]) -> Vec<(bool, Vec<u8>)> {
        let mut out = Vec::new();
        while !data.is_empty() {
            match data.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    self.pending.extend_from_slice(&data[..i]);
                    data = &data[i + 1..];
                    out.push((false, std::mem::take(&mut self.pending)));
                }
                None => {
                    self.pending.extend_from_slice(data);
                    data = &[];
                }
            }
            while self.pending.len() > MAX_LINE {
                let rest = self.pending.split_off(MAX_LINE);
                out.push((true, std::mem::replace(&mut self.pending, rest)));
            }
        }
        out
    }

    /// At end of stream: what is left, a line the app did not end, as a
    /// partial record (`P`, as containerd writes it: kubelet rebuilds the
    /// output from the tags, and a final `F` would add a newline the app
    /// never wrote, e.g. to a termination message taken from the log).
    pub fn finish(&mut self) -> Option<(bool, Vec<u8>)> {
        (!self.pending.is_empty()).then(|| (true, std::mem::take(&mut self.pending)))
    }
}

/// Formats one record.
pub fn record(t: SystemTime, stream: Stream, partial: bool, content: &[u8]) -> Vec<u8> {
    let mut line = format!("{} {} {} ", crate::time::rfc3339_nano(t), stream.as_str(), if partial { "P" } else { "F" })
        .into_bytes();
    line.extend_from_slice(content);
    line.push(b'\n');
    line
}

fn open_log(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // a symlink put where the log goes must not redirect root's writes
    OpenOptions::new().create(true).append(true).mode(0o640).custom_flags(libc::O_NOFOLLOW).open(path)
}

struct Source {
    app: String,
    stream: Stream,
    pipe: File,
    split: LineSplitter,
    /// The CRI log and its path; none for a container without a log path.
    log: Option<(File, PathBuf)>,
}

impl Source {
    fn write(&mut self, records: Vec<(bool, Vec<u8>)>) {
        let Some((log, _)) = &mut self.log else { return };
        let now = SystemTime::now();
        for (partial, content) in records {
            if let Err(e) = log.write_all(&record(now, self.stream, partial, &content)) {
                tracing::warn!(app = %self.app, error = %e, "cannot write container log");
            }
        }
    }
}

/// An attach session reading an app's output, and what it has yet to take.
struct Subscriber {
    app: String,
    conn: UnixStream,
    backlog: Vec<u8>,
}

impl Subscriber {
    /// Queues a frame and writes what the socket takes now; false when the
    /// session is gone or fell too far behind.
    fn send(&mut self, frame: &[u8]) -> bool {
        if self.backlog.len() + frame.len() > SUBSCRIBER_BACKLOG {
            tracing::warn!(app = %self.app, "an attach session fell behind the output: let go");
            return false;
        }
        self.backlog.extend_from_slice(frame);
        self.flush()
    }

    fn flush(&mut self) -> bool {
        while !self.backlog.is_empty() {
            match self.conn.write(&self.backlog) {
                Ok(0) => return false,
                Ok(n) => drop(self.backlog.drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }
}

/// A piece of output as sent to attach sessions: the stream's byte (1
/// stdout, 2 stderr), the length (u32, big-endian), the bytes.
pub fn frame(stream: Stream, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 5);
    out.push(match stream {
        Stream::Stdout => 1,
        Stream::Stderr => 2,
    });
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// Reads one frame of a subscription; `None` at its end.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<(Stream, Vec<u8>)>> {
    let mut head = [0u8; 5];
    match r.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let stream = match head[0] {
        1 => Stream::Stdout,
        2 => Stream::Stderr,
        b => return Err(io::Error::new(io::ErrorKind::InvalidData, format!("unknown stream {b} in a frame"))),
    };
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    // the writer sends what one read of a pipe gave (64 KiB at most)
    if len > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a frame of {len} bytes")));
    }
    let mut data = vec![0u8; len];
    r.read_exact(&mut data)?;
    Ok(Some((stream, data)))
}

/// What the writer keeps between requests.
#[derive(Default)]
struct State {
    sources: HashMap<RawFd, Source>,
    stdins: HashMap<String, OwnedFd>,
    subscribers: HashMap<RawFd, Subscriber>,
    /// The pod directory (a descriptor's path: it holds across renames),
    /// where host-PID apps' exits are recorded; none: no `run`.
    pod_dir: Option<PathBuf>,
    /// Host-PID apps by name.
    hosts: HashMap<String, HostApp>,
}

/// An app of a host-PID pod, this process's child, and its template.
struct HostApp {
    running: crate::stage1::exec::Running,
    template: OwnedFd,
    /// `cgroup.kill` of its unit's cgroup (unified hierarchy): at its exit
    /// what it left there goes too (runc's way for a container sharing the
    /// node's PID namespace), the template with it.
    cgroup_kill: Option<PathBuf>,
}

/// `cgroup.kill` of the unified cgroup of process `pid`, as this process sees it.
fn cgroup_kill_of(pid: i32) -> Option<PathBuf> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?.trim_start_matches('/');
    let layout = crate::cgroup::Layout::cached().ok()?;
    let mount = layout.hierarchies.iter().find(|h| h.is_unified())?.mount.clone()?;
    // never the node's root cgroup, nor one above the pod's
    (!path.is_empty()).then(|| mount.join(path).join("cgroup.kill"))
}

fn pidfd_kill(pidfd: &OwnedFd, signal: i32) {
    let _ = crate::sys::pidfd_send_signal(pidfd.as_raw_fd(), signal);
}

/// The app's program and argv as its template holds them: appexec's
/// arguments after `--` (its options never are `--`: bind targets are
/// absolute paths).
fn template_command(template: i32) -> io::Result<(String, Vec<String>)> {
    let comm = std::fs::read_to_string(format!("/proc/{template}/comm"))?;
    let cmdline = std::fs::read(format!("/proc/{template}/cmdline"))?;
    parse_template(&comm, &cmdline)
        .ok_or_else(|| io::Error::other(format!("process {template} is not a host-PID app's template")))
}

/// Whether template `template`'s plan names an environment file (`env=`).
fn template_has_env_file(template: i32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{template}/cmdline")).unwrap_or_default();
    cmdline.split(|b| *b == 0).take_while(|a| *a != b"--").any(|a| a.starts_with(b"env="))
}

/// The program and argv of a template from its `comm` and `cmdline`: only
/// a parked appexec of `pid=host` is one (not appexec before it confined
/// itself, nor any other process).
fn parse_template(comm: &str, cmdline: &[u8]) -> Option<(String, Vec<String>)> {
    let mut args = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned());
    if comm.trim_end() != crate::stage1::appexec::COMM || args.nth(1).as_deref() != Some("pid=host") {
        return None;
    }
    args.by_ref().find(|a| a == "--")?;
    let mut rest: Vec<String> = args.collect();
    // the kernel's cmdline ends with a NUL: one empty piece after it
    if rest.last().is_some_and(String::is_empty) {
        rest.pop();
    }
    if rest.len() < 2 {
        return None;
    }
    let program = rest.remove(0);
    Some((program, rest))
}

/// The seccomp profile host-PID app `app` of the pod in `dir` was started
/// with, from the pod's manifest.
fn host_app_profile(dir: &Path, app: &str) -> Result<Option<crate::stage1::filters::Profile>, String> {
    let path = dir.join(crate::pod::MANIFEST_FILE);
    let bytes = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let manifest: crate::pod::manifest::PodManifest =
        serde_json::from_slice(&bytes).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let isolators = manifest.app(app).and_then(|a| a.app.as_ref()).map(|a| a.isolators.as_slice()).unwrap_or_default();
    crate::stage1::seccomp::profile_of(isolators).map_err(|e| format!("the seccomp isolator of {app}: {e}"))
}

/// Descriptor `fd` of the template (a pipe, a terminal or /dev/null): a
/// copy by pidfd_getfd(2), or, where a seccomp filter the node keeps refuses
/// that call (systemd-nspawn's), the same file opened again through
/// /proc/PID/fd with the template's access mode (the same pipe, terminal or
/// file; not a socket, which stdio never is here).
fn template_fd(pidfd: &OwnedFd, pid: i32, fd: i32) -> io::Result<OwnedFd> {
    match pidfd_getfd(pidfd, fd) {
        Ok(copy) => return Ok(copy),
        Err(e) if e.raw_os_error() != Some(libc::EPERM) && e.raw_os_error() != Some(libc::ENOSYS) => return Err(e),
        Err(_) => {}
    }
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))?;
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| i32::from_str_radix(f.trim(), 8).ok())
        .ok_or_else(|| io::Error::other(format!("no flags in /proc/{pid}/fdinfo/{fd}")))?;
    let file = OpenOptions::new()
        .read(flags & libc::O_ACCMODE != libc::O_WRONLY)
        .write(flags & libc::O_ACCMODE != libc::O_RDONLY)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .map_err(|e| io::Error::new(e.kind(), format!("opening the template's descriptor {fd}: {e}")))?;
    Ok(file.into())
}

impl State {
    /// Starts host-PID app `app` as a copy of `template` (checked to be the
    /// process that started at `start`); its pid.
    fn run(&mut self, app: &str, template: i32, start: &str) -> Result<i32, String> {
        if self.pod_dir.is_none() {
            return Err("this log writer runs no apps".into());
        }
        if self.hosts.contains_key(app) {
            return Err(format!("{app} already runs"));
        }
        let tpl = pidfd_open(template).map_err(|e| format!("template {template}: {e}"))?;
        // opened, then checked: the pid was not reused meanwhile
        if crate::stage1::appexec::start_time(template).as_deref() != Some(start) {
            return Err(format!("template {template} is gone"));
        }
        // (not a template: refused, and left alone)
        let (program, argv) = template_command(template).map_err(|e| e.to_string())?;
        let started = (|| -> Result<crate::stage1::exec::Running, String> {
            let stdio = [0, 1, 2].map(|fd| template_fd(&tpl, template, fd));
            let [Ok(i), Ok(o), Ok(e)] = stdio else {
                let why: Vec<String> = stdio.into_iter().filter_map(Result::err).map(|e| e.to_string()).collect();
                return Err(format!("cannot copy the template's stdio: {}", why.join("; ")));
            };
            // a tty container's terminal becomes the app's controlling terminal
            let tty = nix::unistd::isatty(&i).unwrap_or(false);
            // (read only where this process may not read the template's filters)
            let profile = match &self.pod_dir {
                Some(dir) if crate::stage1::filters::filtered_self() => host_app_profile(dir, app)?,
                _ => None,
            };
            // the names systemd refused, which the template was told of (`env=`)
            let env_file = match &self.pod_dir {
                Some(dir) if template_has_env_file(template) => {
                    let file = crate::stage1::app_status::AppPaths::in_pod_dir(dir, app).environ_file();
                    std::fs::read(&file).map_err(|e| format!("reading {}: {e}", file.display()))?
                }
                _ => Vec::new(),
            };
            let mut running = crate::stage1::exec::spawn_in_own_pid_namespace(
                &crate::stage1::exec::AppProcess { pid: template, profile },
                &program,
                &argv,
                [i.as_fd(), o.as_fd(), e.as_fd()],
                tty,
                &env_file,
            )
            .map_err(|e| e.to_string())?;
            running.started().map_err(|e| e.to_string())?;
            // ours and not reaped: the pid is the app's until we wait for it
            let start = crate::stage1::appexec::start_time(running.pid()).ok_or("the app is gone")?;
            if let Some(dir) = &self.pod_dir {
                let paths = crate::stage1::app_status::AppPaths::in_pod_dir(dir, app);
                crate::stage1::app_status::record_host_app(&paths, running.pid(), &start)
                    .map_err(|e| format!("recording the app's process: {e}"))?;
            }
            Ok(running)
        })();
        match started {
            Ok(running) => {
                let pid = running.pid();
                tracing::info!(app, pid, "host-PID app started");
                let cgroup_kill = cgroup_kill_of(template);
                self.hosts.insert(app.to_string(), HostApp { running, template: tpl, cgroup_kill });
                Ok(pid)
            }
            Err(e) => {
                // the unit ends with its template
                pidfd_kill(&tpl, libc::SIGKILL);
                Err(e)
            }
        }
    }

    /// Reaps host-PID app `app` (exited), records its exit and kills its template.
    fn reap(&mut self, app: &str) {
        let Some(h) = self.hosts.remove(app) else { return };
        let code = h.running.wait().unwrap_or(255);
        if let Some(dir) = &self.pod_dir {
            let paths = crate::stage1::app_status::AppPaths::in_pod_dir(dir, app);
            if let Err(e) = crate::stage1::app_status::record_exit(&paths, code) {
                tracing::warn!(app, error = %e, "cannot record the exit of a host-PID app");
            }
        }
        pidfd_kill(&h.template, libc::SIGKILL);
        if let Some(kill) = &h.cgroup_kill
            && let Err(e) = std::fs::write(kill, "1")
        {
            tracing::warn!(app, error = %e, "cannot kill what a host-PID app left");
        }
    }

    /// At the pod's end: every host-PID app killed, reaped and recorded.
    fn kill_hosts(&mut self) {
        for h in self.hosts.values() {
            if let Some(fd) = h.running.pidfd() {
                let _ = crate::sys::pidfd_send_signal(fd.as_raw_fd(), libc::SIGKILL);
            }
        }
        let apps: Vec<String> = self.hosts.keys().cloned().collect();
        for app in apps {
            self.reap(&app);
        }
    }
}

impl State {
    /// Lets go of the subscribers of apps none of whose pipes is left
    /// (closing their connection ends their sessions).
    fn drop_orphans(&mut self) {
        let sources = &self.sources;
        self.subscribers.retain(|_, s| sources.values().any(|src| src.app == s.app));
    }
}

/// The writer's loop: serves `listener` until the process behind `pidfd` exits.
pub fn serve(listener: UnixListener, pidfd: Option<OwnedFd>) -> io::Result<()> {
    serve_pod(listener, pidfd, None)
}

/// [`serve`] for a pod whose directory is `pod_dir` (a path that stays
/// valid across its renames): host-PID apps may be run.
pub fn serve_pod(listener: UnixListener, pidfd: Option<OwnedFd>, pod_dir: Option<PathBuf>) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut st = State { pod_dir, ..State::default() };
    // a read's worth: a longer output takes more reads (the writer of a
    // pod stays resident, and the buffer with it)
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let keys: Vec<RawFd> = st.sources.keys().copied().collect();
        let subs: Vec<RawFd> = st.subscribers.keys().copied().collect();
        let hosts: Vec<String> = st.hosts.keys().cloned().collect();
        let (ready, ready_subs, pod_gone, incoming, exited, orphaned) = {
            let mut fds = vec![PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
            if let Some(p) = &pidfd {
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
            }
            let base = fds.len();
            for k in &keys {
                fds.push(PollFd::new(st.sources[k].pipe.as_fd(), PollFlags::POLLIN));
            }
            // a subscriber is read only to learn it left; written when it has a backlog
            for k in &subs {
                let s = &st.subscribers[k];
                let out = if s.backlog.is_empty() { PollFlags::empty() } else { PollFlags::POLLOUT };
                fds.push(PollFd::new(s.conn.as_fd(), PollFlags::POLLIN | out));
            }
            // each host-PID app's pidfd, then its template's
            let host_base = fds.len();
            for app in &hosts {
                let h = &st.hosts[app];
                if let Some(fd) = h.running.pidfd() {
                    fds.push(PollFd::new(fd, PollFlags::POLLIN));
                }
                fds.push(PollFd::new(h.template.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::Error::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            let hit = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            let incoming = hit(&fds[0]);
            let pod_gone = pidfd.is_some() && hit(&fds[1]);
            let ready: Vec<RawFd> =
                keys.iter().enumerate().filter(|(i, _)| hit(&fds[base + i])).map(|(_, k)| *k).collect();
            let sub_base = base + keys.len();
            let ready_subs: Vec<RawFd> =
                subs.iter().enumerate().filter(|(i, _)| hit(&fds[sub_base + i])).map(|(_, k)| *k).collect();
            let (mut exited, mut orphaned) = (Vec::new(), Vec::new());
            let mut i = host_base;
            for app in &hosts {
                if st.hosts[app].running.pidfd().is_some() {
                    if hit(&fds[i]) {
                        exited.push(app.clone());
                    }
                    i += 1;
                }
                if hit(&fds[i]) {
                    orphaned.push(app.clone());
                }
                i += 1;
            }
            (ready, ready_subs, pod_gone, incoming, exited, orphaned)
        };
        for app in &exited {
            st.reap(app);
        }
        // the template gone (its unit stopped): the app goes too, reaped once its pidfd says so
        for app in orphaned.iter().filter(|a| !exited.contains(a)) {
            if let Some(fd) = st.hosts.get(app).and_then(|h| h.running.pidfd()) {
                let _ = crate::sys::pidfd_send_signal(fd.as_raw_fd(), libc::SIGKILL);
            }
        }
        for fd in ready {
            let Some(src) = st.sources.get_mut(&fd) else { continue };
            match src.pipe.read(&mut buf) {
                Ok(0) | Err(_) => {
                    if let Some(rest) = src.split.finish() {
                        src.write(vec![rest]);
                    }
                    st.sources.remove(&fd);
                    st.drop_orphans();
                }
                Ok(n) => {
                    let records = src.split.feed(&buf[..n]);
                    src.write(records);
                    let (app, piece) = (src.app.clone(), frame(src.stream, &buf[..n]));
                    st.subscribers.retain(|_, s| s.app != app || s.send(&piece));
                }
            }
        }
        for fd in ready_subs {
            let Some(s) = st.subscribers.get_mut(&fd) else { continue };
            // anything to read is its end (a session never writes after subscribing)
            let mut probe = [0u8; 64];
            let gone = !matches!(s.conn.read(&mut probe), Err(ref e) if e.kind() == io::ErrorKind::WouldBlock);
            if gone || !s.flush() {
                st.subscribers.remove(&fd);
            }
        }
        if incoming {
            while let Ok((conn, _)) = listener.accept() {
                handle(conn, &mut st);
            }
        }
        if pod_gone {
            st.kill_hosts();
        }
        if pod_gone && st.sources.is_empty() {
            return Ok(());
        }
    }
}

fn handle(conn: UnixStream, st: &mut State) {
    let reply = match receive(&conn) {
        Ok((cmd, fd)) => apply(&cmd, fd, st),
        Err(e) => Err(e.to_string()),
    };
    let mut conn = conn;
    let _ = match reply {
        Ok(Reply::Done) => conn.write_all(b"ok\n"),
        Ok(Reply::Text(text)) => conn.write_all(format!("ok\t{text}\n").as_bytes()),
        Ok(Reply::Fd(fd)) => {
            let fds = [fd.as_raw_fd()];
            let iov = [IoSlice::new(b"ok\n")];
            sendmsg::<()>(conn.as_raw_fd(), &iov, &[ControlMessage::ScmRights(&fds)], MsgFlags::empty(), None)
                .map(|_| ())
                .map_err(io::Error::from)
        }
        Ok(Reply::Subscribe(app)) => {
            let subscribed = conn.write_all(b"ok\n").and_then(|()| conn.set_nonblocking(true));
            if subscribed.is_ok() {
                let key = conn.as_raw_fd();
                st.subscribers.insert(key, Subscriber { app, conn, backlog: Vec::new() });
            }
            subscribed
        }
        Err(e) => conn.write_all(format!("error: {e}\n").as_bytes()),
    };
}

fn receive(conn: &UnixStream) -> io::Result<(String, Option<OwnedFd>)> {
    conn.set_nonblocking(false)?;
    let mut data = vec![0u8; 8192];
    let mut cmsg = nix::cmsg_space!([RawFd; 1]);
    let mut iov = [IoSliceMut::new(&mut data)];
    let msg = recvmsg::<()>(conn.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC)?;
    let mut fd = None;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for raw in fds {
                // SAFETY: the kernel installed this descriptor for us with SCM_RIGHTS.
                let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                fd.get_or_insert(owned);
            }
        }
    }
    let n = msg.bytes;
    Ok((String::from_utf8_lossy(&data[..n]).trim_end_matches('\n').to_string(), fd))
}

/// What a request is answered with.
enum Reply {
    Done,
    /// `ok` and a value.
    Text(String),
    /// A descriptor to hand back.
    Fd(OwnedFd),
    /// The connection stays, as an attach session of this app.
    Subscribe(String),
}

/// Carries out one request.
fn apply(cmd: &str, fd: Option<OwnedFd>, st: &mut State) -> Result<Reply, String> {
    let parts: Vec<&str> = cmd.split('\t').collect();
    match parts.as_slice() {
        // the write end of an app's stdin pipe: kept here, where it outlives the daemon
        ["stdin", app] => {
            st.stdins.insert(app.to_string(), fd.ok_or("stdin without a pipe")?);
            Ok(Reply::Done)
        }
        ["getstdin", app] => {
            let fd = st.stdins.get(*app).ok_or_else(|| format!("{app} has no stdin (closed, or never had one)"))?;
            fd.try_clone().map(Reply::Fd).map_err(|e| e.to_string())
        }
        ["closestdin", app] => {
            st.stdins.remove(*app);
            Ok(Reply::Done)
        }
        // an empty path: the app has no CRI log, its output is only read (for attach)
        ["attach", app, stream, path] => {
            let stream = Stream::parse(stream).ok_or_else(|| format!("unknown stream {stream}"))?;
            let pipe = File::from(fd.ok_or("attach without a pipe")?);
            let log = match path {
                &"" => None,
                path => {
                    let path = PathBuf::from(path);
                    let log = open_log(&path).map_err(|e| format!("opening {}: {e}", path.display()))?;
                    Some((log, path))
                }
            };
            let key = pipe.as_raw_fd();
            st.sources.insert(key, Source { app: app.to_string(), stream, pipe, split: LineSplitter::default(), log });
            Ok(Reply::Done)
        }
        ["subscribe", app] => {
            if !st.sources.values().any(|s| s.app == *app) {
                return Err(format!("{app} has no output left (it exited, or was started before rktlet kept it)"));
            }
            Ok(Reply::Subscribe(app.to_string()))
        }
        // a host-PID app, started as a copy of its template (pid, start time)
        ["run", app, template, start] => {
            let template = template.parse().map_err(|_| format!("bad template pid {template:?}"))?;
            st.run(app, template, start).map(|pid| Reply::Text(pid.to_string()))
        }
        ["reopen", app] => {
            for src in st.sources.values_mut().filter(|s| s.app == *app) {
                if let Some((log, path)) = &mut src.log {
                    *log = open_log(path).map_err(|e| format!("reopening {}: {e}", path.display()))?;
                }
            }
            Ok(Reply::Done)
        }
        _ => Err(format!("unknown command {cmd:?}")),
    }
}

/// Asks the pod's log writer at `socket`, optionally passing a descriptor;
/// the descriptor it answers with, if any.
fn request(socket: &Path, cmd: &str, fd: Option<RawFd>) -> io::Result<Option<OwnedFd>> {
    let conn = UnixStream::connect(socket)?;
    let iov = [IoSlice::new(cmd.as_bytes())];
    let fds: Vec<RawFd> = fd.into_iter().collect();
    let cmsgs: Vec<ControlMessage> = if fds.is_empty() { Vec::new() } else { vec![ControlMessage::ScmRights(&fds)] };
    sendmsg::<()>(conn.as_raw_fd(), &iov, &cmsgs, MsgFlags::empty(), None)?;
    let (reply, fd) = receive(&conn)?;
    match reply.strip_prefix("error: ") {
        Some(e) => Err(io::Error::other(e.to_string())),
        None if reply.starts_with("ok") => Ok(fd),
        None => Err(io::Error::other(format!("log writer answered {reply:?}"))),
    }
}

/// Gives the pod's log writer the write end of an app's stdin pipe to keep.
pub fn keep_stdin(socket: &Path, app: &str, pipe: impl AsRawFd) -> io::Result<()> {
    request(socket, &format!("stdin\t{app}"), Some(pipe.as_raw_fd())).map(|_| ())
}

/// A copy of the write end of an app's stdin (for an attach session).
pub fn stdin_of(socket: &Path, app: &str) -> io::Result<OwnedFd> {
    request(socket, &format!("getstdin\t{app}"), None)?
        .ok_or_else(|| io::Error::other("the log writer sent no descriptor"))
}

/// Closes the log writer's copy of an app's stdin (`stdin_once`): the app
/// reads EOF once the last attach session's copy is closed too.
pub fn close_stdin(socket: &Path, app: &str) -> io::Result<()> {
    request(socket, &format!("closestdin\t{app}"), None).map(|_| ())
}

/// Hands the read end of an app's stream to the pod's log writer.
/// An empty `log_path`: the output is only read (for attach sessions).
pub fn attach(socket: &Path, app: &str, stream: Stream, log_path: &Path, pipe: impl AsRawFd) -> io::Result<()> {
    let cmd = format!("attach\t{app}\t{}\t{}", stream.as_str(), log_path.display());
    match request(socket, &cmd, Some(pipe.as_raw_fd())) {
        // the writer of a pod booted by an older rktlet takes no empty path:
        // it gets a log that keeps nothing, so the pipe is read all the same
        Err(e) if log_path.as_os_str().is_empty() && e.to_string().starts_with("unknown command") => {
            attach(socket, app, stream, Path::new("/dev/null"), pipe)
        }
        other => other.map(|_| ()),
    }
}

/// An app's output from now on, until its last pipe ends: a connection
/// to read [`read_frame`]s from (blocking).
pub fn subscribe(socket: &Path, app: &str) -> io::Result<UnixStream> {
    let mut conn = UnixStream::connect(socket)?;
    conn.write_all(format!("subscribe\t{app}").as_bytes())?;
    // the answer's line, a byte at a time: frames follow it on the same connection
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.last() != Some(&b'\n') {
        if conn.read(&mut byte)? == 0 {
            return Err(io::Error::other("the log writer closed the connection"));
        }
        line.push(byte[0]);
        if line.len() > 4096 {
            return Err(io::Error::other("the log writer's answer has no end"));
        }
    }
    let reply = String::from_utf8_lossy(&line).trim_end().to_string();
    match reply.strip_prefix("error: ") {
        Some(e) => Err(io::Error::other(e.to_string())),
        None if reply == "ok" => Ok(conn),
        None => Err(io::Error::other(format!("log writer answered {reply:?}"))),
    }
}

/// Has the pod's log writer start host-PID app `app` as a copy of its
/// template (host pid `template`, started at `start`); the app's pid.
pub fn run_host_app(socket: &Path, app: &str, template: i32, start: &str) -> io::Result<i32> {
    let conn = UnixStream::connect(socket)?;
    let cmd = format!("run\t{app}\t{template}\t{start}");
    let iov = [IoSlice::new(cmd.as_bytes())];
    sendmsg::<()>(conn.as_raw_fd(), &iov, &[], MsgFlags::empty(), None)?;
    let (reply, _) = receive(&conn)?;
    match reply.strip_prefix("error: ") {
        Some(e) => Err(io::Error::other(e.to_string())),
        None => reply
            .strip_prefix("ok\t")
            .and_then(|pid| pid.parse().ok())
            .ok_or_else(|| io::Error::other(format!("log writer answered {reply:?}"))),
    }
}

/// Reopens an app's log files (after kubelet rotated them).
pub fn reopen(socket: &Path, app: &str) -> io::Result<()> {
    request(socket, &format!("reopen\t{app}"), None).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitting() {
        let mut s = LineSplitter::default();
        assert_eq!(s.feed(b"a\nb"), vec![(false, b"a".to_vec())]);
        assert_eq!(s.feed(b"c\n\n"), vec![(false, b"bc".to_vec()), (false, Vec::new())]);
        let long = vec![b'x'; MAX_LINE * 2 + 5];
        let out = s.feed(&long);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|(p, c)| *p && c.len() == MAX_LINE));
        assert_eq!(s.feed(b"\n"), vec![(false, vec![b'x'; 5])]);
        assert_eq!(s.feed(b"tail"), vec![]);
        // a last line without its newline stays partial: kubelet adds no newline to it
        assert_eq!(s.finish(), Some((true, b"tail".to_vec())));
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn writer_serves_attach_and_reopen() {
        let t = tempfile::tempdir().expect("tempdir");
        let sock = t.path().join(SOCKET_FILE);
        let listener = UnixListener::bind(&sock).expect("bind");
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pidfd = crate::sys::pidfd_open(sleeper.id() as i32).expect("pidfd");
        let writer = std::thread::spawn(move || serve(listener, Some(pidfd)));
        let log = t.path().join("c/0.log");
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        attach(&sock, "app", Stream::Stderr, &log, r.as_raw_fd()).expect("attach");
        drop(r);
        let mut w = File::from(w);
        w.write_all(b"one\ntw").expect("write");
        w.write_all(b"o\n").expect("write");
        let wait = |n: usize| {
            for _ in 0..500 {
                if std::fs::read_to_string(&log).map(|s| s.lines().count() >= n).unwrap_or(false) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            panic!("log lines did not arrive");
        };
        wait(2);
        std::fs::rename(&log, t.path().join("c/0.log.1")).expect("rotate");
        reopen(&sock, "app").expect("reopen");
        w.write_all(b"three").expect("write");
        drop(w);
        wait(1);
        let rotated = std::fs::read_to_string(t.path().join("c/0.log.1")).expect("rotated");
        let lines: Vec<&str> = rotated.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].ends_with(" stderr F one"), "{}", lines[0]);
        assert!(lines[1].ends_with(" stderr F two"), "{}", lines[1]);
        // (its last line, never ended, is a partial record)
        assert!(std::fs::read_to_string(&log).expect("new log").ends_with(" stderr P three\n"));
        assert!(reopen(&sock, "x").is_ok());
        assert!(request(&sock, "bogus", None).is_err());
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        writer.join().expect("join").expect("writer exits with the pod");
    }

    #[test]
    fn subscribers_get_the_output_of_an_app_without_a_log() {
        let t = tempfile::tempdir().expect("tempdir");
        let sock = t.path().join(SOCKET_FILE);
        let listener = UnixListener::bind(&sock).expect("bind");
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pidfd = crate::sys::pidfd_open(sleeper.id() as i32).expect("pidfd");
        let writer = std::thread::spawn(move || serve(listener, Some(pidfd)));
        assert!(subscribe(&sock, "app").is_err(), "no output to subscribe to yet");
        let (out_r, out_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        attach(&sock, "app", Stream::Stdout, Path::new(""), out_r.as_raw_fd()).expect("attach stdout");
        attach(&sock, "app", Stream::Stderr, Path::new(""), err_r.as_raw_fd()).expect("attach stderr");
        drop((out_r, err_r));
        let (mut first, second) = (subscribe(&sock, "app").expect("sub"), subscribe(&sock, "app").expect("sub"));
        let other = subscribe(&sock, "other");
        assert!(other.is_err(), "an app without pipes");
        let (mut out_w, mut err_w) = (File::from(out_w), File::from(err_w));
        out_w.write_all(b"partial line").expect("write");
        let got = read_frame(&mut first).expect("frame");
        assert_eq!(got, Some((Stream::Stdout, b"partial line".to_vec())), "output as read, not as lines");
        err_w.write_all(b"oops\n").expect("write");
        assert_eq!(read_frame(&mut first).expect("frame"), Some((Stream::Stderr, b"oops\n".to_vec())));
        // a session that left does not disturb the others
        let _ = second.shutdown(std::net::Shutdown::Both);
        drop(out_w);
        err_w.write_all(b"last\n").expect("write");
        assert_eq!(read_frame(&mut first).expect("frame"), Some((Stream::Stderr, b"last\n".to_vec())));
        // the app's last pipe ends: so does the subscription
        drop(err_w);
        assert_eq!(read_frame(&mut first).expect("end"), None);
        assert!(std::fs::read_dir(t.path()).expect("dir").count() == 1, "no log file was written");
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        writer.join().expect("join").expect("writer exits with the pod");
    }

    #[test]
    fn only_a_host_pid_template_is_copied() {
        let cmdline =
            b".rkt-appexec\0pid=host\0root=/opt/stage2/a/rootfs\0bind=/dev\0/dev\0--\0/bin/busybox\0sh\0-c\0echo --\0";
        let (program, argv) = parse_template(".rkt-appexec\n", cmdline).expect("a template");
        assert_eq!((program.as_str(), argv), ("/bin/busybox", vec!["sh".to_string(), "-c".into(), "echo --".into()]));
        // appexec of another mode, or not appexec (any process of the node)
        let keep = b".rkt-appexec\0pid=keep\0--\0/bin/sh\0sh\0";
        assert_eq!(parse_template(".rkt-appexec\n", keep), None);
        assert_eq!(parse_template("sh\n", cmdline), None);
        assert_eq!(parse_template(".rkt-appexec\n", b".rkt-appexec\0pid=host\0--\0/bin/sh\0"), None);
    }

    #[test]
    fn frames_round_trip() {
        let mut bytes = frame(Stream::Stderr, b"abc");
        bytes.extend(frame(Stream::Stdout, b""));
        let mut r = &bytes[..];
        assert_eq!(read_frame(&mut r).expect("f"), Some((Stream::Stderr, b"abc".to_vec())));
        assert_eq!(read_frame(&mut r).expect("f"), Some((Stream::Stdout, Vec::new())));
        assert_eq!(read_frame(&mut r).expect("end"), None);
        assert!(read_frame(&mut &[9u8, 0, 0, 0, 0][..]).is_err());
        assert!(read_frame(&mut &[1u8, 0xff, 0xff, 0xff, 0xff][..]).is_err(), "no 4 GiB allocation");
    }
}
