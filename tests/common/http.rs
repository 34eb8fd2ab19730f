//! One HTTP/1.1 request read from a connection, for the tests' own small
//! servers (a registry that misbehaves, a discovery site).

use tokio::io::AsyncReadExt;

pub struct Request {
    /// `GET /path?query HTTP/1.1`
    pub line: String,
    head: String,
    pub body: Vec<u8>,
}

impl Request {
    /// The request target without its query string.
    pub fn path(&self) -> &str {
        let target = self.line.split_whitespace().nth(1).unwrap_or("/");
        target.split('?').next().unwrap_or("/")
    }

    /// A header's value (name case-insensitive), empty when absent.
    pub fn header(&self, name: &str) -> String {
        self.head
            .lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim().eq_ignore_ascii_case(name)))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default()
    }
}

/// Reads the head and a `Content-Length` body; None if the peer went away.
pub async fn read_request(conn: &mut tokio::net::TcpStream) -> Option<Request> {
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(at) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&req[..end]).into_owned();
    let mut body = req[end + 4..].to_vec();
    let line = head.lines().next().unwrap_or_default().to_string();
    let mut r = Request { line, head, body: Vec::new() };
    let length: usize = r.header("content-length").parse().unwrap_or(0);
    while body.len() < length {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    r.body = body;
    Some(r)
}
