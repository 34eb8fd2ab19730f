//! Kubernetes' remote-command protocol over a WebSocket, for Exec: streams
//! multiplexed by a leading channel byte (0 stdin, 1 stdout, 2 stderr,
//! 3 error: the final `metav1.Status` JSON, 4 resize: `{"Width","Height"}`),
//! binary frames, or text frames with base64 data in the `base64` variants;
//! v5 adds channel 255 (the client closes one of its streams). The
//! protocols before v4 (`channel.k8s.io`, `base64.channel.k8s.io`, or none
//! offered: what Kubernetes' own e2e "remote command execution over
//! websockets" check sends, through the API server and kubelet) carry no
//! status on success and the error's text on failure.
//!
//! The command is started like ExecSync's (`stage1::exec::spawn`), with
//! pipes or a pty as its stdio. Blocking descriptor I/O runs on threads of
//! its own; one task writes frames, one reads them.

use crate::stage1::exec::{self, Running};
use futures::{SinkExt, StreamExt};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

pub(crate) const STDIN: u8 = 0;
pub(crate) const STDOUT: u8 = 1;
pub(crate) const STDERR: u8 = 2;
pub(crate) const ERROR: u8 = 3;
pub(crate) const RESIZE: u8 = 4;
/// v5: the client closes the stream named in the payload.
pub(crate) const CLOSE: u8 = 255;

/// The channel sub-protocols served, preferred first (none offered is the
/// first of the pre-v4 ones).
pub(crate) const PROTOCOLS: [&str; 6] = [
    "v5.channel.k8s.io",
    "v5.base64.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
];

/// After the command exits, output still buffered is sent for this long
/// (a background process may keep the pipes open forever).
const DRAIN: Duration = Duration::from_secs(1);

/// The negotiated framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Framing {
    pub base64: bool,
    pub v5: bool,
    /// v4 and later: the error channel carries the final status as JSON
    /// (before: nothing on success, the error's text on failure).
    pub json_status: bool,
}

impl Framing {
    pub(crate) fn of(protocol: &str) -> Framing {
        let v5 = protocol.starts_with("v5.");
        Framing { base64: protocol.contains("base64"), v5, json_status: v5 || protocol.starts_with("v4.") }
    }

    /// What the error channel carries for the final status `json` (a
    /// `metav1.Status`): itself, or before v4 its message, nothing on success.
    pub(crate) fn status(self, json: &str) -> Option<String> {
        if self.json_status {
            return Some(json.to_string());
        }
        let status: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
        match status["status"].as_str() {
            Some("Success") => None,
            _ => Some(status["message"].as_str().unwrap_or("the command failed").to_string()),
        }
    }

    /// One channel message as a WebSocket message: binary, or text (the
    /// channel as a digit, then base64) in the `base64` variants.
    pub(crate) fn encode(self, channel: u8, data: &[u8]) -> Message {
        use base64::Engine;
        if self.base64 {
            let mut p = vec![b'0'.wrapping_add(channel)];
            p.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(data).as_bytes());
            // a text message is UTF-8: channels past 79 (port-forward's many
            // ports) have no one-byte digit that is, and go out as binary
            match String::from_utf8(p) {
                Ok(text) => Message::text(text),
                Err(e) => Message::binary(e.into_bytes()),
            }
        } else {
            let mut p = Vec::with_capacity(data.len() + 1);
            p.push(channel);
            p.extend_from_slice(data);
            Message::binary(p)
        }
    }

    /// A client's data message as (channel, data); `None` for control
    /// messages and for what does not decode.
    pub(crate) fn decode(self, m: &Message) -> Option<(u8, Vec<u8>)> {
        use base64::Engine;
        let payload: &[u8] = match m {
            Message::Binary(b) => b,
            Message::Text(t) => t.as_bytes(),
            _ => return None,
        };
        let (&first, rest) = payload.split_first()?;
        if self.base64 {
            let data = base64::engine::general_purpose::STANDARD.decode(rest).ok()?;
            Some((first.checked_sub(b'0')?, data))
        } else {
            Some((first, rest.to_vec()))
        }
    }
}

/// The close frame a session ends with (1000, normal closure).
pub(super) fn normal_close() -> Message {
    use tokio_tungstenite::tungstenite::protocol::{CloseFrame, frame::coding::CloseCode};
    Message::Close(Some(CloseFrame { code: CloseCode::Normal, reason: "".into() }))
}

