//! The streaming server: HTTP/1.1 on hyper on the streaming address
//! (loopback by default, an ephemeral port unless configured), serving the
//! URLs that Exec, Attach and PortForward hand out. A URL's token is taken
//! on first use; the connection is then upgraded (hyper's 101 answer and
//! `hyper::upgrade`) to a WebSocket with one of Kubernetes' channel
//! sub-protocols (`ws`, on tokio-tungstenite), or to SPDY/3.1 with the v4
//! stream protocol (`spdy`: what kubelet's clients speak).
//!
//! What a URL leads to (a container's main process, its output, a pod's
//! network namespace) is looked up through [`Lookup`], which the runtime's
//! CRI side implements.

use super::attach;
use super::portforward;
use super::remotecommand::{self, Framing, Streams};
use super::token::{StreamRequest, Tokens};
use super::ws;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// A client has this long to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head accepted (hyper answers 431 past it).
pub const MAX_HEAD: usize = 16 << 10;

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

/// What the server needs from the runtime: its tokens, and the targets of
/// requests. The lookups read the pod's files (they are called off the
/// async threads); an `Err` is why there is no target, answered with 404.
pub trait Lookup: Send + Sync + 'static {
    fn streams(&self) -> &StreamServer;
    /// The main process of a running container (exec copies it).
    fn app_process(&self, container_id: &str) -> Result<crate::stage1::exec::AppProcess, String>;
    /// Where a container's output is read from and its stdin written.
    fn attach_source(&self, container_id: &str, stdin: bool) -> Result<attach::Source, String>;
    /// A running pod's network namespace (`None`: the host's).
    fn netns(&self, pod_id: &str) -> Result<Option<PathBuf>, String>;
}

/// Binds the streaming address; a non-loopback address gets a warning (no TLS).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "the streaming server is plain HTTP: tokens can be sniffed off the network");
    }
    TcpListener::bind(addr).await
}

/// Serves connections on `listener` until the task is dropped.
pub async fn serve<L: Lookup>(listener: TcpListener, rt: Arc<L>) {
    if let Ok(addr) = listener.local_addr() {
        rt.streams().set_base(addr);
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

/// The connection as hyper reads and writes it, shared with [`handle`]:
/// a client that has not sent its request head in time is answered on it
/// after hyper's side is dropped (hyper's own header timeout closes the
/// connection without a word).
struct Shared(Arc<TcpStream>);

impl AsyncRead for Shared {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            match self.0.try_read_buf(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r.map(|_| ())),
            }
        }
    }
}

impl AsyncWrite for Shared {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(data) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write_vectored(bufs) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        use std::os::fd::AsRawFd;
        let r = nix::sys::socket::shutdown(self.0.as_raw_fd(), nix::sys::socket::Shutdown::Write);
        Poll::Ready(r.or_else(|e| if e == nix::Error::ENOTCONN { Ok(()) } else { Err(e.into()) }))
    }
}

async fn handle<L: Lookup>(conn: TcpStream, rt: Arc<L>) -> Result<(), hyper::Error> {
    let _ = conn.set_nodelay(true);
    let sock = Arc::new(conn);
    let started = Arc::new(AtomicBool::new(false));
    let svc = {
        let started = started.clone();
        hyper::service::service_fn(move |req| {
            started.store(true, Ordering::Relaxed);
            route(req, rt.clone())
        })
    };
    // boxed, not pinned in place: it is dropped on a timeout to free `sock`
    let mut conn = Box::pin(
        hyper::server::conn::http1::Builder::new()
            .max_buf_size(MAX_HEAD)
            .serve_connection(TokioIo::new(Shared(sock.clone())), svc)
            .with_upgrades(),
    );
    tokio::select! {
        r = &mut conn => return r,
        () = tokio::time::sleep(HEAD_TIMEOUT) => {}
    }
    if started.load(Ordering::Relaxed) {
        // the request is in: the rest is the session's time
        return conn.await;
    }
    drop(conn);
    if let Ok(mut sock) = Arc::try_unwrap(sock) {
        let body = "request head not received in time\n";
        let text = format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = sock.write_all(text.as_bytes()).await;
    }
    Ok(())
}

type Reply = Response<Full<Bytes>>;

/// A plain-text answer that ends the connection (`Connection: close`; not
/// hyper's `keep_alive(false)`, which would add `close` to a 101's `Upgrade`).
fn reply(status: StatusCode, body: impl Into<String>) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body.into())));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// The comma-separated tokens of every `name` header, trimmed, empty ones left out.
fn tokens(headers: &HeaderMap, name: HeaderName) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    tokens(headers, name).iter().any(|t| t.eq_ignore_ascii_case(token))
}

