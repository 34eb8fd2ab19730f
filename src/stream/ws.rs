//! WebSocket (RFC 6455) for the streaming server, on tokio-tungstenite: the
//! `Sec-WebSocket-Accept` of the 101 answer hyper sends, and the socket
//! over the connection hyper hands back after the upgrade. Frames, masking,
//! fragments, pings and the closing handshake are tungstenite's; the
//! Kubernetes channel framing on top is `remotecommand::Framing`.

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// Largest message (and frame) accepted from a client: stdin chunks,
/// resize events, port-forward data.
pub(crate) const MAX_MESSAGE: usize = 16 << 20;

/// A WebSocket over an upgraded streaming connection.
pub(crate) type Socket = WebSocketStream<TokioIo<Upgraded>>;

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub(crate) fn accept_key(key: &[u8]) -> String {
    tokio_tungstenite::tungstenite::handshake::derive_accept_key(key)
}

/// The server side of a WebSocket over `io`, whose handshake is done.
pub(crate) async fn server<S: AsyncRead + AsyncWrite + Unpin>(io: S) -> WebSocketStream<S> {
    let config = WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE)).max_frame_size(Some(MAX_MESSAGE));
    WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await
}

/// The server side of a WebSocket over a connection hyper upgraded.
pub(crate) async fn upgraded(io: Upgraded) -> Socket {
    server(TokioIo::new(io)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_matches_the_rfc_example() {
        assert_eq!(accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }
}
