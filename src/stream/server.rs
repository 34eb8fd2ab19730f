//! The streaming server: HTTP/1.1 on the streaming address (loopback by
//! default, an ephemeral port unless configured), serving the URLs that
//! Exec, Attach and PortForward hand out. A URL's token is taken
//! on first use; the connection is then upgraded to a WebSocket with one of
//! Kubernetes' channel sub-protocols, or to SPDY/3.1 with the v4 stream
//! protocol (what kubelet's clients speak).

use super::attach;
use super::portforward;
use super::remotecommand::{self, Framing, Streams};
use super::token::{StreamRequest, Tokens};
use super::ws;
use crate::http_head::{Head, read_head};
use crate::runtime::Runtime;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// A client has this long to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's shared state: pending tokens and its base URL once bound.
#[derive(Debug, Default)]
pub struct StreamServer {
    pub tokens: Tokens,
    base: OnceLock<String>,
}

impl StreamServer {
    /// The URL for `req`, or why there is none.
    pub fn url(&self, req: StreamRequest) -> Result<String, String> {
        let base = self.base.get().ok_or("the streaming server is not running")?;
        let kind = req.kind();
        Ok(format!("{base}/{kind}/{}", self.tokens.insert(req)))
    }

    fn set_base(&self, addr: SocketAddr) {
        let _ = self.base.set(format!("http://{addr}"));
    }
}

/// Binds the streaming address; a non-loopback address gets a warning (no TLS).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "the streaming server is plain HTTP: tokens can be sniffed off the network");
    }
    TcpListener::bind(addr).await
}

