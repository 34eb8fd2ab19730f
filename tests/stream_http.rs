//! The streaming server's HTTP side (hyper) and its WebSocket upgrade
//! (tokio-tungstenite), served in-process with lookups of our own instead
//! of a runtime: routing, single-use tokens, request checks and their
//! answers, request heads in pieces, too big or too slow, bytes sent right
//! after the head, and a WebSocket port-forward to a local echo server.

use futures::{SinkExt, StreamExt};
use rktlet::stream::attach;
use rktlet::stream::server::{self, HEAD_TIMEOUT, Lookup, MAX_HEAD, StreamServer};
use rktlet::stream::token::StreamRequest;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest, protocol::Role};

/// Containers are never running; pod `host` runs in the host's network.
#[derive(Default)]
struct Fake {
    streams: StreamServer,
}

impl Lookup for Fake {
    fn streams(&self) -> &StreamServer {
        &self.streams
    }
    fn app_process(&self, id: &str) -> Result<rktlet::stage1::exec::AppProcess, String> {
        Err(format!("container {id} is not running"))
    }
    fn attach_source(&self, id: &str, _stdin: bool) -> Result<attach::Source, String> {
        Err(format!("container {id} has no output to attach to"))
    }
    fn netns(&self, pod: &str) -> Result<Option<PathBuf>, String> {
        match pod {
            "host" => Ok(None),
            _ => Err(format!("pod {pod} is not running")),
        }
    }
}

