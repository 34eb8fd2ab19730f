//! WebSocket (RFC 6455) for the streaming server: the server side of the
//! opening handshake, and frames (client frames masked, ours not; fragments
//! reassembled; ping answered; close echoed). Written here because the
//! protocol part the server needs is small and the Kubernetes channel
//! protocols sit directly on frames.

use sha1::Digest;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest message accepted from a client (stdin chunks, resize events).
pub const MAX_MESSAGE: usize = 16 << 20;
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

pub const OP_CONTINUATION: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

#[derive(Debug, thiserror::Error)]
pub enum WsError {
    #[error("websocket: {0}")]
    Protocol(String),
    #[error("websocket: {0}")]
    Io(#[from] std::io::Error),
}

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    use base64::Engine;
    let mut h = sha1::Sha1::new();
    h.update(key.trim().as_bytes());
    h.update(ACCEPT_GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// The 101 response that completes the handshake with `protocol` chosen.
pub fn handshake_response(key: &str, protocol: &str) -> String {
    // a client that offered no sub-protocol must not be answered one
    let chosen = if protocol.is_empty() { String::new() } else { format!("Sec-WebSocket-Protocol: {protocol}\r\n") };
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n{chosen}\r\n",
        accept_key(key)
    )
}

/// One complete message (or control frame) from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub opcode: u8,
    pub payload: Vec<u8>,
}

/// Reads one frame: (fin, opcode, unmasked payload).
async fn read_frame(r: &mut (impl AsyncRead + Unpin)) -> Result<(bool, u8, Vec<u8>), WsError> {
    let mut head = [0u8; 2];
    r.read_exact(&mut head).await?;
    let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0F);
    if head[0] & 0x70 != 0 {
        return Err(WsError::Protocol("reserved bits set (no extension was negotiated)".into()));
    }
    if head[1] & 0x80 == 0 {
        return Err(WsError::Protocol("client frame is not masked".into()));
    }
    let len = match head[1] & 0x7F {
        126 => u64::from(r.read_u16().await?),
        127 => r.read_u64().await?,
        n => u64::from(n),
    };
    if len > MAX_MESSAGE as u64 {
        return Err(WsError::Protocol(format!("frame of {len} bytes is over the limit")));
    }
    let mut mask = [0u8; 4];
    r.read_exact(&mut mask).await?;
    // read what arrives (not a buffer of the declared size up front)
    let mut payload = Vec::with_capacity((len as usize).min(64 << 10));
    (&mut *r).take(len).read_to_end(&mut payload).await?;
    if payload.len() as u64 != len {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
    Ok((fin, opcode, payload))
}

/// Reads the next message, reassembling fragments; control frames in
/// between are returned as they come. `None` at a clean end of stream.
pub async fn read_message(r: &mut (impl AsyncRead + Unpin)) -> Result<Option<Message>, WsError> {
    let (fin, opcode, mut payload) = match read_frame(r).await {
        Ok(f) => f,
        Err(WsError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    };
    if opcode >= OP_CLOSE {
        if !fin || payload.len() > 125 {
            return Err(WsError::Protocol("fragmented or oversized control frame".into()));
        }
        return Ok(Some(Message { opcode, payload }));
    }
    if opcode == OP_CONTINUATION {
        return Err(WsError::Protocol("continuation frame without a start".into()));
    }
    let mut done = fin;
    while !done {
        let (fin, op, more) = read_frame(r).await?;
        // control frames may come between fragments: a close ends the
        // connection, pings and pongs are dropped (the client pings again)
        if op == OP_CLOSE {
            return Ok(Some(Message { opcode: op, payload: more }));
        }
        if op >= OP_CLOSE {
            continue;
        }
        if op != OP_CONTINUATION {
            return Err(WsError::Protocol("interleaved data frames are not allowed".into()));
        }
        if payload.len() + more.len() > MAX_MESSAGE {
            return Err(WsError::Protocol("message over the limit".into()));
        }
        payload.extend_from_slice(&more);
        done = fin;
    }
    Ok(Some(Message { opcode, payload }))
}

/// Writes one unmasked, unfragmented frame.
pub async fn write_frame(w: &mut (impl AsyncWrite + Unpin), opcode: u8, payload: &[u8]) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(10 + payload.len());
    head.push(0x80 | opcode);
    match payload.len() {
        n if n < 126 => head.push(n as u8),
        n if n <= u16::MAX as usize => {
            head.push(126);
            head.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            head.push(127);
            head.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    head.extend_from_slice(payload);
    w.write_all(&head).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_matches_the_rfc_example() {
        assert_eq!(accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    fn masked(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1u8, 2, 3, 4];
        let mut f = vec![(if fin { 0x80 } else { 0 }) | opcode];
        if payload.len() < 126 {
            f.push(0x80 | payload.len() as u8);
        } else {
            f.push(0x80 | 126);
            f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        }
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    #[tokio::test]
    async fn fragments_are_joined_and_pings_pass_through() {
        let big = vec![7u8; 300];
        let mut bytes = masked(false, OP_BINARY, b"ab");
        bytes.extend(masked(true, OP_PING, b"p"));
        bytes.extend(masked(true, OP_CONTINUATION, b"cd"));
        bytes.extend(masked(true, OP_TEXT, &big));
        let mut r = bytes.as_slice();
        assert_eq!(
            read_message(&mut r).await.ok().flatten(),
            Some(Message { opcode: OP_BINARY, payload: b"abcd".to_vec() }),
            "fragments joined across a ping"
        );
        assert_eq!(read_message(&mut r).await.ok().flatten(), Some(Message { opcode: OP_TEXT, payload: big.clone() }));
        let mut r = masked(true, OP_TEXT, &big);
        let mut s = r.as_slice();
        assert_eq!(read_message(&mut s).await.ok().flatten(), Some(Message { opcode: OP_TEXT, payload: big }));
        r = masked(true, OP_BINARY, b"x");
        r[1] &= 0x7F; // unmasked
        assert!(read_message(&mut r.as_slice()).await.is_err());
        assert_eq!(read_message(&mut [].as_slice()).await.ok().flatten(), None);
    }

    #[tokio::test]
    async fn frames_are_written_with_the_right_length_encoding() {
        for n in [0usize, 125, 126, 70_000] {
            let mut out = Vec::new();
            write_frame(&mut out, OP_BINARY, &vec![1u8; n]).await.expect("write");
            let head = match n {
                n if n < 126 => 2,
                n if n <= 65535 => 4,
                _ => 10,
            };
            assert_eq!(out.len(), head + n);
            assert_eq!(out[0], 0x82);
        }
    }
}