/// The `metav1.Status` the error channel carries at the end.
pub(crate) fn status_json(exit: &Result<i32, String>) -> String {
    match exit {
        Ok(0) => r#"{"metadata":{},"status":"Success"}"#.to_string(),
        Ok(code) => serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        })
        .to_string(),
        Err(message) => {
            serde_json::json!({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError"})
                .to_string()
        }
    }
}

/// What the exec wants connected.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Streams {
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// Events from the threads that watch the command.
enum Event {
    Output(u8, Vec<u8>),
    Eof,
    Exit(Result<i32, String>),
}

/// The command's stdio, and our ends of it.
struct Stdio {
    child: [OwnedFd; 3],
    ours: Ours,
}

/// Our ends of the command's stdio.
struct Ours {
    /// Where stdin data goes.
    input: Option<OwnedFd>,
    /// (channel, fd) to read output from.
    outputs: Vec<(u8, OwnedFd)>,
    /// The pty master, for resize events.
    pty: Option<OwnedFd>,
}

fn devnull() -> std::io::Result<OwnedFd> {
    Ok(std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?.into())
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

/// The command's stdio; a terminal comes from the devpts the app process
/// `pid` sees (the pod's), so `tty` in the command names a real path.
fn stdio(s: Streams, pid: i32) -> std::io::Result<Stdio> {
    if s.tty {
        let pty = crate::stage1::pty::PodPty::open_as_seen_by(pid)?;
        let slave = pty.open_slave(pid)?;
        let master = pty.master;
        let input = if s.stdin { Some(master.try_clone()?) } else { None };
        let outputs = if s.stdout { vec![(STDOUT, master.try_clone()?)] } else { Vec::new() };
        let child = [slave.try_clone()?, slave.try_clone()?, slave];
        return Ok(Stdio { child, ours: Ours { input, outputs, pty: Some(master) } });
    }
    let (stdin_child, input) = if s.stdin {
        let (r, w) = pipe()?;
        (r, Some(w))
    } else {
        (devnull()?, None)
    };
    let mut outputs = Vec::new();
    let mut out_end = |wanted: bool, channel: u8| -> std::io::Result<OwnedFd> {
        if !wanted {
            return devnull();
        }
        let (r, w) = pipe()?;
        outputs.push((channel, r));
        Ok(w)
    };
    let stdout_child = out_end(s.stdout, STDOUT)?;
    let stderr_child = out_end(s.stderr, STDERR)?;
    Ok(Stdio { child: [stdin_child, stdout_child, stderr_child], ours: Ours { input, outputs, pty: None } })
}

/// Applies a resize message (`{"Width":80,"Height":24}`) to the pty.
pub(crate) fn resize(pty: &OwnedFd, data: &[u8]) {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Size {
        width: u16,
        height: u16,
    }
    let Ok(size) = serde_json::from_slice::<Size>(data) else { return };
    let ws = libc::winsize { ws_row: size.height, ws_col: size.width, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ on our pty master with a valid winsize.
    unsafe { libc::ioctl(pty.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
}

/// What a client sends, whatever its transport.
#[derive(Debug)]
pub(crate) enum Input {
    Stdin(Vec<u8>),
    /// The client closed its stdin.
    StdinClosed,
    /// A resize event (`{"Width":..,"Height":..}`).
    Resize(Vec<u8>),
}

/// What the session sends the client, whatever its transport.
#[derive(Debug)]
pub(crate) enum Output {
    /// Output on stdout or stderr.
    Data(u8, Vec<u8>),
    /// The end: the `metav1.Status` JSON for the error stream.
    Status(String),
}

/// Runs `cmd` as a copy of the app process `app` and relays its
/// streams: `input` from the client (it ends when the client is gone, which
/// kills the command), `output` to it, ending with the status. Transports
/// (WebSocket, SPDY) adapt their framing to these two channels.
pub(crate) async fn session(
    app: exec::AppProcess,
    cmd: Vec<String>,
    streams: Streams,
    mut input: mpsc::Receiver<Input>,
    output: mpsc::Sender<Output>,
) {
    let (running, io) = match start(app, cmd, streams).await {
        Ok(x) => x,
        Err(e) => {
            let _ = output.send(Output::Status(status_json(&Err(e)))).await;
            return;
        }
    };
    let Ours { input: stdin, outputs, pty } = io;
    // the I/O threads end when this is set, whoever still holds the pipes
    let stop = Arc::new(AtomicBool::new(false));
    // bounded: a client that does not read stops the readers, not our memory
    let (tx, mut events) = mpsc::channel::<Event>(64);
    let readers = outputs.len();
    for (channel, fd) in outputs {
        let (tx, stop) = (tx.clone(), stop.clone());
        std::thread::spawn(move || relay_output(channel, fd, tx, &stop));
    }
    let killer = running.killer();
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let exit = running.wait().map_err(|e| e.to_string());
            let _ = tx.blocking_send(Event::Exit(exit));
        });
    }
    drop(tx);
    let mut stdin_tx = stdin.map(|fd| stdin_writer(fd, stop.clone()));
    let (mut eofs, mut exit) = (0, None);
    let mut drain_until = None;
    let mut client_open = true;
    loop {
        let drain = async {
            match drain_until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            m = input.recv(), if client_open => match m {
                None => {
                    // the client is gone: so is the command
                    client_open = false;
                    if exit.is_none() {
                        killer.kill();
                    }
                }
                Some(Input::Stdin(data)) => {
                    if let Some(s) = &stdin_tx {
                        send_stdin(s, data);
                    }
                }
                Some(Input::StdinClosed) => stdin_tx = None,
                Some(Input::Resize(data)) => {
                    if let Some(p) = &pty {
                        resize(p, &data);
                    }
                }
            },
            e = events.recv() => match e {
                Some(Event::Output(channel, data)) => {
                    if output.send(Output::Data(channel, data)).await.is_err() {
                        killer.kill();
                    }
                }
                Some(Event::Eof) => eofs += 1,
                Some(Event::Exit(x)) => {
                    exit = Some(x);
                    drain_until = Some(tokio::time::Instant::now() + DRAIN);
                }
                None => break,
            },
            () = drain => break,
        }
        if exit.is_some() && eofs >= readers {
            break;
        }
    }
    drop(stdin_tx);
    stop.store(true, Ordering::Relaxed);
    if let Some(x) = exit {
        let _ = output.send(Output::Status(status_json(&x))).await;
    }
}

/// Chunks of stdin waiting for the command at most; beyond, a client that
/// types into a command that does not read loses input (rather than the
/// session blocking its output).
const STDIN_BACKLOG: usize = 256;

/// A thread that writes what it receives to `fd` (the command's stdin);
/// dropping the sender closes it. Non-blocking writes with a bounded wait,
/// so the thread ends once `stop` is set even if nobody reads the pipe.
pub(super) fn stdin_writer(fd: OwnedFd, stop: Arc<AtomicBool>) -> mpsc::Sender<Vec<u8>> {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(STDIN_BACKLOG);
    std::thread::spawn(move || {
        let _ = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK));
        while let Some(chunk) = rx.blocking_recv() {
            let mut rest = chunk.as_slice();
            while !rest.is_empty() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                match nix::unistd::write(&fd, rest) {
                    Ok(n) => rest = &rest[n..],
                    Err(nix::Error::EAGAIN) => {
                        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
                        let _ = poll(&mut fds, PollTimeout::from(100u16));
                    }
                    Err(nix::Error::EINTR) => {}
                    Err(_) => return,
                }
            }
        }
    });
    tx
}

