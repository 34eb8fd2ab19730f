//! PortForward: TCP connections to a port inside a pod's network namespace,
//! relayed over SPDY/3.1 (`portforward.k8s.io`: per connection the client
//! opens an error stream and a data stream with `port` and `requestid`
//! headers) or over a WebSocket (`v4.channel.k8s.io`, `portforward.k8s.io`,
//! `channel.k8s.io`, their base64 forms, or none: ports from the URL,
//! channel 2i carries port i's data and 2i+1 its errors, each channel
//! starting with the port number as two little-endian bytes).

use super::spdy::{self, Frame};
use futures::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::path::PathBuf;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

pub(crate) const SPDY_PROTOCOL: &str = "portforward.k8s.io";
/// Connections half-opened (one of their two streams) at most per session.
const MAX_PENDING_PAIRS: usize = 1024;
/// Ports one WebSocket session may forward (two channels each, one byte per channel id).
pub(crate) const MAX_WS_PORTS: usize = 64;
/// The WebSocket sub-protocols kubelet's own streaming server takes for
/// port-forward, all the same channel framing (binary or base64).
pub(crate) const WS_PROTOCOLS: [&str; 5] =
    ["v4.channel.k8s.io", "v4.base64.channel.k8s.io", "portforward.k8s.io", "channel.k8s.io", "base64.channel.k8s.io"];

/// Where to connect: the pod's netns (none: the node's, for host-network pods).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub netns: Option<PathBuf>,
    /// The ports the CRI request named (empty: any).
    pub ports: Vec<u16>,
}

impl Target {
    /// Connects to `127.0.0.1:port` in the pod's network namespace.
    async fn connect(&self, port: u16) -> std::io::Result<tokio::net::TcpStream> {
        if !self.ports.is_empty() && !self.ports.contains(&port) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("port {port} was not in the PortForward request"),
            ));
        }
        let netns = self.netns.clone();
        let std_stream = tokio::task::spawn_blocking(move || -> std::io::Result<std::net::TcpStream> {
            let connect = || std::net::TcpStream::connect(("127.0.0.1", port));
            match netns {
                Some(path) => crate::net::netns::Netns::open(path)
                    .map_err(std::io::Error::other)?
                    .run(connect)
                    .map_err(std::io::Error::other)?,
                None => connect(),
            }
        })
        .await
        .map_err(std::io::Error::other)??;
        std_stream.set_nonblocking(true)?;
        tokio::net::TcpStream::from_std(std_stream)
    }
}

/// One forwarded connection's streams, as the client opened them.
#[derive(Debug, Default)]
struct Pair {
    port: u16,
    error: Option<u32>,
    data: Option<u32>,
}

/// Serves port-forwarding over a connection upgraded to SPDY/3.1 until the
/// client closes it.
pub(crate) async fn spdy<S>(conn: S, target: Target)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Ok(spdy::Session { mut rd, mut rcodec, mut wcodec, out: out_tx, writer }) = spdy::Session::start(conn) else {
        return;
    };
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    // data frames for a forwarded connection go to its task
    let mut inbound: HashMap<u32, mpsc::Sender<Vec<u8>>> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    while let Ok(Some(frame)) = spdy::read_frame(&mut rd, &mut rcodec).await {
        match frame {
            Frame::SynStream { stream, headers, .. } => {
                let get = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap_or_default();
                let (kind, request, port) = (get("streamtype"), get("requestid"), get("port").parse::<u16>().ok());
                let Ok(reply) = spdy::syn_reply(&mut wcodec, stream, &[]) else { break };
                let _ = out_tx.send(reply).await;
                let Some(port) = port else {
                    let _ = out_tx.send(spdy::rst_stream(stream, spdy::PROTOCOL_ERROR)).await;
                    continue;
                };
                if !pairs.contains_key(&request) && pairs.len() >= MAX_PENDING_PAIRS {
                    let _ = out_tx.send(spdy::rst_stream(stream, spdy::REFUSED_STREAM)).await;
                    continue;
                }
                let pair = pairs.entry(request.clone()).or_default();
                pair.port = port;
                match kind.as_str() {
                    "error" => pair.error = Some(stream),
                    "data" => pair.data = Some(stream),
                    _ => {
                        let _ = out_tx.send(spdy::rst_stream(stream, spdy::PROTOCOL_ERROR)).await;
                        continue;
                    }
                }
                if let Some(Pair { port, error: Some(e), data: Some(d) }) = pairs.get(&request).map(|p| Pair { ..*p }) {
                    pairs.remove(&request);
                    let (tx, rx) = mpsc::channel::<Vec<u8>>(64);
                    inbound.insert(d, tx);
                    tasks.spawn(forward_spdy(target.clone(), port, e, d, rx, out_tx.clone()));
                }
            }
            Frame::Data { stream, fin, data } => {
                if !data.is_empty() {
                    let n = data.len() as u32;
                    let _ = out_tx.send([spdy::window_update(stream, n), spdy::window_update(0, n)].concat()).await;
                    // one slow pod connection must not stall the session: it is reset
                    if let Some(tx) = inbound.get(&stream)
                        && tx.try_send(data).is_err()
                    {
                        inbound.remove(&stream);
                        let _ = out_tx.send(spdy::rst_stream(stream, spdy::REFUSED_STREAM)).await;
                    }
                }
                if fin {
                    inbound.remove(&stream);
                }
            }
            Frame::RstStream { stream, .. } => {
                inbound.remove(&stream);
            }
            Frame::Ping { id } => {
                let _ = out_tx.send(spdy::ping(id)).await;
            }
            Frame::GoAway { .. } => break,
            _ => {}
        }
    }
    // the client is gone: so are its connections into the pod
    drop(inbound);
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    drop(out_tx);
    let _ = writer.await;
}

