//! A booted pod without a daemon: the repo's own `rktlet app sandbox` boots
//! systemd in nspawn on the host network, and a static busybox is installed
//! as the rootfs of app `app1`. For tests and benches of the pod's bus.

use super::BIN;
use rktlet::stage1::bus::{ExecCommand, ServiceSpec};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const APPLETS: [&str; 9] = ["sh", "sleep", "echo", "cat", "true", "false", "ls", "kill", "id"];

/// A booted pod, removed on drop (also when a test fails).
pub struct TestPod {
    dir: tempfile::TempDir,
    uuid: String,
    sandbox: Option<std::process::Child>,
}

impl TestPod {
    pub fn boot() -> TestPod {
        let dir = tempfile::tempdir().expect("tempdir");
        let uuid = uuid::Uuid::new_v4().to_string();
        let mut cmd = Command::new(BIN);
        cmd.arg("--dir")
            .arg(dir.path())
            .args(["app", "sandbox", "--net=host", "--hostname=t"])
            .arg(format!("--uuid={uuid}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setsid(2) in the forked child before exec; async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                Ok(())
            })
        };
        let child = cmd.spawn().expect("spawn rktlet app sandbox");
        let mut pod = TestPod { dir, uuid, sandbox: Some(child) };
        pod.wait_ready();
        pod.install_busybox("app1");
        pod
    }

    pub fn pod_dir(&self) -> PathBuf {
        self.dir.path().join("pods/run").join(&self.uuid)
    }

    pub fn rootfs(&self) -> PathBuf {
        self.pod_dir().join("stage1/rootfs")
    }

    pub fn wait_ready(&mut self) {
        let link = self.rootfs().join("rkt/supervisor-status");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_link(&link).map(|t| t != Path::new("ready")).unwrap_or(true) {
            if let Some(child) = self.sandbox.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("pod exited before it was ready: {status}");
            }
            assert!(Instant::now() < deadline, "pod not ready in 30s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn pid1(&self) -> i32 {
        let ppid: i32 =
            std::fs::read_to_string(self.pod_dir().join("ppid")).expect("ppid").trim().parse().expect("pid");
        rktlet::stage1::inject::pod_pid1(ppid).expect("pod pid 1")
    }

    /// A static busybox as the rootfs of `app` (`/opt/stage2/<app>/rootfs`).
    pub fn install_busybox(&self, app: &str) {
        let root = self.rootfs().join("opt/stage2").join(app).join("rootfs");
        for d in ["bin", "usr", "proc", "sys", "dev", "tmp", "etc"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::copy("/bin/busybox", root.join("bin/busybox")).expect("copy busybox (apt busybox-static)");
        for a in APPLETS {
            symlink("busybox", root.join("bin").join(a)).expect("symlink");
        }
    }
}

impl Drop for TestPod {
    fn drop(&mut self) {
        let _ = Command::new(BIN).arg("--dir").arg(self.dir.path()).arg("rm").arg(&self.uuid).status();
        if let Some(mut c) = self.sandbox.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn sh(name: &str, script: &str) -> ServiceSpec {
    let mut spec = ServiceSpec::new(name, ExecCommand::new("/bin/sh", ["-c", script]));
    spec.root_directory = Some("/opt/stage2/app1/rootfs".into());
    spec
}
