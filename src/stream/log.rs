//! CRI container logs: the per-pod log writer.
//!
//! Runs in: a process of its own per pod, forked by the sandbox process just
//! before it execs nspawn (so it is single-threaded, costs no extra exec, lives
//! in the pod's cgroup, and keeps writing when the daemon restarts). The
//! daemon hands it the read ends of each app's stdout/stderr pipes over a unix
//! socket in the pod directory; it writes kubelet's format,
//! `<RFC3339Nano> <stdout|stderr> <P|F> <content>`, splitting long lines into
//! `P` (partial) pieces. It exits when the pod's nspawn exits.

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Socket of the pod's log writer, in the pod directory.
pub const SOCKET_FILE: &str = "logger.sock";
/// Longest line written whole; longer ones are split into `P` pieces.
pub const MAX_LINE: usize = 16 * 1024;

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

/// RFC 3339 with nanoseconds in UTC, as kubelet writes and parses it.
pub fn rfc3339_nano(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // civil date from days since 1970-01-01 (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_nanos()
    )
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

    /// At end of stream: what is left, as a final record.
    pub fn finish(&mut self) -> Option<(bool, Vec<u8>)> {
        (!self.pending.is_empty()).then(|| (false, std::mem::take(&mut self.pending)))
    }
}

/// Formats one record.
pub fn record(t: SystemTime, stream: Stream, partial: bool, content: &[u8]) -> Vec<u8> {
    let mut line = format!("{} {} {} ", rfc3339_nano(t), stream.as_str(), if partial { "P" } else { "F" }).into_bytes();
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
    log: File,
    path: PathBuf,
}

impl Source {
    fn write(&mut self, records: Vec<(bool, Vec<u8>)>) {
        let now = SystemTime::now();
        for (partial, content) in records {
            if let Err(e) = self.log.write_all(&record(now, self.stream, partial, &content)) {
                tracing::warn!(app = %self.app, error = %e, "cannot write container log");
            }
        }
    }
}

/// The writer's loop: serves `listener` until the process behind `pidfd` exits.
pub fn serve(listener: UnixListener, pidfd: Option<OwnedFd>) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut sources: HashMap<RawFd, Source> = HashMap::new();
    let mut stdins: HashMap<String, OwnedFd> = HashMap::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let keys: Vec<RawFd> = sources.keys().copied().collect();
        let (ready, pod_gone, incoming) = {
            let mut fds = vec![PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
            if let Some(p) = &pidfd {
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
            }
            let base = fds.len();
            for k in &keys {
                fds.push(PollFd::new(sources[k].pipe.as_fd(), PollFlags::POLLIN));
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
            (ready, pod_gone, incoming)
        };
        for fd in ready {
            let Some(src) = sources.get_mut(&fd) else { continue };
            match src.pipe.read(&mut buf) {
                Ok(0) | Err(_) => {
                    if let Some(rest) = src.split.finish() {
                        src.write(vec![rest]);
                    }
                    sources.remove(&fd);
                }
                Ok(n) => {
                    let records = src.split.feed(&buf[..n]);
                    src.write(records);
                }
            }
        }
        if incoming {
            while let Ok((conn, _)) = listener.accept() {
                handle(conn, &mut sources, &mut stdins);
            }
        }
        if pod_gone && sources.is_empty() {
            return Ok(());
        }
    }
}

