//! AppArmor on a host that enforces it (Debian's and Ubuntu's nodes): every
//! container but a privileged or unconfined one runs under a profile, the
//! runtime's default unless one is named, and so does every command exec'd
//! into it. `scripts/node-lane.sh vm` runs these inside the node VM (its
//! kernel enables AppArmor; the lane installs apparmor_parser); on a host
//! without AppArmor each test prints one `SKIPPED:` line, and the one check
//! that applies there (a named profile is refused) runs.
mod common;

use common::{Daemon, container_config, exec_sync, host_network, pod_config};
use rktlet::proto::v1 as cri;
use rktlet::proto::v1::runtime_service_client::RuntimeServiceClient;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A profile that denies every write, loaded by the test (as critest loads its own).
const DENY_WRITE: &str = "rktlet-test-deny-write";

/// Why this host cannot run the suite, if it cannot.
fn no_apparmor() -> Option<String> {
    let enabled = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled").is_ok_and(|s| s.starts_with('Y'))
        && std::path::Path::new("/sys/kernel/security/apparmor/profiles").exists();
    if !enabled {
        return Some("AppArmor is not enabled on this host".into());
    }
    if !["/sbin/apparmor_parser", "/usr/sbin/apparmor_parser"].iter().any(|p| std::path::Path::new(p).exists()) {
        return Some("AppArmor is enabled but apparmor_parser is not installed".into());
    }
    None
}

macro_rules! apparmor_only {
    ($name:expr) => {
        if let Some(reason) = no_apparmor() {
            common::skipped(concat!("apparmor::", $name), &reason);
            return;
        }
    };
}

struct Env {
    _d: Daemon,
    rt: RuntimeServiceClient<Channel>,
    image: String,
    pod: String,
    pod_config: cri::PodSandboxConfig,
    _logs: tempfile::TempDir,
}

async fn env(name: &str) -> Env {
    let d = Daemon::start(&[]);
    let image = common::pull_busybox(&d).await;
    let mut rt = d.runtime().await;
    let logs = tempfile::tempdir().expect("logs");
    let mut pod_config = host_network(pod_config(name, &[]));
    pod_config.log_directory = logs.path().display().to_string();
    let pod = common::run_pod(&mut rt, &pod_config).await;
    Env { _d: d, rt, image, pod, pod_config, _logs: logs }
}

fn with_apparmor(
    mut config: cri::ContainerConfig,
    profile: Option<cri::SecurityProfile>,
    privileged: bool,
) -> cri::ContainerConfig {
    let sc = config.linux.as_mut().and_then(|l| l.security_context.as_mut()).expect("security context");
    sc.apparmor = profile;
    sc.privileged = privileged;
    config
}

fn profile(kind: cri::security_profile::ProfileType, name: &str) -> Option<cri::SecurityProfile> {
    Some(cri::SecurityProfile { profile_type: kind as i32, localhost_ref: name.into() })
}

impl Env {
    async fn create(&mut self, config: cri::ContainerConfig) -> Result<String, tonic::Status> {
        self.rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: self.pod.clone(),
                config: Some(config),
                sandbox_config: Some(self.pod_config.clone()),
            })
            .await
            .map(|r| r.into_inner().container_id)
    }

    async fn start(&mut self, config: cri::ContainerConfig) -> String {
        let id = self.create(config).await.expect("CreateContainer");
        self.rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("StartContainer");
        id
    }

    async fn exited(&mut self, id: &str) -> cri::ContainerStatus {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self
                .rt
                .container_status(cri::ContainerStatusRequest { container_id: id.into(), verbose: false })
                .await
                .expect("ContainerStatus")
                .into_inner()
                .status
                .expect("status");
            if s.state == cri::ContainerState::ContainerExited as i32 {
                return s;
            }
            assert!(Instant::now() < deadline, "{id} still {:?} after 60 s", s.state);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The label the container's main process and an exec'd command run under.
    async fn labels(&mut self, id: &str) -> (String, String) {
        let main = exec_sync(&mut self.rt, id, &["cat", "/proc/1/attr/apparmor/current"]).await;
        let own = exec_sync(&mut self.rt, id, &["cat", "/proc/self/attr/apparmor/current"]).await;
        assert_eq!(main.exit_code, 0, "{}", String::from_utf8_lossy(&main.stderr));
        assert_eq!(own.exit_code, 0, "{}", String::from_utf8_lossy(&own.stderr));
        let text =
            |b: &[u8]| String::from_utf8_lossy(b).trim_matches(|c: char| c.is_whitespace() || c == '\0').to_string();
        (text(&main.stdout), text(&own.stdout))
    }
}

fn load_deny_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("profile");
    std::fs::write(&file, format!("profile {DENY_WRITE} flags=(attach_disconnected) {{\n  file,\n  deny /** w,\n}}\n"))
        .expect("write profile");
    let parser = ["/sbin/apparmor_parser", "/usr/sbin/apparmor_parser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("apparmor_parser");
    let out = std::process::Command::new(parser).arg("-Kr").arg(&file).output().expect("apparmor_parser");
    assert!(out.status.success(), "loading the test profile: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread")]
