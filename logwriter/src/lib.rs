//! A pod's CRI log writer, and the wire protocol the daemon speaks to it.
//!
//! One writer per pod, for the pod's life: it outlives daemon restarts. The
//! daemon hands it the read ends of each app's stdout/stderr pipes over a
//! unix socket in the pod directory ([`SOCKET_FILE`]); it writes kubelet's
//! format, `<RFC3339Nano> <stdout|stderr> <P|F> <content>`, splitting long
//! lines into `P` (partial) pieces. A container created without a log path
//! gets its pipes read all the same (nothing is written then). Attach
//! sessions subscribe to an app's output over the same socket: each piece
//! read from its pipes is copied to them as it comes, framed
//! ([`read_frame`]), and their connection is closed when the app's last pipe
//! ends. It keeps the write ends of apps' stdin pipes, and reopens logs
//! kubelet rotated. It exits when the process it watches (the pod's nspawn)
//! has exited and every pipe has ended.
//!
//! This crate is both sides: the client calls the daemon makes, and
//! [`serve`], which the small `logwriter` program runs for a pod (std and
//! libc only, linked static: what a pod keeps resident is small). A
//! writer that does more (rktlet's own, for a pod that shares the node's
//! PID namespace and so starts its apps) plugs in through [`Hooks`].
//!
//! The requests, one per connection, tab-separated, a descriptor passed
//! with some: `stdin APP` (+ the pipe's write end), `getstdin APP` (answered
//! with a copy), `closestdin APP`, `attach APP STREAM PATH` (+ the read
//! end), `subscribe APP` (frames follow the answer), `run APP TEMPLATE
//! START` (a [`Hooks::run`]), `reopen APP`. The answers: `ok`, `ok\tVALUE`,
//! or `error: TEXT`; an unknown request is `error: unknown command "..."`,
//! which clients of newer requests take as an older writer.

mod sys;
mod time;

