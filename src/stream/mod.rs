//! The streaming server for Exec, Attach and PortForward.
//!
//! Not built yet (issue 7); those RPCs answer UNIMPLEMENTED meanwhile.
//! `log` is the per-pod CRI log writer containers use.

pub mod log;