/// Serves connections on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, rt: Arc<Runtime>) {
    if let Ok(addr) = listener.local_addr() {
        rt.streams.set_base(addr);
        tracing::info!(%addr, "streaming server for exec");
    }
    loop {
        let conn = match listener.accept().await {
            Ok((conn, _)) => conn,
            Err(e) => {
                // out of descriptors, say: do not spin on it
                tracing::warn!(error = %e, "streaming server cannot accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let rt = rt.clone();
        tokio::spawn(async move {
            if let Err(e) = handle(conn, rt).await {
                tracing::debug!(error = %e, "streaming connection");
            }
        });
    }
}

async fn reply(conn: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(text.as_bytes()).await
}

async fn handle(mut conn: TcpStream, rt: Arc<Runtime>) -> std::io::Result<()> {
    let _ = conn.set_nodelay(true);
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut conn)).await {
        Ok(Ok(Some(h))) => h,
        Ok(Err(e)) => return Err(e),
        _ => return reply(&mut conn, "400 Bad Request", "malformed request\n").await,
    };
    if head.method != "GET" && head.method != "POST" {
        return reply(&mut conn, "405 Method Not Allowed", "use GET or POST\n").await;
    }
    let path = head.path.split('?').next().unwrap_or_default();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (kind, token) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    if !["exec", "attach", "portforward"].contains(&kind) || token.is_empty() {
        return reply(&mut conn, "404 Not Found", "no such streaming endpoint\n").await;
    }
    // the token is used up by any attempt, as a single-use URL must be
    let Some(req) = rt.streams.tokens.take(token, kind) else {
        return reply(&mut conn, "404 Not Found", "unknown or expired streaming token\n").await;
    };
    if head.has_token("upgrade", "SPDY/3.1") {
        return spdy_upgrade(conn, &head, req, rt).await;
    }
    if !head.has_token("upgrade", "websocket") || !head.has_token("connection", "upgrade") {
        return reply(&mut conn, "400 Bad Request", "a WebSocket upgrade is required\n").await;
    }
    if head.header("sec-websocket-version") != "13" || head.header("sec-websocket-key").is_empty() {
        return reply(&mut conn, "400 Bad Request", "WebSocket version 13 with a key is required\n").await;
    }
    let offered: Vec<&str> =
        head.header("sec-websocket-protocol").split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    match req {
        StreamRequest::Exec { container_id, cmd, tty, stdin, stdout, stderr } => {
            let Some(protocol) = remotecommand::PROTOCOLS.iter().find(|p| offered.contains(p)) else {
                let body = format!("no supported sub-protocol offered; rktlet speaks {:?}\n", remotecommand::PROTOCOLS);
                return reply(&mut conn, "400 Bad Request", &body).await;
            };
            let Some(pid) = main_pid(&mut conn, &rt, container_id).await? else { return Ok(()) };
            let key = head.header("sec-websocket-key").to_string();
            conn.write_all(ws::handshake_response(&key, protocol).as_bytes()).await?;
            let streams = Streams { tty, stdin, stdout, stderr };
            remotecommand::serve_ws(conn, Framing::of(protocol), remotecommand::exec(pid, cmd, streams)).await;
            Ok(())
        }
        StreamRequest::PortForward { pod_id, ports } => {
            // no sub-protocol at all: kubelet's server takes that as binary channels too
            let protocol = match offered.is_empty() {
                true => Some(""),
                false => portforward::WS_PROTOCOLS.iter().copied().find(|p| offered.contains(p)),
            };
            let Some(protocol) = protocol else {
                let body =
                    format!("no supported sub-protocol offered; rktlet speaks {:?}\n", portforward::WS_PROTOCOLS);
                return reply(&mut conn, "400 Bad Request", &body).await;
            };
            // the ports to forward come from the URL (`?port=80&port=443`)
            let query = head.path.split_once('?').map(|(_, q)| q).unwrap_or_default();
            let url_ports: Vec<u16> = query
                .split('&')
                .filter_map(|kv| kv.strip_prefix("port="))
                .flat_map(|v| v.split(','))
                .filter_map(|p| p.parse().ok())
                .collect();
            if url_ports.is_empty() || url_ports.len() > portforward::MAX_WS_PORTS {
                let body = format!("name 1 to {} ports to forward: ?port=N\n", portforward::MAX_WS_PORTS);
                return reply(&mut conn, "400 Bad Request", &body).await;
            }
            let Some(target) = pod_target(&mut conn, &rt, pod_id, ports).await? else { return Ok(()) };
            let key = head.header("sec-websocket-key").to_string();
            conn.write_all(ws::handshake_response(&key, protocol).as_bytes()).await?;
            portforward::websocket(conn, Framing::of(protocol), target, url_ports).await;
            Ok(())
        }
        StreamRequest::Attach { container_id, tty, stdin, stdout, stderr } => {
            let Some(protocol) = remotecommand::PROTOCOLS.iter().find(|p| offered.contains(p)) else {
                let body = format!("no supported sub-protocol offered; rktlet speaks {:?}\n", remotecommand::PROTOCOLS);
                return reply(&mut conn, "400 Bad Request", &body).await;
            };
            let Some(source) = attach_source(&mut conn, &rt, container_id, stdin).await? else { return Ok(()) };
            let key = head.header("sec-websocket-key").to_string();
            conn.write_all(ws::handshake_response(&key, protocol).as_bytes()).await?;
            let streams = Streams { tty, stdin, stdout, stderr };
            remotecommand::serve_ws(conn, Framing::of(protocol), attach::attach(source, streams)).await;
            Ok(())
        }
    }
}

/// Looks the target of a request up (a blocking read of the pod's files),
/// or answers 404 with why and returns `None`.
async fn lookup<T: Send + 'static>(
    conn: &mut TcpStream,
    rt: &Arc<Runtime>,
    find: impl FnOnce(&Runtime) -> Result<T, tonic::Status> + Send + 'static,
) -> std::io::Result<Option<T>> {
    let rt = rt.clone();
    match tokio::task::spawn_blocking(move || find(&rt)).await.map_err(std::io::Error::other)? {
        Ok(found) => Ok(Some(found)),
        Err(status) => reply(conn, "404 Not Found", &format!("{}\n", status.message())).await.map(|()| None),
    }
}

