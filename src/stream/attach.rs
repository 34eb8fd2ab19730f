//! Attach: a running container's output as it is written. The pod's log
//! writer is the one reader of the app's pipes, whether or not the
//! container has a CRI log; each session subscribes to it and gets a copy
//! of every piece of output as read (so any number of sessions read the
//! same output, and the log, if any, keeps all of it). A pod whose log
//! writer predates subscriptions has its container's CRI log followed
//! instead: lines come back without the CRI framing, `F` lines with their
//! newline, `P` pieces without. The session ends, with a success status,
//! when the container's output ended (or it has exited) and its last
//! output was sent, or when the client goes away. A container created with `stdin` reads a pipe whose
//! write end the pod's log writer keeps; an attach with stdin writes to a
//! copy of it, and with `stdin_once` the first such session closes it. A
//! container created with `tty` runs on a terminal of its pod whose master
//! the log writer keeps: its output is the log's stdout, an attach with
//! stdin writes to the master and resizes it.

use super::remotecommand::{Input, Output, STDERR, STDOUT, Streams, status_json};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the log file is checked for new output.
const POLL: Duration = Duration::from_millis(25);
/// Empty polls after the exit before the session ends: the log writer may
/// still be draining the app's pipes when its exit is recorded.
const QUIET_POLLS: u32 = 4;

/// Where a container's output comes from.
#[derive(Debug)]
pub enum Origin {
    /// A subscription to the pod's log writer (`stage1::crilog::subscribe`).
    Live(std::os::unix::net::UnixStream),
    /// The CRI log file, followed (a log writer without subscriptions).
    Log(PathBuf),
}

/// Where a container's output and exit are found, and its stdin.
#[derive(Debug)]
pub struct Source {
    pub origin: Origin,
    /// rkt's exit status file of the app (exists once it exited).
    pub exit_file: PathBuf,
    pub stdin: Option<Stdin>,
}

/// A copy of a container's stdin pipe, and how to close it for good.
#[derive(Debug)]
pub struct Stdin {
    pub pipe: std::os::fd::OwnedFd,
    /// `stdin_once`: the pod's log writer drops its copy when this session ends.
    pub once: bool,
    pub log_socket: PathBuf,
    pub app: String,
}

/// The attach session of `source`, for a transport.
pub(crate) fn attach(source: Source, streams: Streams) -> impl super::remotecommand::Run {
    move |input, output| session(source, streams, input, output)
}

/// One open log file and where we are in it.
struct Follow {
    file: File,
    ino: u64,
    pos: u64,
}

impl Follow {
    /// Opens the log at its end (attach shows output from now on).
    fn open_at_end(path: &std::path::Path) -> std::io::Result<Follow> {
        let mut file = File::open(path)?;
        let pos = file.seek(SeekFrom::End(0))?;
        Ok(Follow { ino: file.metadata()?.ino(), file, pos })
    }

    /// New bytes since the last read; a rotated or truncated log is
    /// reopened from its start.
    fn read_new(&mut self, path: &std::path::Path) -> std::io::Result<Vec<u8>> {
        if let Ok(m) = std::fs::metadata(path)
            && (m.ino() != self.ino || m.len() < self.pos)
        {
            self.file = File::open(path)?;
            self.ino = m.ino();
            self.pos = 0;
        }
        let mut out = Vec::new();
        self.file.seek(SeekFrom::Start(self.pos))?;
        self.pos += self.file.read_to_end(&mut out)? as u64;
        Ok(out)
    }
}

/// A CRI log line's stream and content (`F` lines get their newline back).
pub fn parse_line(line: &[u8]) -> Option<(u8, Vec<u8>)> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let (_time, stream, tag) = (parts.next()?, parts.next()?, parts.next()?);
    let mut content = parts.next().unwrap_or_default().to_vec();
    let channel = match stream {
        b"stdout" => STDOUT,
        b"stderr" => STDERR,
        _ => return None,
    };
    if tag == b"F" {
        content.push(b'\n');
    }
    Some((channel, content))
}

/// The output a session relays, from either source.
enum Feed {
    /// Pieces read from the subscription by a thread (closed at its end),
    /// and those already received.
    Live {
        rx: mpsc::Receiver<(u8, Vec<u8>)>,
        pending: Vec<(u8, Vec<u8>)>,
        ended: bool,
        closer: std::os::unix::net::UnixStream,
    },
    Log {
        follow: Follow,
        path: PathBuf,
        partial: Vec<u8>,
    },
}

impl Feed {
    fn open(origin: Origin) -> Result<Feed, String> {
        match origin {
            Origin::Live(conn) => {
                let (tx, rx) = mpsc::channel(64);
                // the session's end wakes the reader (the app's pipes may
                // stay open long after: systemd keeps them for its unit)
                let closer = conn.try_clone().map_err(|e| format!("cannot follow the container's output: {e}"))?;
                std::thread::Builder::new()
                    .name("attach-feed".into())
                    .spawn(move || {
                        let mut conn = conn;
                        while let Ok(Some((stream, data))) = crate::stage1::crilog::read_frame(&mut conn) {
                            let channel = match stream {
                                crate::stage1::crilog::Stream::Stdout => STDOUT,
                                crate::stage1::crilog::Stream::Stderr => STDERR,
                            };
                            if tx.blocking_send((channel, data)).is_err() {
                                return;
                            }
                        }
                    })
                    .map_err(|e| format!("cannot start the attach reader: {e}"))?;
                Ok(Feed::Live { rx, pending: Vec::new(), ended: false, closer })
            }
            Origin::Log(path) => match Follow::open_at_end(&path) {
                Ok(follow) => Ok(Feed::Log { follow, path, partial: Vec::new() }),
                Err(e) => Err(format!("cannot follow the container's log {}: {e}", path.display())),
            },
        }
    }

