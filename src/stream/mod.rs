//! The streaming server for Exec and PortForward (Attach to come: it
//! answers UNIMPLEMENTED meanwhile): `server` (HTTP, routing), `token`
//! (single-use expiring URLs), `ws` (WebSocket), `spdy` (SPDY/3.1),
//! `remotecommand` (the Kubernetes stream protocol for exec),
//! `portforward`. `log` is the per-pod CRI log writer containers use.

pub mod log;
pub mod portforward;
pub mod remotecommand;
pub mod server;
pub mod spdy;
pub mod token;
pub mod ws;
