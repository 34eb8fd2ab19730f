//! State machine tests on a real temporary data dir, with lock holders in other
//! processes (`flock(1)` and a child that inherited the pod lock).

use super::*;
use crate::lock;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A test's data dir; the value also holds [`crate::one_at_a_time`] until
/// the test ends (its tests spawn lock holders and check locks let go).
struct TestDir {
    _serial: std::sync::MutexGuard<'static, ()>,
    _tmp: tempfile::TempDir,
}

fn data() -> (TestDir, DataDir) {
    let serial = crate::one_at_a_time();
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = DataDir::new(tmp.path().join("data"));
    data.ensure().expect("layout");
    (TestDir { _serial: serial, _tmp: tmp }, data)
}

/// A pod taken through embryo -> prepare -> run; this handle holds its lock.
fn running_pod(data: &DataDir) -> (Pod, Uuid) {
    let mut pod = Pod::create(data).expect("create");
    pod.to_preparing().expect("prepare");
    pod.to_run().expect("run");
    let uuid = pod.uuid();
    (pod, uuid)
}

fn state_of(data: &DataDir, uuid: Uuid) -> PodState {
    Pod::open(data, &uuid.to_string()).and_then(|mut p| p.state()).expect("state")
}

/// `flock -x <dir> sleep 60`: another process holding a pod's lock.
fn flock_holder(path: &Path) -> Child {
    let child = Command::new("flock")
        .arg("-x")
        .arg(path)
        .args(["sleep", "60"])
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn flock");
    wait_until(|| lock::is_held(path).unwrap_or(false));
    child
}

