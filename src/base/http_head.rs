//! The head of an HTTP/1.1 request, read whole however the client's bytes
//! are segmented, for the metrics listener (the streaming server's HTTP is
//! hyper's).

use std::collections::HashMap;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest request head accepted.
pub const MAX_HEAD: usize = 16 << 10;

/// A parsed request head.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    pub path: String,
    /// Header names lowercased; repeated headers joined with ", ".
    pub headers: HashMap<String, String>,
}

impl Head {
    pub fn parse(text: &str) -> Option<Head> {
        let mut lines = text.split("\r\n");
        let mut first = lines.next()?.split(' ');
        let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
        let mut headers: HashMap<String, String> = HashMap::new();
        for l in lines.take_while(|l| !l.is_empty()) {
            let (k, v) = l.split_once(':')?;
            let e = headers.entry(k.trim().to_ascii_lowercase()).or_default();
            if !e.is_empty() {
                e.push_str(", ");
            }
            e.push_str(v.trim());
        }
        Some(Head { method, path, headers })
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }

    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.header(name).split(',').any(|t| t.trim().eq_ignore_ascii_case(token))
    }
}

/// Reads up to the blank line that ends the head (at most [`MAX_HEAD`]
/// bytes); `None` when the connection ends first, the head is too long or
/// does not parse. Byte by byte: nothing after the head is consumed (after
/// an upgrade it is the client's first frame). The caller bounds the time.
pub async fn read_head(conn: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Option<Head>> {
    let mut buf = Vec::with_capacity(1024);
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if buf.len() >= MAX_HEAD || conn.read(&mut byte).await? == 0 {
            return Ok(None);
        }
        buf.push(byte[0]);
    }
    Ok(Head::parse(&String::from_utf8_lossy(&buf)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn heads_parse_with_repeated_and_odd_headers() {
        let h = Head::parse(
            "GET /exec/abc?x=1 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\
             Sec-WebSocket-Protocol: v4.channel.k8s.io\r\nsec-websocket-protocol: v5.channel.k8s.io\r\n\r\n",
        )
        .expect("parse");
        assert_eq!((h.method.as_str(), h.path.as_str()), ("GET", "/exec/abc?x=1"));
        assert!(h.has_token("connection", "upgrade"));
        assert!(h.has_token("upgrade", "WebSocket"));
        assert_eq!(h.header("sec-websocket-protocol"), "v4.channel.k8s.io, v5.channel.k8s.io");
        assert_eq!(Head::parse("garbage"), None);
    }

    #[tokio::test]
    async fn a_head_in_many_segments_is_read_whole_and_nothing_after_it() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            for part in ["GE", "T /met", "rics HTTP/1.1\r\nHo", "st: x\r\n", "\r\n", "NEXT"] {
                client.write_all(part.as_bytes()).await.expect("write");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            client
        });
        let head = read_head(&mut server).await.expect("read").expect("a head");
        assert_eq!((head.method.as_str(), head.path.as_str(), head.header("host")), ("GET", "/metrics", "x"));
        let _client = writer.await.expect("writer");
        let mut rest = [0u8; 4];
        server.read_exact(&mut rest).await.expect("the bytes after the head");
        assert_eq!(&rest, b"NEXT");
    }

    #[tokio::test]
    async fn a_head_cut_short_or_too_long_is_none() {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        client.write_all(b"GET / HTTP/1.1\r\n").await.expect("write");
        drop(client);
        assert_eq!(read_head(&mut server).await.expect("read"), None);
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        client.write_all(&vec![b'a'; MAX_HEAD + 10]).await.expect("write");
        assert_eq!(read_head(&mut server).await.expect("read"), None);
    }
}
