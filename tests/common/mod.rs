//! Shared helpers for integration tests: start the real `rktlet` binary on a
//! temporary socket and talk to it with a tonic client over that socket.
#![allow(dead_code)]

use rktlet::proto::v1::image_service_client::ImageServiceClient;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

pub const BIN: &str = env!("CARGO_BIN_EXE_rktlet");

/// A `rktlet serve` process with its own socket and data dir.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts `rktlet serve` with a temporary socket, data dir and CNI conf dir,
    /// plus `extra` flags, and waits until the socket accepts connections.
    pub fn start(extra: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("run/rktlet.sock");
        let child = Self::spawn(&socket, dir.path(), extra);
        let mut d = Daemon { child, socket, dir };
        d.wait_ready();
        d
    }

    pub fn spawn(socket: &Path, dir: &Path, extra: &[&str]) -> Child {
        Command::new(BIN)
            .arg("serve")
            .arg("--socket")
            .arg(socket)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--cni-conf-dir")
            .arg(dir.join("net.d"))
            .args(extra)
            .env("RUST_LOG", "rktlet=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rktlet serve")
    }

    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("rktlet exited early with {status}: {}", stderr_of(&mut self.child));
            }
            assert!(Instant::now() < deadline, "rktlet did not listen on {} in 20s", self.socket.display());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub async fn runtime(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(channel(&self.socket).await)
    }

    pub async fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(channel(&self.socket).await)
    }

    /// Sends `signal` and waits for the process to exit.
    pub fn signal_and_wait(&mut self, signal: nix::sys::signal::Signal) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("kill");
        wait_timeout(&mut self.child, Duration::from_secs(20)).expect("rktlet did not exit within 20s")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A gRPC channel over a unix socket.
pub async fn channel(socket: &Path) -> Channel {
    rktlet::client::channel(socket).await.expect("connect over unix socket")
}

pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

pub fn stderr_of(child: &mut Child) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}
pub mod registry;
