//! The streaming server for Exec, Attach and PortForward: `server` (HTTP/1.1
//! on hyper: routing, upgrades), `token` (single-use expiring URLs), `ws`
//! (WebSocket on tokio-tungstenite), `spdy`
//! (SPDY/3.1), `remotecommand` (the Kubernetes stream protocol; exec),
//! `attach` (a container's output followed from its log), `portforward`.
//! The per-pod CRI log writer they read is `stage1::crilog`.

pub mod attach;
pub(crate) mod portforward;
pub(crate) mod remotecommand;
pub mod server;
pub mod spdy;
pub mod token;
pub(crate) mod ws;