async fn main_pid(conn: &mut TcpStream, rt: &Arc<Runtime>, id: String) -> std::io::Result<Option<i32>> {
    lookup(conn, rt, move |rt| crate::cri::container_exec::running_main_pid(rt, &id)).await
}

async fn attach_source(
    conn: &mut TcpStream,
    rt: &Arc<Runtime>,
    id: String,
    stdin: bool,
) -> std::io::Result<Option<attach::Source>> {
    lookup(conn, rt, move |rt| crate::cri::container_exec::attach_source(rt, &id, stdin)).await
}

async fn pod_target(
    conn: &mut TcpStream,
    rt: &Arc<Runtime>,
    pod_id: String,
    ports: Vec<u16>,
) -> std::io::Result<Option<portforward::Target>> {
    let netns = lookup(conn, rt, move |rt| crate::cri::sandbox_status::running_netns(rt, &pod_id)).await?;
    Ok(netns.map(|netns| portforward::Target { netns, ports }))
}

/// Completes a `Upgrade: SPDY/3.1` request: the stream protocol is chosen
/// from `X-Stream-Protocol-Version` (kubelet answers 403 without a match).
async fn spdy_upgrade(mut conn: TcpStream, head: &Head, req: StreamRequest, rt: Arc<Runtime>) -> std::io::Result<()> {
    let offered: Vec<&str> = head.header("x-stream-protocol-version").split(',').map(str::trim).collect();
    match req {
        StreamRequest::Exec { container_id, cmd, tty, stdin, stdout, stderr } => {
            let protocol = remotecommand::SPDY_PROTOCOL;
            if !offered.contains(&protocol) {
                let body = format!("no supported stream protocol offered; rktlet speaks {protocol} over SPDY\n");
                return reply(&mut conn, "403 Forbidden", &body).await;
            }
            let Some(pid) = main_pid(&mut conn, &rt, container_id).await? else { return Ok(()) };
            let response = format!(
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
                 X-Stream-Protocol-Version: {protocol}\r\n\r\n"
            );
            conn.write_all(response.as_bytes()).await?;
            let streams = Streams { tty, stdin, stdout, stderr };
            remotecommand::serve_spdy(conn, streams, remotecommand::exec(pid, cmd, streams)).await;
            Ok(())
        }
        StreamRequest::PortForward { pod_id, ports } => {
            if !offered.contains(&portforward::SPDY_PROTOCOL) {
                let body =
                    format!("no supported stream protocol offered; rktlet speaks {}\n", portforward::SPDY_PROTOCOL);
                return reply(&mut conn, "403 Forbidden", &body).await;
            }
            let Some(target) = pod_target(&mut conn, &rt, pod_id, ports).await? else { return Ok(()) };
            let response = format!(
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
                 X-Stream-Protocol-Version: {}\r\n\r\n",
                portforward::SPDY_PROTOCOL
            );
            conn.write_all(response.as_bytes()).await?;
            portforward::spdy(conn, target).await;
            Ok(())
        }
        StreamRequest::Attach { container_id, tty, stdin, stdout, stderr } => {
            let protocol = remotecommand::SPDY_PROTOCOL;
            if !offered.contains(&protocol) {
                let body = format!("no supported stream protocol offered; rktlet speaks {protocol} over SPDY\n");
                return reply(&mut conn, "403 Forbidden", &body).await;
            }
            let Some(source) = attach_source(&mut conn, &rt, container_id, stdin).await? else { return Ok(()) };
            let response = format!(
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
                 X-Stream-Protocol-Version: {protocol}\r\n\r\n"
            );
            conn.write_all(response.as_bytes()).await?;
            let streams = Streams { tty, stdin, stdout, stderr };
            remotecommand::serve_spdy(conn, streams, attach::attach(source, streams)).await;
            Ok(())
        }
    }
}