/// Runs `session` on the connection once hyper has sent the 101 answer and
/// handed it over.
fn on_upgrade<F, Fut>(req: &mut Request<Incoming>, session: F)
where
    F: FnOnce(Upgraded) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(io) => session(io).await,
            Err(e) => tracing::debug!(error = %e, "streaming upgrade"),
        }
    });
}

async fn route<L: Lookup>(req: Request<Incoming>, rt: Arc<L>) -> Result<Reply, Infallible> {
    if req.method() != Method::GET && req.method() != Method::POST {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, "use GET or POST\n"));
    }
    let mut parts = req.uri().path().trim_start_matches('/').splitn(2, '/');
    let (kind, token) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    if !["exec", "attach", "portforward"].contains(&kind) || token.is_empty() {
        return Ok(reply(StatusCode::NOT_FOUND, "no such streaming endpoint\n"));
    }
    // the token is used up by any attempt, as a single-use URL must be
    let Some(sreq) = rt.streams().tokens.take(token, kind) else {
        return Ok(reply(StatusCode::NOT_FOUND, "unknown or expired streaming token\n"));
    };
    if has_token(req.headers(), header::UPGRADE, "SPDY/3.1") {
        return Ok(spdy_upgrade(req, sreq, rt).await);
    }
    Ok(ws_upgrade(req, sreq, rt).await)
}

/// Looks the target of a request up (a blocking read of the pod's files),
/// or the 404 answer that says why there is none.
async fn lookup<L: Lookup, T: Send + 'static>(
    rt: &Arc<L>,
    find: impl FnOnce(&L) -> Result<T, String> + Send + 'static,
) -> Result<T, Reply> {
    let rt = rt.clone();
    match tokio::task::spawn_blocking(move || find(&rt)).await {
        Ok(Ok(found)) => Ok(found),
        Ok(Err(why)) => Err(reply(StatusCode::NOT_FOUND, format!("{why}\n"))),
        Err(e) => Err(reply(StatusCode::INTERNAL_SERVER_ERROR, format!("lookup failed: {e}\n"))),
    }
}

async fn pod_target<L: Lookup>(rt: &Arc<L>, pod_id: String, ports: Vec<u16>) -> Result<portforward::Target, Reply> {
    let netns = lookup(rt, move |rt| rt.netns(&pod_id)).await?;
    Ok(portforward::Target { netns, ports })
}

/// The 101 answer to a WebSocket handshake, with `protocol` chosen (none
/// when empty: a client that offered none must not be answered one).
fn ws_switch(key: &[u8], protocol: &'static str) -> Reply {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::try_from(ws::accept_key(key)) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if !protocol.is_empty() {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(protocol));
    }
    r
}