/// Queues stdin for the writer thread without waiting.
pub(super) fn send_stdin(tx: &mpsc::Sender<Vec<u8>>, data: Vec<u8>) {
    if tx.try_send(data).is_err() {
        tracing::debug!("stdin backlog full: the command is not reading; input dropped");
    }
}

/// A stream session (exec or attach) given its two channels.
pub(crate) trait Run: FnOnce(mpsc::Receiver<Input>, mpsc::Sender<Output>) -> Self::Fut + Send + 'static {
    type Fut: std::future::Future<Output = ()> + Send + 'static;
}

impl<F, Fut> Run for F
where
    F: FnOnce(mpsc::Receiver<Input>, mpsc::Sender<Output>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    type Fut = Fut;
}

/// The exec session of `cmd` in the app process `app`, for a transport.
pub(crate) fn exec(app: exec::AppProcess, cmd: Vec<String>, streams: Streams) -> impl Run {
    move |input, output| session(app, cmd, streams, input, output)
}

/// Serves one session over a WebSocket (tungstenite answers pings and a
/// client's close).
pub(crate) async fn serve_ws<S>(ws: WebSocketStream<S>, framing: Framing, run: impl Run)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut wr, mut rd) = ws.split();
    let (in_tx, in_rx) = mpsc::channel::<Input>(64);
    let (out_tx, mut out_rx) = mpsc::channel::<Output>(64);
    let reader = tokio::spawn(async move {
        while let Some(Ok(m)) = rd.next().await {
            let input = match m {
                Message::Close(_) => break,
                m => match framing.decode(&m) {
                    Some((STDIN, data)) => Input::Stdin(data),
                    Some((RESIZE, data)) => Input::Resize(data),
                    Some((CLOSE, data)) if framing.v5 && data.first() == Some(&STDIN) => Input::StdinClosed,
                    _ => continue,
                },
            };
            if in_tx.send(input).await.is_err() {
                break;
            }
        }
    });
    let session = tokio::spawn(run(in_rx, out_tx));
    while let Some(o) = out_rx.recv().await {
        match o {
            Output::Data(channel, data) => {
                if wr.send(framing.encode(channel, &data)).await.is_err() {
                    break;
                }
            }
            Output::Status(json) => {
                if let Some(status) = framing.status(&json) {
                    let _ = wr.send(framing.encode(ERROR, status.as_bytes())).await;
                }
            }
        }
    }
    let _ = wr.send(normal_close()).await;
    reader.abort();
    let _ = session.await;
}

