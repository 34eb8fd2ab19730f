//! The streaming server for Exec (Attach and PortForward to come: they
//! answer UNIMPLEMENTED meanwhile): `server` (HTTP, routing), `token`
//! (single-use expiring URLs), `ws` (WebSocket), `remotecommand` (the
//! Kubernetes channel protocol for exec). `log` is the per-pod CRI log
//! writer containers use.

pub mod log;
pub mod remotecommand;
pub mod server;
pub mod spdy;
pub mod token;
pub mod ws;