pub use time::rfc3339_nano;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Socket of the pod's log writer, in the pod directory.
pub const SOCKET_FILE: &str = "logger.sock";

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
    let mut line =
        format!("{} {} {} ", time::rfc3339_nano(t), stream.as_str(), if partial { "P" } else { "F" }).into_bytes();
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
    fn write(&mut self, records: Vec<(bool, Vec<u8>)>, hooks: &dyn Hooks) {
        let Some((log, _)) = &mut self.log else { return };
        let now = SystemTime::now();
        for (partial, content) in records {
            if let Err(e) = log.write_all(&record(now, self.stream, partial, &content)) {
                hooks.warn(&format!("{}: cannot write container log: {e}", self.app));
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
    fn send(&mut self, frame: &[u8], hooks: &dyn Hooks) -> bool {
        if self.backlog.len() + frame.len() > SUBSCRIBER_BACKLOG {
            hooks.warn(&format!("{}: an attach session fell behind the output: let go", self.app));
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

/// What a writer does beyond the logs: rktlet's writer of a pod that
/// shares the node's PID namespace starts and supervises its apps. The
/// defaults do nothing, and refuse `run`.
pub trait Hooks {
    /// Starts host-PID app `app` as a copy of `template` (the process that
    /// started at `start`); its pid.
    fn run(&mut self, app: &str, template: i32, start: &str) -> Result<i32, String> {
        let _ = (app, template, start);
        Err("this log writer runs no apps".into())
    }

    /// Descriptors to wait on too (for reading), in an order [`Hooks::events`] knows.
    fn fds(&mut self) -> Vec<RawFd> {
        Vec::new()
    }

    /// After each wait, before any pipe is read: which of the last
    /// [`Hooks::fds`] had an event.
    fn events(&mut self, hit: &[bool]) {
        let _ = hit;
    }

    /// The watched process (the pod) has exited.
    fn pod_gone(&mut self) {}

    /// A problem worth a line where the writer logs (nowhere by default:
    /// the writer's stderr is /dev/null).
    fn warn(&self, message: &str) {
        eprintln!("logwriter: {message}");
    }
}

/// A writer that only writes logs.
pub struct NoHooks;

impl Hooks for NoHooks {}

/// What the writer keeps between requests.
#[derive(Default)]
struct State {
    sources: HashMap<RawFd, Source>,
    stdins: HashMap<String, OwnedFd>,
    subscribers: HashMap<RawFd, Subscriber>,
}

impl State {
    /// Reads `pipe`, stream `stream` of `app`, logging to `log` if any.
    fn add_source(&mut self, app: &str, stream: Stream, pipe: File, log: Option<(File, PathBuf)>) {
        let key = pipe.as_raw_fd();
        self.sources.insert(key, Source { app: app.to_string(), stream, pipe, split: LineSplitter::default(), log });
    }

    /// Lets go of the subscribers of apps none of whose pipes is left
    /// (closing their connection ends their sessions).
    fn drop_orphans(&mut self) {
        let sources = &self.sources;
        self.subscribers.retain(|_, s| sources.values().any(|src| src.app == s.app));
    }
}

/// The writer's loop: serves `listener` until the process behind `pidfd`
/// has exited and every pipe has ended.
pub fn serve(listener: UnixListener, pidfd: Option<OwnedFd>, hooks: &mut dyn Hooks) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut st = State::default();
    // a read's worth: a longer output takes more reads (the writer of a
    // pod stays resident, and the buffer with it)
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let keys: Vec<RawFd> = st.sources.keys().copied().collect();
        let subs: Vec<RawFd> = st.subscribers.keys().copied().collect();
        let extra = hooks.fds();
        let mut fds = vec![sys::pollfd(listener.as_raw_fd(), libc::POLLIN)];
        if let Some(p) = &pidfd {
            fds.push(sys::pollfd(p.as_raw_fd(), libc::POLLIN));
        }
        let base = fds.len();
        for k in &keys {
            fds.push(sys::pollfd(st.sources[k].pipe.as_raw_fd(), libc::POLLIN));
        }
        // a subscriber is read only to learn it left; written when it has a backlog
        for k in &subs {
            let s = &st.subscribers[k];
            let out = if s.backlog.is_empty() { 0 } else { libc::POLLOUT };
            fds.push(sys::pollfd(s.conn.as_raw_fd(), libc::POLLIN | out));
        }
        let extra_base = fds.len();
        fds.extend(extra.iter().map(|fd| sys::pollfd(*fd, libc::POLLIN)));
        sys::poll(&mut fds)?;
        let hit = |i: usize| fds[i].revents != 0;
        let incoming = hit(0);
        let pod_gone = pidfd.is_some() && hit(1);
        let ready: Vec<RawFd> = keys.iter().enumerate().filter(|(i, _)| hit(base + i)).map(|(_, k)| *k).collect();
        let sub_base = base + keys.len();
        let ready_subs: Vec<RawFd> =
            subs.iter().enumerate().filter(|(i, _)| hit(sub_base + i)).map(|(_, k)| *k).collect();
        let extra_hit: Vec<bool> = (0..extra.len()).map(|i| hit(extra_base + i)).collect();
        if !extra.is_empty() {
            hooks.events(&extra_hit);
        }
        for fd in ready {
            let Some(src) = st.sources.get_mut(&fd) else { continue };
            match src.pipe.read(&mut buf) {
                Ok(0) | Err(_) => {
                    if let Some(rest) = src.split.finish() {
                        src.write(vec![rest], hooks);
                    }
                    st.sources.remove(&fd);
                    st.drop_orphans();
                }
                Ok(n) => {
                    let records = src.split.feed(&buf[..n]);
                    src.write(records, hooks);
                    let (app, piece) = (src.app.clone(), frame(src.stream, &buf[..n]));
                    st.subscribers.retain(|_, s| s.app != app || s.send(&piece, hooks));
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
                handle(conn, &mut st, hooks);
            }
        }
        if pod_gone {
            hooks.pod_gone();
        }
        if pod_gone && st.sources.is_empty() {
            return Ok(());
        }
    }
}

fn handle(conn: UnixStream, st: &mut State, hooks: &mut dyn Hooks) {
    let reply = match receive_all(&conn) {
        Ok((cmd, fds)) => apply(&cmd, fds, st, hooks),
        Err(e) => Err(e.to_string()),
    };
    let mut conn = conn;
    let _ = match reply {
        Ok(Reply::Done) => conn.write_all(b"ok\n"),
        Ok(Reply::Text(text)) => conn.write_all(format!("ok\t{text}\n").as_bytes()),
        Ok(Reply::Fd(fd)) => sys::send_with_fd(conn.as_raw_fd(), b"ok\n", Some(fd.as_raw_fd())),
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
    receive_all(conn).map(|(text, fds)| (text, fds.into_iter().next()))
}

/// One message and every descriptor it carried.
fn receive_all(conn: &UnixStream) -> io::Result<(String, Vec<OwnedFd>)> {
    conn.set_nonblocking(false)?;
    let mut data = vec![0u8; 8192];
    let (n, fds) = sys::recv_with_fds(conn.as_raw_fd(), &mut data)?;
    Ok((String::from_utf8_lossy(&data[..n]).trim_end_matches('\n').to_string(), fds))
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
fn apply(cmd: &str, fds: Vec<OwnedFd>, st: &mut State, hooks: &mut dyn Hooks) -> Result<Reply, String> {
    let parts: Vec<&str> = cmd.split('\t').collect();
    let mut fds = fds.into_iter();
    let fd = fds.next();
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
            let log = log_of(path)?;
            st.add_source(app, stream, pipe, log);
            Ok(Reply::Done)
        }
        // both output streams of an app in one request: stdout's pipe, then stderr's
        ["attachout", app, path] => {
            let (Some(out), Some(err)) = (fd, fds.next()) else { return Err("attachout without two pipes".into()) };
            let log = log_of(path)?;
            let copy = match &log {
                Some((file, path)) => Some((file.try_clone().map_err(|e| e.to_string())?, path.clone())),
                None => None,
            };
            st.add_source(app, Stream::Stdout, File::from(out), log);
            st.add_source(app, Stream::Stderr, File::from(err), copy);
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
            hooks.run(app, template, start).map(|pid| Reply::Text(pid.to_string()))
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

/// The CRI log at `path` opened for appending, with its path; none for an
/// empty path (the app's output is only read, for attach sessions).
fn log_of(path: &str) -> Result<Option<(File, PathBuf)>, String> {
    if path.is_empty() {
        return Ok(None);
    }
    let path = PathBuf::from(path);
    let log = open_log(&path).map_err(|e| format!("opening {}: {e}", path.display()))?;
    Ok(Some((log, path)))
}

/// Asks the pod's log writer at `socket`, optionally passing a descriptor;
/// the descriptor it answers with, if any.
fn request(socket: &Path, cmd: &str, fd: Option<RawFd>) -> io::Result<Option<OwnedFd>> {
    request_fds(socket, cmd, fd.as_slice())
}

/// [`request`], passing descriptors `fds`.
fn request_fds(socket: &Path, cmd: &str, fds: &[RawFd]) -> io::Result<Option<OwnedFd>> {
    let conn = UnixStream::connect(socket)?;
    sys::send_with_fds(conn.as_raw_fd(), cmd.as_bytes(), fds)?;
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
    sys::send_with_fd(conn.as_raw_fd(), cmd.as_bytes(), None)?;
    let (reply, _) = receive(&conn)?;
    match reply.strip_prefix("error: ") {
        Some(e) => Err(io::Error::other(e.to_string())),
        None => reply
            .strip_prefix("ok\t")
            .and_then(|pid| pid.parse().ok())
            .ok_or_else(|| io::Error::other(format!("log writer answered {reply:?}"))),
    }
}

/// Hands the read ends of an app's stdout and stderr to the pod's log
/// writer in one request (one round trip, the log opened once). A writer
/// of a pod booted by an older rktlet, which knows only `attach`, gets
/// each on its own.
pub fn attach_output(
    socket: &Path,
    app: &str,
    log_path: &Path,
    stdout: impl AsRawFd,
    stderr: impl AsRawFd,
) -> io::Result<()> {
    let cmd = format!("attachout\t{app}\t{}", log_path.display());
    match request_fds(socket, &cmd, &[stdout.as_raw_fd(), stderr.as_raw_fd()]) {
        Err(e) if e.to_string().starts_with("unknown command") => {
            attach(socket, app, Stream::Stdout, log_path, stdout)?;
            attach(socket, app, Stream::Stderr, log_path, stderr)
        }
        other => other.map(|_| ()),
    }
}

/// Reopens an app's log files (after kubelet rotated them).
pub fn reopen(socket: &Path, app: &str) -> io::Result<()> {
    request(socket, &format!("reopen\t{app}"), None).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor the kernel just returned, owned by no one else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }

    /// A writer serving in a thread for a pod played by a `sleep`.
    struct TestWriter {
        dir: tempfile::TempDir,
        sock: PathBuf,
        pod: std::process::Child,
        writer: std::thread::JoinHandle<io::Result<()>>,
    }

    impl TestWriter {
        fn start() -> TestWriter {
            let dir = tempfile::tempdir().expect("tempdir");
            let sock = dir.path().join(SOCKET_FILE);
            let listener = UnixListener::bind(&sock).expect("bind");
            let pod = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
            let pidfd = pidfd_open(pod.id() as i32).expect("pidfd");
            let writer = std::thread::spawn(move || serve(listener, Some(pidfd), &mut NoHooks));
            TestWriter { dir, sock, pod, writer }
        }

        /// The pod ends: the writer ends once every pipe has. Its
        /// directory, kept until the caller is done with the logs.
        fn end(mut self) -> tempfile::TempDir {
            let _ = self.pod.kill();
            let _ = self.pod.wait();
            self.writer.join().expect("join").expect("writer exits with the pod");
            self.dir
        }
    }

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
        let tw = TestWriter::start();
        let (t, sock) = (&tw.dir, tw.sock.clone());
        let log = t.path().join("c/0.log");
        let (r, w) = std::io::pipe().expect("pipe");
        attach(&sock, "app", Stream::Stderr, &log, r.as_raw_fd()).expect("attach");
        drop(r);
        let mut w = w;
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
        let _dir = tw.end();
    }

    #[test]
    fn both_output_streams_are_attached_in_one_request() {
        let tw = TestWriter::start();
        let (t, sock) = (&tw.dir, tw.sock.clone());
        let log = t.path().join("c/0.log");
        let (out_r, mut out_w) = std::io::pipe().expect("pipe");
        let (err_r, mut err_w) = std::io::pipe().expect("pipe");
        attach_output(&sock, "app", &log, out_r.as_raw_fd(), err_r.as_raw_fd()).expect("attach");
        drop((out_r, err_r));
        out_w.write_all(b"to stdout\n").expect("write");
        for _ in 0..500 {
            if std::fs::read_to_string(&log).is_ok_and(|s| s.lines().count() == 1) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        err_w.write_all(b"to stderr\n").expect("write");
        drop((out_w, err_w));
        let _dir = tw.end();
        let logged = std::fs::read_to_string(&log).expect("log");
        let lines: Vec<&str> = logged.lines().collect();
        assert_eq!(lines.len(), 2, "{logged}");
        assert!(lines[0].ends_with(" stdout F to stdout") && lines[1].ends_with(" stderr F to stderr"), "{logged}");
        // one pipe only: refused, nothing attached
        let mut st = State::default();
        let (r, _w) = std::io::pipe().expect("pipe");
        let one = vec![OwnedFd::from(r)];
        let refused = apply(&format!("attachout\tapp\t{}", log.display()), one, &mut st, &mut NoHooks);
        assert!(refused.is_err() && st.sources.is_empty());
    }

    /// The writer of a pod booted by an older rktlet knows `attach` only:
    /// `attach_output` hands it each stream on its own. (Such a writer is
    /// played by a listener that answers as it did; none runs here.)
    #[test]
    fn an_older_writer_gets_the_streams_one_by_one() {
        let t = tempfile::tempdir().expect("tempdir");
        let sock = t.path().join(SOCKET_FILE);
        let listener = UnixListener::bind(&sock).expect("bind");
        let old = std::thread::spawn(move || {
            let mut asked = Vec::new();
            for _ in 0..3 {
                let (mut conn, _) = listener.accept().expect("accept");
                let (cmd, fds) = receive_all(&conn).expect("request");
                let verb = cmd.split('\t').next().unwrap_or_default().to_string();
                let answer: &[u8] = if verb == "attach" { b"ok\n" } else { b"error: unknown command\n" };
                conn.write_all(answer).expect("answer");
                asked.push((verb, fds.len()));
            }
            asked
        });
        let (out_r, _out_w) = std::io::pipe().expect("pipe");
        let (err_r, _err_w) = std::io::pipe().expect("pipe");
        attach_output(&sock, "app", Path::new("/l"), out_r.as_raw_fd(), err_r.as_raw_fd()).expect("attach");
        let asked = old.join().expect("old writer");
        let expected = [("attachout".to_string(), 2), ("attach".to_string(), 1), ("attach".to_string(), 1)];
        assert_eq!(asked, expected);
    }

    #[test]
    fn subscribers_get_the_output_of_an_app_without_a_log() {
        let tw = TestWriter::start();
        let (t, sock) = (&tw.dir, tw.sock.clone());
        assert!(subscribe(&sock, "app").is_err(), "no output to subscribe to yet");
        let (out_r, out_w) = std::io::pipe().expect("pipe");
        let (err_r, err_w) = std::io::pipe().expect("pipe");
        attach_output(&sock, "app", Path::new(""), out_r.as_raw_fd(), err_r.as_raw_fd()).expect("attach");
        drop((out_r, err_r));
        let (mut first, second) = (subscribe(&sock, "app").expect("sub"), subscribe(&sock, "app").expect("sub"));
        let other = subscribe(&sock, "other");
        assert!(other.is_err(), "an app without pipes");
        let (mut out_w, mut err_w) = (out_w, err_w);
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
        let _dir = tw.end();
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