/// The sub-protocol served over SPDY (the error stream carries a v4 status).
pub(crate) const SPDY_PROTOCOL: &str = "v4.channel.k8s.io";
/// How long a SPDY client has to open the streams it asked for.
const STREAM_SETUP: Duration = Duration::from_secs(30);
/// Frames kept from before the streams were all open (the rest is refused).
const EARLY_FRAMES: usize = 256;

/// Serves one session over a connection upgraded to SPDY/3.1: the client
/// opens one stream per channel (`streamtype` error, stdin, stdout, stderr,
/// resize), each accepted with a SYN_REPLY; output goes out on them, the
/// status on the error stream, then every stream is closed.
pub(crate) async fn serve_spdy<S>(conn: S, streams: Streams, run: impl Run)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    use super::spdy;
    let Ok(spdy::Session { mut rd, mut rcodec, mut wcodec, out: out_tx, writer }) = spdy::Session::start(conn) else {
        return;
    };
    let wanted = wanted_streams(&streams);
    let setup = open_streams(&mut rd, &mut rcodec, &mut wcodec, &out_tx, &wanted);
    let (ids, early) = match tokio::time::timeout(STREAM_SETUP, setup).await {
        Ok(Ok(opened)) => opened,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "spdy exec setup");
            drop(out_tx);
            let _ = writer.await;
            return;
        }
        Err(_) => {
            tracing::debug!("spdy exec: streams not opened in time");
            drop(out_tx);
            let _ = writer.await;
            return;
        }
    };
    let id = |k: &str| ids.get(k).copied();
    let (in_tx, in_rx) = mpsc::channel::<Input>(64);
    let reader = spawn_spdy_reader(rd, rcodec, early, id("stdin"), id("resize"), in_tx, out_tx.clone());
    let (sess_tx, mut sess_rx) = mpsc::channel::<Output>(64);
    let session = tokio::spawn(run(in_rx, sess_tx));
    forward_spdy_output(&mut sess_rx, &out_tx, &ids).await;
    close_spdy_streams(&out_tx, &ids).await;
    drop(out_tx);
    reader.abort();
    let _ = session.await;
    let _ = writer.await;
}

/// The streams the client must open before the command starts.
fn wanted_streams(streams: &Streams) -> Vec<&'static str> {
    let mut wanted = vec!["error"];
    for (on, kind) in [(streams.stdin, "stdin"), (streams.stdout, "stdout"), (streams.stderr && !streams.tty, "stderr")]
    {
        if on {
            wanted.push(kind);
        }
    }
    if streams.tty {
        wanted.push("resize");
    }
    wanted
}