fn wait_until(mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "condition not reached in 10s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kills a lock holder and everything it started (flock's command inherits the lock).
/// Waits until the lock is free, since the holder's children die a moment after it.
fn stop(mut child: Child, path: &Path) {
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    wait_until(|| !lock::is_held(path).unwrap_or(true));
}

#[test]
fn layout_has_rkt_state_dirs() {
    let (_t, data) = data();
    for name in ["embryo", "prepare", "prepared", "run", "exited-garbage", "garbage"] {
        assert!(data.pods().join(name).is_dir(), "{name}");
    }
    for d in [data.cas(), data.locks(), data.tmp()] {
        assert!(d.is_dir());
    }
    data.ensure().expect("ensure is idempotent");
}

#[test]
fn create_prepare_prepared_run_exit_gc() {
    let (_t, data) = data();
    let mut pod = Pod::create(&data).expect("create");
    let uuid = pod.uuid();
    assert_eq!(pod.path(), data.pods().join("embryo").join(uuid.to_string()));
    assert_eq!(state_of(&data, uuid), PodState::Embryo);

    pod.to_preparing().expect("to preparing");
    assert!(pod.path().starts_with(data.pods().join("prepare")));
    // another handle probes the lock this one holds
    assert_eq!(state_of(&data, uuid), PodState::Preparing);
    pod.write_initial(&crate::schema::PodManifest::mutable()).expect("initial files");

    pod.to_prepared().expect("to prepared");
    assert!(!pod.holds_lock());
    assert_eq!(state_of(&data, uuid), PodState::Prepared);

    pod.to_run().expect("run prepared");
    assert!(pod.holds_lock());
    assert_eq!(state_of(&data, uuid), PodState::Running);
    pod.release_lock();
    assert_eq!(state_of(&data, uuid), PodState::Exited);

    pod.to_exited_garbage().expect("mark exited garbage");
    assert_eq!(state_of(&data, uuid), PodState::ExitedGarbage);
    assert!(pod.read_manifest().expect("manifest survives renames").is_mutable());
    pod.delete().expect("delete");
    assert!(matches!(Pod::open(&data, &uuid.to_string()), Err(PodError::NotFound(_))));
    for dir in PodDir::ALL {
        assert!(!data.pod_parent(dir).join(uuid.to_string()).exists());
    }
}

#[test]
fn creator_dying_mid_prepare_leaves_aborted_prepare() {
    let (_t, data) = data();
    let mut pod = Pod::create(&data).expect("create");
    let uuid = pod.uuid();
    pod.to_preparing().expect("prepare");
    drop(pod);
    assert_eq!(state_of(&data, uuid), PodState::AbortedPrepare);
    let mut again = Pod::open(&data, &uuid.to_string()).expect("open");
    assert!(matches!(again.to_run(), Err(PodError::WrongState { state: PodState::AbortedPrepare, .. })));
    again.to_garbage().expect("aborted prepare -> garbage");
    assert_eq!(state_of(&data, uuid), PodState::Garbage);
    again.delete().expect("delete garbage");
}

#[test]
fn lock_held_by_another_process_reads_as_running_and_blocks_gc() {
    let (_t, data) = data();
    let (mut pod, uuid) = running_pod(&data);
    pod.release_lock();
    let holder = flock_holder(&pod.path());
    assert_eq!(state_of(&data, uuid), PodState::Running);
    let mut other = Pod::open(&data, &uuid.to_string()).expect("open");
    match other.to_exited_garbage() {
        Err(PodError::WrongState { state: PodState::Running, .. }) => {}
        other => panic!("running pod must not be collected: {other:?}"),
    }
    stop(holder, &pod.path());
    assert_eq!(state_of(&data, uuid), PodState::Exited);
    other.to_exited_garbage().expect("exited pod collected");
}

#[test]
fn lock_passes_to_exec_child_and_pod_exits_with_it() {
    let (_t, data) = data();
    let (mut pod, uuid) = running_pod(&data);
    let fd = pod.lock_fd().expect("lock fd");
    let mut cmd = Command::new("sleep");
    cmd.arg("60").env("RKT_LOCK_FD", fd.to_string());
    // SAFETY: pre_exec runs between fork and exec; fcntl is async-signal-safe.
    unsafe { cmd.pre_exec(move || lock::keep_across_exec(fd)) };
    cmd.process_group(0);
    let child = cmd.spawn().expect("spawn sleep");
    pod.release_lock();
    // the child alone now holds the pod lock
    assert_eq!(state_of(&data, uuid), PodState::Running);
    stop(child, &pod.path());
    assert_eq!(state_of(&data, uuid), PodState::Exited);
}

#[test]
fn exited_garbage_and_garbage_held_read_as_deleting() {
    let (_t, data) = data();
    let (mut pod, uuid) = running_pod(&data);
    pod.release_lock();
    pod.to_exited_garbage().expect("exited garbage");
    let holder = flock_holder(&pod.path());
    assert_eq!(state_of(&data, uuid), PodState::ExitedDeleting);
    let mut other = Pod::open(&data, &uuid.to_string()).expect("open");
    assert!(matches!(other.take_lock(), Err(PodError::Busy(_))));
    stop(holder, &pod.path());

    let mut g = Pod::create(&data).expect("create");
    let gid = g.uuid();
    g.to_garbage().expect("embryo -> garbage");
    let holder = flock_holder(&g.path());
    assert_eq!(state_of(&data, gid), PodState::Deleting);
    let g2 = Pod::open(&data, &gid.to_string()).expect("open");
    assert!(matches!(g2.delete(), Err(PodError::WrongState { state: PodState::Deleting, .. })), "being deleted");
    stop(holder, &g.path());
    assert_eq!(state_of(&data, gid), PodState::Garbage);
}

#[test]
fn illegal_transitions_are_refused_and_change_nothing() {
    let (_t, data) = data();
    let mut pod = Pod::create(&data).expect("create");
    let uuid = pod.uuid();
    assert!(matches!(pod.to_prepared(), Err(PodError::WrongState { state: PodState::Embryo, .. })));
    assert!(matches!(pod.to_exited_garbage(), Err(PodError::WrongState { .. })));
    pod.to_preparing().expect("prepare");
    assert!(matches!(pod.to_preparing(), Err(PodError::WrongState { state: PodState::Preparing, .. })));
    // a second handle cannot take over a pod someone is preparing
    let mut intruder = Pod::open(&data, &uuid.to_string()).expect("open");
    assert!(matches!(intruder.to_run(), Err(PodError::WrongState { state: PodState::Preparing, .. })));
    pod.to_run().expect("run");
    let running = Pod::open(&data, &uuid.to_string()).expect("open");
    assert!(matches!(running.delete(), Err(PodError::WrongState { state: PodState::Running, .. })));
    assert_eq!(state_of(&data, uuid), PodState::Running);
    assert!(data.pod_parent(PodDir::Run).join(uuid.to_string()).is_dir());
}

#[test]
fn resolve_by_prefix() {
    let (_t, data) = data();
    let a = "abcd0000-0000-4000-8000-000000000001";
    let b = "abcd0000-0000-4000-8000-000000000002";
    fs::create_dir(data.pod_parent(PodDir::Embryo).join(a)).expect("a");
    fs::create_dir(data.pod_parent(PodDir::Run).join(b)).expect("b");
    let ua = Uuid::parse_str(a).expect("uuid");
    assert_eq!(data.resolve("abcd0000000040008000000000000001").expect("no dashes"), ua);
    assert_eq!(
        data.resolve("ABCD0000-0000-4000-8000-00000000000").map_err(|e| e.to_string()).err(),
        Some("pod id prefix \"ABCD0000-0000-4000-8000-00000000000\" matches more than one pod".to_string())
    );
    assert_eq!(data.resolve("abcd0000-0000-4000-8000-000000000001").expect("full"), ua);
    assert!(matches!(data.resolve("abcd"), Err(PodError::Ambiguous(_))));
    assert!(matches!(data.resolve("ffff"), Err(PodError::NotFound(_))));
    assert!(matches!(data.resolve(""), Err(PodError::InvalidId(_))));
    assert!(matches!(data.resolve("zz"), Err(PodError::InvalidId(_))));
    assert_eq!(Pod::open(&data, "abcd0000-0000-4000-8000-000000000002").expect("open").dir(), PodDir::Run);
}

#[test]
fn list_finds_pods_in_every_state_dir() {
    let (_t, data) = data();
    let embryo = Pod::create(&data).expect("create");
    let mut run = Pod::create(&data).expect("create");
    run.to_preparing().expect("prepare");
    run.to_run().expect("run");
    fs::create_dir(data.pod_parent(PodDir::Run).join("not-a-uuid")).expect("stray dir");
    let listed = data.list_pods().expect("list");
    assert_eq!(listed.len(), 2);
    assert!(listed.contains(&(embryo.uuid(), PodDir::Embryo)));
    assert!(listed.contains(&(run.uuid(), PodDir::Run)));
}

#[test]
fn manifest_rewrite_is_atomic_and_keeps_mode() {
    let (_t, data) = data();
    let mut pod = Pod::create(&data).expect("create");
    pod.to_preparing().expect("prepare");
    let mut m = crate::schema::PodManifest::mutable();
    pod.write_initial(&m).expect("initial");
    let mode = fs::metadata(pod.manifest_path()).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    fs::set_permissions(pod.manifest_path(), fs::Permissions::from_mode(0o600)).expect("chmod");
    m.user_labels.insert("app".into(), "web".into());
    pod.write_manifest(&m).expect("rewrite");
    assert_eq!(pod.read_manifest().expect("read"), m);
    let mode = fs::metadata(pod.manifest_path()).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let leftovers: Vec<_> = fs::read_dir(pod.path())
        .expect("readdir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "no temp files left");
    assert!(pod.created_at().is_ok());

    fs::write(pod.manifest_path(), b"{not json").expect("corrupt");
    assert!(matches!(pod.read_manifest(), Err(PodError::Manifest { .. })));
}

#[test]
fn pod_lck_serialises_manifest_writers_across_processes() {
    let (_t, data) = data();
    let mut pod = Pod::create(&data).expect("create");
    pod.to_preparing().expect("prepare");
    pod.write_initial(&crate::schema::PodManifest::mutable()).expect("initial");
    let lck = pod.path().join(MANIFEST_LOCK_FILE);
    let held = pod.lock_manifest().expect("lock pod.lck");
    let status = Command::new("flock").args(["-n", "-x"]).arg(&lck).arg("true").status().expect("flock");
    assert!(!status.success(), "another process must not get pod.lck while we hold it");
    drop(held);
    let status = Command::new("flock").args(["-n", "-x"]).arg(&lck).arg("true").status().expect("flock");
    assert!(status.success(), "pod.lck free again");
}

#[test]
fn a_long_pod_name_gives_a_hostname_the_kernel_takes() {
    let long = format!("{}-x", "a".repeat(62));
    assert_eq!(super::hostname_from_name(&long), "a".repeat(62));
    assert_eq!(super::hostname_from_name("web-0"), "web-0");
    let wide = "é".repeat(40);
    assert!(super::hostname_from_name(&wide).len() <= 63);
    assert_eq!(super::hostname_from_name(&"b".repeat(200)).len(), 63);
}