async fn start() -> Arc<Fake> {
    let fake = Arc::new(Fake::default());
    let listener = server::bind("127.0.0.1:0".parse().expect("addr")).await.expect("bind");
    tokio::spawn(server::serve(listener, fake.clone()));
    for _ in 0..200 {
        if fake.streams.url(pf("host")).is_ok() {
            return fake;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the streaming server did not start");
}

fn exec() -> StreamRequest {
    StreamRequest::Exec {
        container_id: "c1".into(),
        cmd: vec!["true".into()],
        tty: false,
        stdin: false,
        stdout: true,
        stderr: true,
    }
}

fn pf(pod: &str) -> StreamRequest {
    StreamRequest::PortForward { pod_id: pod.into(), ports: vec![] }
}

/// `host:port` and path of a URL the server handed out.
fn split(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').expect("path");
    (host.to_string(), format!("/{path}"))
}

/// Sends `head` (in `pieces` of that many bytes, a pause between) and reads
/// the answer to the end: (status, headers lowercased, body).
async fn ask(host: &str, head: &str, pieces: usize) -> (u16, String, String) {
    let mut conn = TcpStream::connect(host).await.expect("connect");
    for chunk in head.as_bytes().chunks(pieces) {
        conn.write_all(chunk).await.expect("write");
        if pieces < head.len() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection after answering")
        .expect("read");
    parse(&String::from_utf8_lossy(&answer))
}

fn parse(answer: &str) -> (u16, String, String) {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn get(path: &str, headers: &[&str]) -> String {
    let mut h = format!("GET {path} HTTP/1.1\r\nHost: x\r\n");
    for l in headers {
        h.push_str(l);
        h.push_str("\r\n");
    }
    h + "\r\n"
}

const WS: [&str; 4] = [
    "Upgrade: websocket",
    "Connection: Upgrade",
    "Sec-WebSocket-Version: 13",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
];

#[tokio::test]
async fn requests_are_routed_and_checked_with_the_right_answers() {
    let fake = start().await;
    let url = |r| fake.streams.url(r).expect("url");
    let (host, _) = split(&url(exec()));

    let (status, head, body) = ask(&host, "PUT /exec/x HTTP/1.1\r\nHost: x\r\n\r\n", usize::MAX).await;
    assert_eq!((status, body.as_str()), (405, "use GET or POST\n"));
    assert!(head.contains("connection: close") && head.contains("content-type: text/plain"), "{head}");
    let (status, _, body) = ask(&host, &get("/logs/abc", &[]), usize::MAX).await;
    assert_eq!((status, body.as_str()), (404, "no such streaming endpoint\n"));
    let (status, _, body) = ask(&host, &get("/exec/not-a-token", &WS), usize::MAX).await;
    assert_eq!((status, body.as_str()), (404, "unknown or expired streaming token\n"));

    // a URL is used up by its first request, even one that fails
    let (_, path) = split(&url(exec()));
    let (status, _, body) = ask(&host, &get(&path, &[]), usize::MAX).await;
    assert_eq!((status, body.as_str()), (400, "a WebSocket upgrade is required\n"));
    let (status, _, body) = ask(&host, &get(&path, &WS), usize::MAX).await;
    assert_eq!((status, body.as_str()), (404, "unknown or expired streaming token\n"));
    // a token is for its own kind of URL only
    let (_, path) = split(&url(exec()));
    let (status, _, _) = ask(&host, &get(&path.replace("/exec/", "/attach/"), &WS), usize::MAX).await;
    assert_eq!(status, 404);

    let bad_version = ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 8", WS[3]];
    let no_key = ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13"];
    for headers in [&bad_version[..], &no_key[..]] {
        let (_, path) = split(&url(exec()));
        let (status, _, body) = ask(&host, &get(&path, headers), usize::MAX).await;
        assert_eq!((status, body.as_str()), (400, "WebSocket version 13 with a key is required\n"), "{headers:?}");
    }
    // sub-protocols: none of ours offered, then ours but no such container
    let (_, path) = split(&url(exec()));
    let offered = [&WS[..], &["Sec-WebSocket-Protocol: v3.channel.k8s.io"]].concat();
    let (status, _, body) = ask(&host, &get(&path, &offered), usize::MAX).await;
    assert_eq!(status, 400);
    assert!(body.starts_with("no supported sub-protocol offered") && body.contains("v5.channel.k8s.io"), "{body}");
    let (_, path) = split(&url(exec()));
    let offered =
        [&WS[..], &["Sec-WebSocket-Protocol: v3.channel.k8s.io", "Sec-WebSocket-Protocol: v4.channel.k8s.io"]].concat();
    let (status, _, body) = ask(&host, &get(&path, &offered), usize::MAX).await;
    assert_eq!((status, body.as_str()), (404, "container c1 is not running\n"));

    // SPDY: the stream protocol must be one of ours (403 as kubelet answers)
    let spdy = |version: &'static str| ["Connection: Upgrade", "Upgrade: SPDY/3.1", version];
    let (_, path) = split(&url(exec()));
    let (status, _, body) = ask(&host, &get(&path, &spdy("X-Stream-Protocol-Version: v2.channel.k8s.io")), 1).await;
    assert_eq!(status, 403);
    assert!(body.contains("v4.channel.k8s.io over SPDY"), "{body}");
    let (_, path) = split(&url(StreamRequest::Attach {
        container_id: "c2".into(),
        tty: false,
        stdin: true,
        stdout: true,
        stderr: false,
    }));
    let versions = "X-Stream-Protocol-Version: v5.channel.k8s.io, v4.channel.k8s.io";
    let (status, _, body) = ask(&host, &get(&path, &spdy(versions)), usize::MAX).await;
    assert_eq!((status, body.as_str()), (404, "container c2 has no output to attach to\n"));
    let (_, path) = split(&url(pf("gone")));
    let (status, _, body) =
        ask(&host, &get(&path, &spdy("X-Stream-Protocol-Version: portforward.k8s.io")), usize::MAX).await;
    assert_eq!((status, body.as_str()), (404, "pod gone is not running\n"));
    // a WebSocket port-forward names its ports in the URL
    let (_, path) = split(&url(pf("host")));
    let (status, _, body) = ask(&host, &get(&path, &WS), usize::MAX).await;
    assert_eq!((status, body.as_str()), (400, "name 1 to 64 ports to forward: ?port=N\n"));
}

#[tokio::test]
async fn a_request_head_in_pieces_is_read_whole() {
    let fake = start().await;
    let (host, path) = split(&fake.streams.url(exec()).expect("url"));
    let offered = [&WS[..], &["Sec-WebSocket-Protocol: v5.channel.k8s.io"]].concat();
    // one byte at a time, and the lines cut anywhere
    let (status, _, body) = ask(&host, &get(&path, &offered), 1).await;
    assert_eq!((status, body.as_str()), (404, "container c1 is not running\n"));
    let (_, path) = split(&fake.streams.url(exec()).expect("url"));
    let (status, _, body) = ask(&host, &get(&path, &offered), 7).await;
    assert_eq!((status, body.as_str()), (404, "container c1 is not running\n"));
}

#[tokio::test]
async fn a_request_head_too_big_is_refused_and_one_under_the_cap_is_served() {
    let fake = start().await;
    let (host, path) = split(&fake.streams.url(exec()).expect("url"));
    let padding = format!("X-Padding: {}", "a".repeat(MAX_HEAD));
    let (status, _, _) = ask(&host, &get(&path, &[&padding]), usize::MAX).await;
    assert_eq!(status, 431, "request header fields too large");
    // not parsed, so its token is still there
    let padding = format!("X-Padding: {}", "a".repeat(MAX_HEAD / 2));
    let (status, _, body) = ask(&host, &get(&path, &[&padding]), usize::MAX).await;
    assert_eq!((status, body.as_str()), (400, "a WebSocket upgrade is required\n"));
}

/// An echo server on loopback: its port.
async fn echo() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn port_forward_over_websocket_with_each_sub_protocol() {
    let fake = start().await;
    let port = echo().await;
    let le = port.to_le_bytes();
    for protocol in ["v4.channel.k8s.io", "portforward.k8s.io", ""] {
        let url = fake.streams.url(pf("host")).expect("url").replace("http://", "ws://");
        let mut req = format!("{url}?port={port}").into_client_request().expect("request");
        if !protocol.is_empty() {
            req.headers_mut().insert("Sec-WebSocket-Protocol", protocol.parse().expect("header"));
        }
        // tungstenite checks Sec-WebSocket-Accept
        let (mut ws, resp) = tokio_tungstenite::connect_async(req).await.expect("upgrade");
        let chosen = resp.headers().get("Sec-WebSocket-Protocol").and_then(|v| v.to_str().ok());
        assert_eq!(chosen.unwrap_or(""), protocol, "a client that offers none is answered none");
        let mut next = async || ws.next().await.expect("a message").expect("a frame");
        assert_eq!(next().await, Message::binary(vec![0, le[0], le[1]]), "{protocol}");
        assert_eq!(next().await, Message::binary(vec![1, le[0], le[1]]), "{protocol}");
        ws.send(Message::Ping(b"are you there".to_vec().into())).await.expect("ping");
        assert_eq!(ws.next().await.expect("a message").expect("pong"), Message::Pong(b"are you there".to_vec().into()));
        ws.send(Message::binary(b"\x00hello".to_vec())).await.expect("send");
        assert_eq!(ws.next().await.expect("a message").expect("echo"), Message::binary(b"\x00hello".to_vec()));
        ws.close(None).await.expect("close");
        while let Some(Ok(m)) = ws.next().await {
            assert!(matches!(m, Message::Close(_)), "{m:?}");
        }
    }
}

#[tokio::test]
async fn bytes_sent_right_after_the_head_reach_the_session() {
    let fake = start().await;
    let port = echo().await;
    let (host, path) = split(&fake.streams.url(pf("host")).expect("url"));
    let offered = [&WS[..], &["Sec-WebSocket-Protocol: v4.base64.channel.k8s.io"]].concat();
    let mut bytes = get(&format!("{path}?port={port}"), &offered).into_bytes();
    // a masked text frame: channel 0, "hello" in base64
    let payload = b"0aGVsbG8=";
    let mask = [9u8, 8, 7, 6];
    bytes.extend([0x81, 0x80 | payload.len() as u8]);
    bytes.extend(mask);
    bytes.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    let mut conn = TcpStream::connect(&host).await.expect("connect");
    conn.write_all(&bytes).await.expect("request and frame in one write");
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        answer.push(conn.read_u8().await.expect("the answer"));
    }
    let (status, head, _) = parse(&String::from_utf8_lossy(&answer));
    assert_eq!(status, 101, "{head}");
    assert!(head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="), "the RFC's example: {head}");
    assert!(head.contains("sec-websocket-protocol: v4.base64.channel.k8s.io"), "{head}");
    let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(conn, Role::Client, None).await;
    let mut texts = Vec::new();
    while texts.len() < 3 {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => texts.push(t.to_string()),
            other => panic!("{other:?} after {texts:?}"),
        }
    }
    use base64::Engine;
    let port64 = base64::engine::general_purpose::STANDARD.encode(port.to_le_bytes());
    assert_eq!(texts, [format!("0{port64}"), format!("1{port64}"), "0aGVsbG8=".to_string()]);
}

#[tokio::test]
async fn a_slow_request_head_is_answered_but_a_long_session_is_not_cut() {
    let fake = start().await;
    let port = echo().await;
    let (host, path) = split(&fake.streams.url(exec()).expect("url"));
    let url = fake.streams.url(pf("host")).expect("url").replace("http://", "ws://");
    let slow = async {
        let started = Instant::now();
        let mut conn = TcpStream::connect(&host).await.expect("connect");
        conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n").as_bytes()).await.expect("write");
        let mut answer = Vec::new();
        tokio::time::timeout(HEAD_TIMEOUT + Duration::from_secs(10), conn.read_to_end(&mut answer))
            .await
            .expect("answered")
            .expect("read");
        (started.elapsed(), parse(&String::from_utf8_lossy(&answer)))
    };
    let long = async {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("{url}?port={port}")).await.expect("upgrade");
        let _ = (ws.next().await, ws.next().await);
        tokio::time::sleep(HEAD_TIMEOUT + Duration::from_secs(1)).await;
        ws.send(Message::binary(b"\x00still here".to_vec())).await.expect("send");
        ws.next().await.expect("a message").expect("echo")
    };
    let ((took, (status, _, body)), echoed) = tokio::join!(slow, long);
    assert_eq!((status, body.as_str()), (400, "request head not received in time\n"));
    assert!(took >= HEAD_TIMEOUT - Duration::from_millis(50), "answered after {took:?}");
    assert_eq!(echoed, Message::binary(b"\x00still here".to_vec()));
}