/// Accepts the client's streams (a SYN_REPLY each) until every `wanted` one
/// is open, answering pings. Returns the streams' ids by kind, and what came
/// on streams already open while the others were being opened (Kubernetes'
/// client writes stdin as soon as its stream is open, and may close it
/// before opening stdout): served once all are.
async fn open_streams(
    rd: &mut (impl AsyncRead + Unpin),
    rcodec: &mut super::spdy::Codec,
    wcodec: &mut super::spdy::Codec,
    out_tx: &mpsc::Sender<Vec<u8>>,
    wanted: &[&str],
) -> Result<(std::collections::HashMap<String, u32>, Vec<super::spdy::Frame>), String> {
    use super::spdy::{self, Frame};
    let mut ids: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let mut early: Vec<Frame> = Vec::new();
    while !wanted.iter().all(|k| ids.contains_key(*k)) {
        match spdy::read_frame(rd, rcodec).await {
            Ok(Some(Frame::SynStream { stream, headers, .. })) => {
                let kind = headers.iter().find(|(k, _)| k == "streamtype").map(|(_, v)| v.clone());
                let reply = spdy::syn_reply(wcodec, stream, &[]).map_err(|e| e.to_string())?;
                let _ = out_tx.send(reply).await;
                if let Some(kind) = kind {
                    ids.insert(kind, stream);
                }
            }
            Ok(Some(Frame::Ping { id })) => {
                let _ = out_tx.send(spdy::ping(id)).await;
            }
            Ok(Some(f @ (Frame::Data { .. } | Frame::RstStream { .. }))) => {
                if early.len() >= EARLY_FRAMES {
                    return Err("too many frames before the streams were opened".to_string());
                }
                early.push(f);
            }
            Ok(Some(_)) => {}
            Ok(None) => return Err("the client left before opening its streams".to_string()),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok((ids, early))
}

/// Reads the client's frames (the early ones first) into the session's
/// input: stdin and its end, resize events; keeps the windows open,
/// answers pings, refuses new streams; ends at GOAWAY or the connection's end.
fn spawn_spdy_reader(
    mut rd: impl AsyncRead + Unpin + Send + 'static,
    mut rcodec: super::spdy::Codec,
    early: Vec<super::spdy::Frame>,
    stdin_id: Option<u32>,
    resize_id: Option<u32>,
    in_tx: mpsc::Sender<Input>,
    pings: mpsc::Sender<Vec<u8>>,
) -> tokio::task::JoinHandle<()> {
    use super::spdy::{self, Frame};
    tokio::spawn(async move {
        let mut resize_buf = Vec::new();
        let mut early = early.into_iter();
        loop {
            let frame = match early.next() {
                Some(f) => f,
                None => match spdy::read_frame(&mut rd, &mut rcodec).await {
                    Ok(Some(f)) => f,
                    _ => break,
                },
            };
            let input = match frame {
                Frame::Data { stream, fin, data } => {
                    if !data.is_empty() {
                        // keep a strict SPDY/3.1 peer's windows open
                        let n = data.len() as u32;
                        let _ = pings.send([spdy::window_update(stream, n), spdy::window_update(0, n)].concat()).await;
                    }
                    if Some(stream) == stdin_id {
                        if !data.is_empty() && in_tx.send(Input::Stdin(data)).await.is_err() {
                            break;
                        }
                        if fin { Input::StdinClosed } else { continue }
                    } else if Some(stream) == resize_id {
                        resize_buf.extend_from_slice(&data);
                        // resize events are tiny JSON lines: anything else is dropped
                        if resize_buf.len() > 64 << 10 {
                            resize_buf.clear();
                        }
                        while let Some(nl) = resize_buf.iter().position(|b| *b == b'\n') {
                            let line: Vec<u8> = resize_buf.drain(..=nl).collect();
                            let _ = in_tx.send(Input::Resize(line)).await;
                        }
                        continue;
                    } else {
                        continue;
                    }
                }
                Frame::RstStream { stream, .. } if Some(stream) == stdin_id => Input::StdinClosed,
                Frame::Ping { id } => {
                    let _ = pings.send(spdy::ping(id)).await;
                    continue;
                }
                Frame::SynStream { stream, .. } => {
                    let _ = pings.send(spdy::rst_stream(stream, spdy::REFUSED_STREAM)).await;
                    continue;
                }
                Frame::GoAway { .. } => break,
                _ => continue,
            };
            if in_tx.send(input).await.is_err() {
                break;
            }
        }
    })
}

/// Sends the session's output on its streams (stdout, stderr, the status on
/// the error stream) until the session ends or the client is gone.
async fn forward_spdy_output(
    sess_rx: &mut mpsc::Receiver<Output>,
    out_tx: &mpsc::Sender<Vec<u8>>,
    ids: &std::collections::HashMap<String, u32>,
) {
    use super::spdy;
    let id = |k: &str| ids.get(k).copied();
    let error_id = id("error");
    while let Some(o) = sess_rx.recv().await {
        let bytes = match o {
            Output::Data(STDOUT, d) => id("stdout").map(|s| spdy::data(s, false, &d)),
            Output::Data(_, d) => id("stderr").map(|s| spdy::data(s, false, &d)),
            Output::Status(json) => error_id.map(|s| spdy::data(s, true, json.as_bytes())),
        };
        if let Some(b) = bytes
            && out_tx.send(b).await.is_err()
        {
            break;
        }
    }
}

/// Closes stdout and stderr, then the session (GOAWAY).
async fn close_spdy_streams(out_tx: &mpsc::Sender<Vec<u8>>, ids: &std::collections::HashMap<String, u32>) {
    use super::spdy;
    for kind in ["stdout", "stderr"] {
        if let Some(s) = ids.get(kind).copied() {
            let _ = out_tx.send(spdy::data(s, true, &[])).await;
        }
    }
    let last = ids.values().copied().max().unwrap_or(0);
    let _ = out_tx.send(spdy::goaway(last)).await;
}

/// Makes the stdio and starts the command (blocking parts on a worker).
async fn start(app: exec::AppProcess, cmd: Vec<String>, streams: Streams) -> Result<(Running, Ours), String> {
    tokio::task::spawn_blocking(move || {
        let io = stdio(streams, app.pid).map_err(|e| format!("making the exec's stdio: {e}"))?;
        let [a, b, c] = &io.child;
        let running =
            exec::spawn(&app, &cmd, [a.as_fd(), b.as_fd(), c.as_fd()], streams.tty, None).map_err(|e| e.to_string())?;
        // the command holds its ends now; ours of them close here, so EOF
        // (or EIO on a pty) reaches the readers when the command is done
        Ok((running, io.ours))
    })
    .await
    .map_err(|e| format!("exec worker: {e}"))?
}

/// Reads one output until EOF (a pty master reads EIO once the command's
/// side is closed) and forwards it; gives up when `stop` is set (a
/// background process may hold the pipe open for good).
fn relay_output(channel: u8, fd: OwnedFd, tx: mpsc::Sender<Event>, stop: &AtomicBool) {
    let mut buf = vec![0u8; 32 * 1024];
    while !stop.load(Ordering::Relaxed) {
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(100u16)) {
            Ok(0) | Err(nix::Error::EINTR) => continue,
            Ok(_) => {}
            Err(_) => break,
        }
        match nix::unistd::read(&fd, &mut buf) {
            Ok(0) | Err(nix::Error::EIO) => break,
            Ok(n) => {
                if tx.blocking_send(Event::Output(channel, buf[..n].to_vec())).is_err() {
                    return;
                }
            }
            Err(nix::Error::EINTR | nix::Error::EAGAIN) => {}
            Err(_) => break,
        }
    }
    let _ = tx.blocking_send(Event::Eof);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_both_framings() {
        for proto in PROTOCOLS {
            let f = Framing::of(proto);
            let m = f.encode(STDOUT, b"hi\n");
            assert_eq!(f.decode(&m), Some((STDOUT, b"hi\n".to_vec())), "{proto}");
        }
        assert_eq!(Framing::of("v4.base64.channel.k8s.io").encode(ERROR, b"x"), Message::text("3eA=="));
        assert!(Framing::of("v5.channel.k8s.io").v5);
        // before v4: no status on success, the message on failure
        let v1 = Framing::of("channel.k8s.io");
        assert!(!v1.v5 && !v1.base64 && !v1.json_status);
        assert_eq!(v1.status(&status_json(&Ok(0))), None);
        assert_eq!(
            v1.status(&status_json(&Ok(2))).as_deref(),
            Some("command terminated with non-zero exit code: exit status 2")
        );
        assert_eq!(Framing::of("").status(&status_json(&Err("gone".into()))).as_deref(), Some("gone"));
        assert!(Framing::of("base64.channel.k8s.io").base64);
        let v4 = Framing::of("v4.channel.k8s.io");
        assert_eq!(v4.status(&status_json(&Ok(0))).as_deref(), Some(r#"{"metadata":{},"status":"Success"}"#));
    }

    #[test]
    fn statuses_are_what_kubectl_reads() {
        assert_eq!(status_json(&Ok(0)), r#"{"metadata":{},"status":"Success"}"#);
        let v: serde_json::Value = serde_json::from_str(&status_json(&Ok(3))).expect("json");
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(v["details"]["causes"][0]["message"], "3");
        let v: serde_json::Value = serde_json::from_str(&status_json(&Err("boom".into()))).expect("json");
        assert_eq!((v["status"].as_str(), v["message"].as_str()), (Some("Failure"), Some("boom")));
    }
}
