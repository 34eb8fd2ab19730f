//! Attach: a running container's output as it is written, followed from its
//! CRI log file (the pod's log writer is the one reader of the app's pipes,
//! so any number of attach sessions read the same output and the log keeps
//! all of it). Lines come back without the CRI framing: `F` lines with their
//! newline, `P` pieces without. The session ends, with a success status,
//! when the container has exited and its last output was sent, or when the
//! client goes away. A container created with `stdin` reads a pipe whose
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

/// Where a container's output and exit are found, and its stdin.
#[derive(Debug)]
pub struct Source {
    /// The CRI log file.
    pub log: PathBuf,
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
pub fn attach(source: Source, streams: Streams) -> impl super::remotecommand::Run {
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

async fn session(source: Source, streams: Streams, mut input: mpsc::Receiver<Input>, output: mpsc::Sender<Output>) {
    let mut follow = match Follow::open_at_end(&source.log) {
        Ok(f) => f,
        Err(e) => {
            let msg = format!("cannot follow the container's log {}: {e}", source.log.display());
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
            if let Err(e) = crate::stream::log::close_stdin(socket, app) {
                tracing::warn!(app, error = %e, "cannot close stdin after the attach");
            }
        }
    };
    let mut partial: Vec<u8> = Vec::new();
    let mut quiet = 0;
    loop {
        let exited = source.exit_file.exists();
        let new = follow.read_new(&source.log).unwrap_or_default();
        partial.extend_from_slice(&new);
        while let Some(nl) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=nl).collect();
            let Some((channel, data)) = parse_line(&line[..line.len() - 1]) else { continue };
            // a terminal has one output; without one, each stream only if asked for
            let wanted = if streams.tty || channel == STDOUT { streams.stdout } else { streams.stderr };
            let channel = if streams.tty { STDOUT } else { channel };
            if wanted && output.send(Output::Data(channel, data)).await.is_err() {
                return;
            }
        }
        // the exit was seen before these reads and the log writer wrote
        // nothing for a few polls: everything the app wrote is out
        quiet = if exited && new.is_empty() { quiet + 1 } else { 0 };
        if quiet >= QUIET_POLLS {
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