fn handle(conn: UnixStream, sources: &mut HashMap<RawFd, Source>, stdins: &mut HashMap<String, OwnedFd>) {
    let reply = match receive(&conn) {
        Ok((cmd, fd)) => apply(&cmd, fd, sources, stdins),
        Err(e) => Err(e.to_string()),
    };
    let mut conn = conn;
    let _ = match reply {
        Ok(None) => conn.write_all(b"ok\n"),
        Ok(Some(fd)) => {
            let fds = [fd.as_raw_fd()];
            let iov = [IoSlice::new(b"ok\n")];
            sendmsg::<()>(conn.as_raw_fd(), &iov, &[ControlMessage::ScmRights(&fds)], MsgFlags::empty(), None)
                .map(|_| ())
                .map_err(io::Error::from)
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
    Ok((String::from_utf8_lossy(&data[..n]).trim_end().to_string(), fd))
}

/// Carries out one request; a descriptor to hand back, if it asked for one.
fn apply(
    cmd: &str,
    fd: Option<OwnedFd>,
    sources: &mut HashMap<RawFd, Source>,
    stdins: &mut HashMap<String, OwnedFd>,
) -> Result<Option<OwnedFd>, String> {
    let parts: Vec<&str> = cmd.split('\t').collect();
    match parts.as_slice() {
        // the write end of an app's stdin pipe: kept here, where it outlives the daemon
        ["stdin", app] => {
            stdins.insert(app.to_string(), fd.ok_or("stdin without a pipe")?);
            Ok(None)
        }
        ["getstdin", app] => {
            let fd = stdins.get(*app).ok_or_else(|| format!("{app} has no stdin (closed, or never had one)"))?;
            fd.try_clone().map(Some).map_err(|e| e.to_string())
        }
        ["closestdin", app] => {
            stdins.remove(*app);
            Ok(None)
        }
        ["attach", app, stream, path] => {
            let stream = Stream::parse(stream).ok_or_else(|| format!("unknown stream {stream}"))?;
            let pipe = File::from(fd.ok_or("attach without a pipe")?);
            let path = PathBuf::from(path);
            let log = open_log(&path).map_err(|e| format!("opening {}: {e}", path.display()))?;
            let key = pipe.as_raw_fd();
            sources
                .insert(key, Source { app: app.to_string(), stream, pipe, split: LineSplitter::default(), log, path });
            Ok(None)
        }
        ["reopen", app] => {
            for src in sources.values_mut().filter(|s| s.app == *app) {
                src.log = open_log(&src.path).map_err(|e| format!("reopening {}: {e}", src.path.display()))?;
            }
            Ok(None)
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
pub fn attach(socket: &Path, app: &str, stream: Stream, log_path: &Path, pipe: impl AsRawFd) -> io::Result<()> {
    let cmd = format!("attach\t{app}\t{}\t{}", stream.as_str(), log_path.display());
    request(socket, &cmd, Some(pipe.as_raw_fd())).map(|_| ())
}

/// Reopens an app's log files (after kubelet rotated them).
pub fn reopen(socket: &Path, app: &str) -> io::Result<()> {
    request(socket, &format!("reopen\t{app}"), None).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        let t = UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 123_456_789);
        assert_eq!(rfc3339_nano(t), "2023-11-14T22:13:20.123456789Z");
        assert_eq!(rfc3339_nano(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let leap = UNIX_EPOCH + std::time::Duration::from_secs(951_782_400); // 2000-02-29
        assert!(rfc3339_nano(leap).starts_with("2000-02-29T00:00:00"));
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
        assert_eq!(s.finish(), Some((false, b"tail".to_vec())));
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn writer_serves_attach_and_reopen() {
        let t = tempfile::tempdir().expect("tempdir");
        let sock = t.path().join(SOCKET_FILE);
        let listener = UnixListener::bind(&sock).expect("bind");
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pidfd = crate::stage1::launch::pidfd_open(sleeper.id() as i32).expect("pidfd");
        let writer = std::thread::spawn(move || serve(listener, Some(pidfd)));
        let log = t.path().join("c/0.log");
        let (r, w) = nix::unistd::pipe().expect("pipe");
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
        assert!(std::fs::read_to_string(&log).expect("new log").ends_with(" stderr F three\n"));
        assert!(reopen(&sock, "x").is_ok());
        assert!(request(&sock, "bogus", None).is_err());
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        writer.join().expect("join").expect("writer exits with the pod");
    }
}