/// Completes a WebSocket upgrade: version 13, a key, and a sub-protocol of
/// ours (port-forward may offer none).
async fn ws_upgrade<L: Lookup>(mut req: Request<Incoming>, sreq: StreamRequest, rt: Arc<L>) -> Reply {
    let headers = req.headers();
    if !has_token(headers, header::UPGRADE, "websocket") || !has_token(headers, header::CONNECTION, "upgrade") {
        return reply(StatusCode::BAD_REQUEST, "a WebSocket upgrade is required\n");
    }
    let key = headers.get(header::SEC_WEBSOCKET_KEY).map(|k| k.as_bytes().to_vec()).unwrap_or_default();
    if headers.get(header::SEC_WEBSOCKET_VERSION).map(HeaderValue::as_bytes) != Some(b"13") || key.is_empty() {
        return reply(StatusCode::BAD_REQUEST, "WebSocket version 13 with a key is required\n");
    }
    let offered = tokens(headers, header::SEC_WEBSOCKET_PROTOCOL);
    let chosen = |ours: &[&'static str]| ours.iter().copied().find(|p| offered.iter().any(|o| o == p));
    // exec and attach: none offered is binary channels before v4, as kubelet's server takes it
    let channels = || if offered.is_empty() { Some("") } else { chosen(&remotecommand::PROTOCOLS) };
    let no_protocol = |ours: &[&str]| {
        reply(StatusCode::BAD_REQUEST, format!("no supported sub-protocol offered; rktlet speaks {ours:?}\n"))
    };
    match sreq {
        StreamRequest::Exec { container_id, cmd, tty, stdin, stdout, stderr } => {
            let Some(protocol) = channels() else {
                return no_protocol(&remotecommand::PROTOCOLS);
            };
            let app = match lookup(&rt, move |rt| rt.app_process(&container_id)).await {
                Ok(app) => app,
                Err(answer) => return answer,
            };
            let streams = Streams { tty, stdin, stdout, stderr };
            on_upgrade(&mut req, move |io| async move {
                let socket = ws::upgraded(io).await;
                remotecommand::serve_ws(socket, Framing::of(protocol), remotecommand::exec(app, cmd, streams)).await;
            });
            ws_switch(&key, protocol)
        }
        StreamRequest::PortForward { pod_id, ports } => {
            // no sub-protocol at all: kubelet's server takes that as binary channels too
            let protocol = match offered.is_empty() {
                true => Some(""),
                false => chosen(&portforward::WS_PROTOCOLS),
            };
            let Some(protocol) = protocol else {
                return no_protocol(&portforward::WS_PROTOCOLS);
            };
            // the ports to forward come from the URL (`?port=80&port=443`)
            let url_ports: Vec<u16> = req
                .uri()
                .query()
                .unwrap_or_default()
                .split('&')
                .filter_map(|kv| kv.strip_prefix("port="))
                .flat_map(|v| v.split(','))
                .filter_map(|p| p.parse().ok())
                .collect();
            if url_ports.is_empty() || url_ports.len() > portforward::MAX_WS_PORTS {
                let body = format!("name 1 to {} ports to forward: ?port=N\n", portforward::MAX_WS_PORTS);
                return reply(StatusCode::BAD_REQUEST, body);
            }
            let target = match pod_target(&rt, pod_id, ports).await {
                Ok(target) => target,
                Err(answer) => return answer,
            };
            on_upgrade(&mut req, move |io| async move {
                let socket = ws::upgraded(io).await;
                portforward::websocket(socket, Framing::of(protocol), target, url_ports).await;
            });
            ws_switch(&key, protocol)
        }
        StreamRequest::Attach { container_id, tty, stdin, stdout, stderr } => {
            let Some(protocol) = channels() else {
                return no_protocol(&remotecommand::PROTOCOLS);
            };
            let source = match lookup(&rt, move |rt| rt.attach_source(&container_id, stdin)).await {
                Ok(source) => source,
                Err(answer) => return answer,
            };
            let streams = Streams { tty, stdin, stdout, stderr };
            on_upgrade(&mut req, move |io| async move {
                let socket = ws::upgraded(io).await;
                remotecommand::serve_ws(socket, Framing::of(protocol), attach::attach(source, streams)).await;
            });
            ws_switch(&key, protocol)
        }
    }
}

/// The 101 answer to a SPDY/3.1 upgrade with `protocol` chosen.
fn spdy_switch(protocol: &'static str) -> Reply {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    h.insert("x-stream-protocol-version", HeaderValue::from_static(protocol));
    r
}

/// Completes a `Upgrade: SPDY/3.1` request: the stream protocol is chosen
/// from `X-Stream-Protocol-Version` (kubelet answers 403 without a match).
async fn spdy_upgrade<L: Lookup>(mut req: Request<Incoming>, sreq: StreamRequest, rt: Arc<L>) -> Reply {
    let offered = tokens(req.headers(), HeaderName::from_static("x-stream-protocol-version"));
    let refuse = |protocol: &str, how: &str| {
        reply(StatusCode::FORBIDDEN, format!("no supported stream protocol offered; rktlet speaks {protocol}{how}\n"))
    };
    match sreq {
        StreamRequest::Exec { container_id, cmd, tty, stdin, stdout, stderr } => {
            let protocol = remotecommand::SPDY_PROTOCOL;
            if !offered.iter().any(|o| o == protocol) {
                return refuse(protocol, " over SPDY");
            }
            let app = match lookup(&rt, move |rt| rt.app_process(&container_id)).await {
                Ok(app) => app,
                Err(answer) => return answer,
            };
            let streams = Streams { tty, stdin, stdout, stderr };
            on_upgrade(&mut req, move |io| async move {
                remotecommand::serve_spdy(TokioIo::new(io), streams, remotecommand::exec(app, cmd, streams)).await;
            });
            spdy_switch(protocol)
        }
        StreamRequest::PortForward { pod_id, ports } => {
            let protocol = portforward::SPDY_PROTOCOL;
            if !offered.iter().any(|o| o == protocol) {
                return refuse(protocol, "");
            }
            let target = match pod_target(&rt, pod_id, ports).await {
                Ok(target) => target,
                Err(answer) => return answer,
            };
            on_upgrade(&mut req, move |io| portforward::spdy(TokioIo::new(io), target));
            spdy_switch(protocol)
        }
        StreamRequest::Attach { container_id, tty, stdin, stdout, stderr } => {
            let protocol = remotecommand::SPDY_PROTOCOL;
            if !offered.iter().any(|o| o == protocol) {
                return refuse(protocol, " over SPDY");
            }
            let source = match lookup(&rt, move |rt| rt.attach_source(&container_id, stdin)).await {
                Ok(source) => source,
                Err(answer) => return answer,
            };
            let streams = Streams { tty, stdin, stdout, stderr };
            on_upgrade(&mut req, move |io| async move {
                remotecommand::serve_spdy(TokioIo::new(io), streams, attach::attach(source, streams)).await;
            });
            spdy_switch(protocol)
        }
    }
}