    /// The output that came since the last call; `None` once there will be
    /// no more (the subscription ended).
    fn take(&mut self) -> Option<Vec<(u8, Vec<u8>)>> {
        match self {
            Feed::Live { rx, pending, ended, .. } => {
                let mut out = std::mem::take(pending);
                loop {
                    match rx.try_recv() {
                        Ok(piece) => out.push(piece),
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => {
                            *ended = true;
                            break;
                        }
                    }
                }
                (!*ended || !out.is_empty()).then_some(out)
            }
            Feed::Log { follow, path, partial } => {
                let new = follow.read_new(path).unwrap_or_default();
                partial.extend_from_slice(&new);
                let mut out = Vec::new();
                while let Some(nl) = partial.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = partial.drain(..=nl).collect();
                    if let Some(piece) = parse_line(&line[..line.len() - 1]) {
                        out.push(piece);
                    }
                }
                Some(out)
            }
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        if let Feed::Live { closer, .. } = self {
            let _ = closer.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Feed {
    /// Until there may be more output (a log is polled).
    async fn wait(&mut self) {
        match self {
            Feed::Live { rx, pending, ended, .. } if !*ended => match rx.recv().await {
                Some(piece) => pending.push(piece),
                None => *ended = true,
            },
            Feed::Live { .. } => std::future::pending().await,
            Feed::Log { .. } => tokio::time::sleep(POLL).await,
        }
    }
}

async fn session(source: Source, streams: Streams, mut input: mpsc::Receiver<Input>, output: mpsc::Sender<Output>) {
    let mut feed = match Feed::open(source.origin) {
        Ok(f) => f,
        Err(msg) => {
            let _ = output.send(Output::Status(status_json(&Err(msg)))).await;
            return;
        }
    };
    // stdin: a thread writes what the client sends (a full pipe blocks it, not us)
    let (once, socket_app) = match &source.stdin {
        Some(s) => (s.once, Some((s.log_socket.clone(), s.app.clone()))),
        None => (false, None),
    };
    // a terminal's stdin is its master side: resizes go there
    let terminal = if streams.tty { source.stdin.as_ref().and_then(|s| s.pipe.try_clone().ok()) } else { None };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut stdin_tx = source.stdin.map(|s| super::remotecommand::stdin_writer(s.pipe, stop.clone()));
    // stdin_once: the first session attached with stdin closes it when it ends
    let mut closed = false;
    let mut close_for_good = move || {
        if let (true, false, Some((socket, app))) = (once, closed, &socket_app) {
            closed = true;
            if let Err(e) = crate::stage1::crilog::close_stdin(socket, app) {
                tracing::warn!(app, error = %e, "cannot close stdin after the attach");
            }
        }
    };
    let mut quiet = 0;
    loop {
        let exited = source.exit_file.exists();
        let new = feed.take();
        let ended = new.is_none();
        let new = new.unwrap_or_default();
        let got = !new.is_empty();
        for (channel, data) in new {
            // a terminal has one output; without one, each stream only if asked for
            let wanted = if streams.tty || channel == STDOUT { streams.stdout } else { streams.stderr };
            let channel = if streams.tty { STDOUT } else { channel };
            if wanted && output.send(Output::Data(channel, data)).await.is_err() {
                return;
            }
        }
        // the output ended (every pipe of the app closed), or the exit was
        // seen before these reads and nothing came for a few polls (the log
        // writer may still be draining the app's pipes when its exit is
        // recorded): everything the app wrote is out
        quiet = if exited && !got { quiet + 1 } else { 0 };
        if ended || quiet >= QUIET_POLLS {
            let _ = output.send(Output::Status(status_json(&Ok(0)))).await;
            break;
        }
        tokio::select! {
            m = input.recv() => match m {
                None => break,
                Some(Input::Stdin(data)) => {
                    if let Some(tx) = &stdin_tx {
                        super::remotecommand::send_stdin(tx, data);
                    }
                }
                Some(Input::StdinClosed) => {
                    stdin_tx = None;
                    close_for_good();
                }
                Some(Input::Resize(size)) => {
                    if let Some(t) = &terminal {
                        super::remotecommand::resize(t, &size);
                    }
                }
            },
            () = feed.wait() => {}
            // the exit file is looked at again
            () = tokio::time::sleep(POLL) => {}
        }
    }
    drop(stdin_tx);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    close_for_good();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_become_stream_output() {
        assert_eq!(parse_line(b"2026-01-01T00:00:00.1Z stdout F hello"), Some((STDOUT, b"hello\n".to_vec())));
        assert_eq!(parse_line(b"2026-01-01T00:00:00.1Z stderr P par"), Some((STDERR, b"par".to_vec())));
        assert_eq!(parse_line(b"2026-01-01T00:00:00.1Z stdout F "), Some((STDOUT, b"\n".to_vec())));
        assert_eq!(parse_line(b"garbage"), None);
    }

    #[test]
    fn a_followed_log_survives_rotation() {
        let t = tempfile::tempdir().expect("tempdir");
        let path = t.path().join("c.log");
        std::fs::write(&path, b"old\n").expect("w");
        let mut f = Follow::open_at_end(&path).expect("open");
        assert!(f.read_new(&path).expect("read").is_empty(), "starts at the end");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut x| std::io::Write::write_all(&mut x, b"new\n"))
            .expect("append");
        assert_eq!(f.read_new(&path).expect("read"), b"new\n");
        std::fs::rename(&path, t.path().join("c.log.1")).expect("rotate");
        std::fs::write(&path, b"after\n").expect("w");
        assert_eq!(f.read_new(&path).expect("read"), b"after\n");
    }
}
