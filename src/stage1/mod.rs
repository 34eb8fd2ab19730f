//! stage1: launching a pod's sandbox (the one exec: `systemd-nspawn --boot`
//! with systemd as the pod's PID 1) and talking to the pod's systemd.
//!
//! What the host offers decides how the sandbox is supervised: under
//! `systemd-run` when the host's PID 1 is systemd, detached by the daemon
//! otherwise (containers, CI).

pub mod api_vfs;
pub mod app;
pub mod bus;
pub mod caps;
pub mod exec;
pub mod host;
pub mod inject;
pub mod launch;
pub mod nspawn;
pub mod pty;
pub mod rootfs;
pub mod sandbox;
pub mod seccomp;
pub mod stop;
pub mod teardown;