async fn default_profile_confines_the_app_and_its_execs() {
    apparmor_only!("default_profile_confines_the_app_and_its_execs");
    let mut e = env("aa-default").await;
    let image = e.image.clone();
    // nothing asked: the runtime's default, as containerd applies its own
    let id = e.start(container_config("plain", &image, &["sleep", "300"])).await;
    assert_eq!(e.labels(&id).await, ("rktlet-default (enforce)".into(), "rktlet-default (enforce)".into()));
    // asked by name
    let asked = with_apparmor(
        container_config("asked", &image, &["sleep", "300"]),
        profile(cri::security_profile::ProfileType::RuntimeDefault, ""),
        false,
    );
    let id = e.start(asked).await;
    assert_eq!(e.labels(&id).await.1, "rktlet-default (enforce)");
    // what the default denies: mounts, even to a container given
    // CAP_SYS_ADMIN (the same container unconfined mounts: the control)
    for (name, kind, allowed) in [
        ("admin-default", cri::security_profile::ProfileType::RuntimeDefault, false),
        ("admin-unconfined", cri::security_profile::ProfileType::Unconfined, true),
    ] {
        let mut config = with_apparmor(container_config(name, &image, &["sleep", "300"]), profile(kind, ""), false);
        let sc = config.linux.as_mut().and_then(|l| l.security_context.as_mut()).expect("sc");
        sc.capabilities = Some(cri::Capability { add_capabilities: vec!["SYS_ADMIN".into()], ..Default::default() });
        let id = e.start(config).await;
        let mount = exec_sync(&mut e.rt, &id, &["mount", "-t", "tmpfs", "aa-test", "/tmp"]).await;
        let err = String::from_utf8_lossy(&mount.stderr);
        assert_eq!(mount.exit_code == 0, allowed, "{name}: mount: {err}");
        assert!(allowed || err.contains("Permission denied"), "{name}: mount failed otherwise: {err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn unconfined_and_privileged_containers_run_unconfined() {
    apparmor_only!("unconfined_and_privileged_containers_run_unconfined");
    let mut e = env("aa-unconfined").await;
    let image = e.image.clone();
    let unconfined = with_apparmor(
        container_config("unconfined", &image, &["sleep", "300"]),
        profile(cri::security_profile::ProfileType::Unconfined, ""),
        false,
    );
    let id = e.start(unconfined).await;
    assert_eq!(e.labels(&id).await, ("unconfined".into(), "unconfined".into()));
    let privileged = with_apparmor(container_config("privileged", &image, &["sleep", "300"]), None, true);
    let id = e.start(privileged).await;
    assert_eq!(e.labels(&id).await, ("unconfined".into(), "unconfined".into()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_named_profile_is_enforced_on_the_app_and_its_execs() {
    apparmor_only!("a_named_profile_is_enforced_on_the_app_and_its_execs");
    load_deny_write();
    let mut e = env("aa-named").await;
    let image = e.image.clone();
    let local = || profile(cri::security_profile::ProfileType::Localhost, DENY_WRITE);
    // the app itself cannot write (critest's check)
    let id = e.start(with_apparmor(container_config("touch", &image, &["touch", "/tmp/foo"]), local(), false)).await;
    let s = e.exited(&id).await;
    assert_ne!(s.exit_code, 0, "touch succeeded under a profile denying writes");
    // nor can a command exec'd into a running one
    let id = e.start(with_apparmor(container_config("sleeper", &image, &["sleep", "300"]), local(), false)).await;
    assert_eq!(e.labels(&id).await.1, format!("{DENY_WRITE} (enforce)"));
    let touch = exec_sync(&mut e.rt, &id, &["touch", "/tmp/bar"]).await;
    assert_ne!(touch.exit_code, 0, "an exec'd touch succeeded under a profile denying writes");
    // the deprecated string field names the same profile
    let mut old = container_config("old-field", &image, &["sleep", "300"]);
    #[allow(deprecated)]
    {
        old.linux.as_mut().and_then(|l| l.security_context.as_mut()).expect("sc").apparmor_profile =
            format!("localhost/{DENY_WRITE}");
    }
    let id = e.start(old).await;
    assert_eq!(e.labels(&id).await.0, format!("{DENY_WRITE} (enforce)"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_profile_that_is_not_loaded_is_refused() {
    // on every host: without AppArmor no named profile can be loaded either
    let mut e = env("aa-missing").await;
    let image = e.image.clone();
    let config = with_apparmor(
        container_config("missing", &image, &["true"]),
        profile(cri::security_profile::ProfileType::Localhost, "rktlet-test-no-such-profile"),
        false,
    );
    let err = e.create(config).await.expect_err("a container with a profile that is not loaded was created");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("rktlet-test-no-such-profile"), "{}", err.message());
    assert!(err.message().contains("apparmor"), "the field is named: {}", err.message());
}
