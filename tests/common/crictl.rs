//! The official crictl (cri-tools v1.29.0, whose CRI client is kubelet
//! 1.29's: it sends the socket path as the HTTP/2 `:authority`). `CRICTL`
//! names a binary; otherwise the copy shipped xz-compressed in the shared
//! tools (`../shared/tools/cri-tools/crictl.xz` beside the project) is
//! unpacked once under the target dir. A test that needs it fails when
//! neither is there.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The crictl binary.
pub fn binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(path) = std::env::var_os("CRICTL") {
            return PathBuf::from(path);
        }
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/cri-tools/crictl.xz");
        let dest = Path::new(env!("CARGO_TARGET_TMPDIR")).join("crictl-v1.29.0");
        if !dest.exists() {
            assert!(shipped.exists(), "crictl not found: set CRICTL=path or provide {}", shipped.display());
            let out = Command::new("xz").arg("-dc").arg(&shipped).output().expect("xz");
            assert!(out.status.success(), "unpacking {}", shipped.display());
            let tmp = dest.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, &out.stdout).expect("write crictl");
            std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
            std::fs::rename(&tmp, &dest).expect("rename crictl");
        }
        dest
    })
}

/// Runs crictl against `socket` (both services) with `args`.
pub fn run(socket: &Path, args: &[&str]) -> Output {
    let endpoint = format!("unix://{}", socket.display());
    Command::new(binary())
        .args(["--runtime-endpoint", &endpoint, "--image-endpoint", &endpoint, "--timeout", "60s"])
        .args(args)
        .output()
        .expect("run crictl")
}

/// Runs crictl and returns its stdout; panics with its output when it fails.
pub fn ok(socket: &Path, args: &[&str]) -> String {
    let out = run(socket, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "crictl {} failed: {}\n{stdout}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