/// Relays one connection: TCP to data frames and data frames to TCP; an
/// error goes on the error stream; both streams are closed at the end.
async fn forward_spdy(
    target: Target,
    port: u16,
    error: u32,
    data: u32,
    mut inbound: mpsc::Receiver<Vec<u8>>,
    out: mpsc::Sender<Vec<u8>>,
) {
    let tcp = match target.connect(port).await {
        Ok(t) => t,
        Err(e) => {
            let msg = format!("error forwarding port {port} to pod: {e}");
            let _ = out.send(spdy::data(error, true, msg.as_bytes())).await;
            let _ = out.send(spdy::data(data, true, &[])).await;
            return;
        }
    };
    let (mut tr, mut tw) = tcp.into_split();
    let to_pod = tokio::spawn(async move {
        while let Some(chunk) = inbound.recv().await {
            if tw.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = tw.shutdown().await;
    });
    // the connection is over when the pod's side closes (as kubectl
    // expects: it waits for the data stream's end, then the error stream's)
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match tr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.send(spdy::data(data, false, &buf[..n])).await.is_err() {
                    to_pod.abort();
                    return;
                }
            }
        }
    }
    let _ = out.send(spdy::data(data, true, &[])).await;
    let _ = out.send(spdy::data(error, true, &[])).await;
    to_pod.abort();
}

/// Serves port-forwarding over a WebSocket for the ports of the URL's
/// `port` query parameters.
pub(crate) async fn websocket<S>(
    ws: WebSocketStream<S>,
    framing: super::remotecommand::Framing,
    target: Target,
    ports: Vec<u16>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut wr, mut rd) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<(u8, Vec<u8>)>(64);
    let mut to_pods = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, port) in ports.iter().enumerate() {
        let (data_ch, err_ch) = ((2 * i) as u8, (2 * i + 1) as u8);
        for ch in [data_ch, err_ch] {
            if wr.send(framing.encode(ch, &port.to_le_bytes())).await.is_err() {
                return;
            }
        }
        let (tx, rx) = mpsc::channel::<Vec<u8>>(64);
        to_pods.push(tx);
        tasks.spawn(forward_ws(target.clone(), *port, data_ch, err_ch, rx, out_tx.clone()));
    }
    drop(out_tx);
    let mut reader = tokio::spawn(async move {
        while let Some(Ok(m)) = rd.next().await {
            if let Message::Close(_) = m {
                break;
            }
            if let Some((ch, data)) = framing.decode(&m)
                && ch % 2 == 0
                && let Some(tx) = to_pods.get(usize::from(ch / 2))
                && tx.send(data).await.is_err()
            {
                break;
            }
        }
    });
    loop {
        tokio::select! {
            m = out_rx.recv() => {
                let Some((ch, data)) = m else { break };
                if wr.send(framing.encode(ch, &data)).await.is_err() {
                    break;
                }
            }
            // the client is gone: so are its connections into the pod
            _ = &mut reader => break,
        }
    }
    tasks.abort_all();
    let _ = wr.send(super::remotecommand::normal_close()).await;
    reader.abort();
}

async fn forward_ws(
    target: Target,
    port: u16,
    data_ch: u8,
    err_ch: u8,
    mut inbound: mpsc::Receiver<Vec<u8>>,
    out: mpsc::Sender<(u8, Vec<u8>)>,
) {
    let tcp = match target.connect(port).await {
        Ok(t) => t,
        Err(e) => {
            let _ = out.send((err_ch, format!("error forwarding port {port} to pod: {e}").into_bytes())).await;
            return;
        }
    };
    let (mut tr, mut tw) = tcp.into_split();
    let to_pod = async {
        while let Some(chunk) = inbound.recv().await {
            if tw.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = tw.shutdown().await;
    };
    let from_pod = async {
        let mut buf = vec![0u8; 32 * 1024];
        while let Ok(n) = tr.read(&mut buf).await {
            if n == 0 || out.send((data_ch, buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
    };
    tokio::join!(to_pod, from_pod);
}
