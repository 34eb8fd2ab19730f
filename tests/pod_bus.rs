//! PodBus against a real pod: the repo's own `rktlet app sandbox` boots
//! systemd in nspawn, a busybox tree is the app rootfs, and transient units
//! are started, read, stopped and reset over the pod's private socket.
//! Needs root (as every pod test here).

mod common;

use common::test_pod::{TestPod, sh};
use rktlet::stage1::bus::{BusError, ExecCommand, MainExit, Output, PodBus, Property, ServiceSpec};
use std::path::Path;
use std::time::{Duration, Instant};

/// Polls the unit until `done` holds (apps run asynchronously to the start job).
fn wait_status(
    bus: &PodBus,
    unit: &str,
    done: impl Fn(&rktlet::stage1::bus::UnitStatus) -> bool,
) -> rktlet::stage1::bus::UnitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = bus.unit_status(unit).expect("status");
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "unit {unit} never reached the expected state: {s:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_micros() as u64
}

#[test]
fn exit_status_output_and_timestamps() {
    let pod = TestPod::boot();
    let bus = PodBus::connect(pod.pid1()).expect("connect");
    let logs = tempfile::tempdir().expect("tempdir");
    let (out_path, err_path) = (logs.path().join("out"), logs.path().join("err"));
    let open = |p: &Path| std::fs::OpenOptions::new().create(true).append(true).open(p).expect("open log");
    let before = now_us();

    // stdout and stderr as fds opened on the host and passed over the bus
    let mut spec = sh("app1.service", "echo out; echo err >&2; exit 7");
    spec.stdout = Output::Fd(open(&out_path).into());
    spec.stderr = Output::Fd(open(&err_path).into());
    spec.environment = vec!["GREETING=hi".into()];
    bus.start_transient_service(&spec).expect("start");
    let s = wait_status(&bus, "app1.service", |s| s.main_exit().is_some() && s.active_state == "failed");
    assert_eq!(s.main_exit(), Some(MainExit::Exited(7)), "{s:?}");
    assert_eq!((s.exec_main_code, s.exec_main_status), (1, 7));
    assert!(s.exec_main_start_us >= before && s.exec_main_exit_us >= s.exec_main_start_us, "{s:?} vs {before}");
    assert_eq!(s.main_pid, 0);
    assert_eq!(s.active_state, "failed");
    assert_eq!(std::fs::read_to_string(&out_path).expect("out"), "out\n");
    assert_eq!(std::fs::read_to_string(&err_path).expect("err"), "err\n");

    // output as `append:` paths inside the pod; exit 0 stays readable (RemainAfterExit)
    let mut spec = sh("app2.service", "echo $GREETING; echo oops >&2");
    spec.environment = vec!["GREETING=hello".into()];
    spec.stdout = Output::Append("/rkt/app2.out".into());
    spec.stderr = Output::Append("/rkt/app2.err".into());
    bus.start_transient_service(&spec).expect("start app2");
    // properties are read one by one: wait until the state has caught up with the exit
    let s = wait_status(&bus, "app2.service", |s| s.main_exit().is_some() && s.sub_state == "exited");
    assert_eq!(s.main_exit(), Some(MainExit::Exited(0)));
    assert_eq!((s.active_state.as_str(), s.sub_state.as_str(), s.loaded), ("active", "exited", true));
    assert_eq!(std::fs::read_to_string(pod.rootfs().join("rkt/app2.out")).expect("out"), "hello\n");
    assert_eq!(std::fs::read_to_string(pod.rootfs().join("rkt/app2.err")).expect("err"), "oops\n");
}

#[test]
fn every_spec_field_is_accepted_by_systemd() {
    let pod = TestPod::boot();
    let bus = PodBus::connect(pod.pid1()).expect("connect");
    std::fs::create_dir_all(pod.rootfs().join("rkt/vol")).expect("mkdir vol");
    std::fs::write(pod.rootfs().join("rkt/vol/hello"), "from a volume\n").expect("write vol");
    std::fs::create_dir_all(pod.rootfs().join("opt/stage2/app1/rootfs/data")).expect("mkdir mountpoint");
    // systemd resolves User=/Group= in the pod's /etc (before RootDirectory), numeric ids too:
    // without an entry the start fails with 217/USER (rkt wrote sysusers entries for this)
    let mut nouser = sh("nouser.service", "true");
    nouser.user = Some("4242".into());
    let e = bus.start_transient_service(&nouser).expect_err("unknown uid");
    assert!(e.to_string().contains("status 217"), "{e}");
    let etc = pod.rootfs().join("etc");
    let append = |f: &str, line: &str| {
        let mut text = std::fs::read_to_string(etc.join(f)).expect("read");
        text.push_str(line);
        std::fs::write(etc.join(f), text).expect("write");
    };
    append("passwd", "u1000:x:1000:1001::/:/bin/sh\n");
    append("group", "g1001:x:1001:\ng1002:x:1002:\n");
    let mut spec =
        sh("app3.service", "echo $(id -u):$(id -g):$(id -G):$(pwd):$A; cat /data/hello; touch /data/x || echo ro");
    spec.environment = vec!["A=1".into()];
    spec.working_directory = Some("/tmp".into());
    spec.user = Some("1000".into());
    spec.group = Some("1001".into());
    spec.supplementary_groups = vec!["1002".into()];
    spec.stdout = Output::Append("/rkt/app3.out".into());
    spec.stderr = Output::Null;
    spec.kill_mode = Some("mixed".into());
    spec.timeout_stop = Some(Duration::from_secs(3));
    spec.bind_read_only_paths = vec![rktlet::stage1::bus::BindPath {
        source: "/rkt/vol".into(),
        destination: "/data".into(),
        ignore_missing: false,
        recursive: true,
    }];
    spec.bind_paths = vec![rktlet::stage1::bus::BindPath {
        source: "/rkt/missing".into(),
        destination: "/missing".into(),
        ignore_missing: true,
        recursive: false,
    }];
    spec.read_only_paths = vec!["-/proc/sysrq-trigger".into()];
    spec.no_new_privileges = Some(true);
    spec.capability_bounding_set = Some(1 << 10); // CAP_NET_BIND_SERVICE
    spec.ambient_capabilities = Some(0);
    spec.extra = vec![rktlet::stage1::bus::Property::str("SyslogIdentifier", "app3")];
    bus.start_transient_service(&spec).expect("start with every field");
    let s = wait_status(&bus, "app3.service", |s| s.main_exit().is_some() && s.sub_state == "exited");
    assert_eq!(s.main_exit(), Some(MainExit::Exited(0)), "{s:?}");
    let out = std::fs::read_to_string(pod.rootfs().join("rkt/app3.out")).expect("out");
    assert_eq!(out, "1000:1001:1001 1002:/tmp:1\nfrom a volume\nro\n");
}

#[test]
fn long_running_app_stop_kill_reset_and_reuse() {
    let pod = TestPod::boot();
    let pid1 = pod.pid1();
    let bus = PodBus::connect(pid1).expect("connect");
    let events = bus.subscribe().expect("subscribe");
    // the program itself, not `sh -c 'exec ...'`: Type=exec's job ends at the first execve
    let mut sleeper = ServiceSpec::new("app1.service", ExecCommand::new("/bin/sleep", ["1000"]));
    sleeper.root_directory = Some("/opt/stage2/app1/rootfs".into());
    bus.start_transient_service(&sleeper).expect("start");
    let s = bus.unit_status("app1.service").expect("status");
    assert_eq!((s.active_state.as_str(), s.sub_state.as_str()), ("active", "running"), "{s:?}");
    assert!(s.main_pid > 0 && s.exec_main_start_us > 0 && s.exec_main_code == 0, "{s:?}");
    // MainPID is a pid in the pod's namespace: find the host pid whose NSpid ends with it
    let host_pid = host_pid_of(pid1, s.main_pid).expect("main pid visible from the host");
    let cmdline = std::fs::read_to_string(format!("/proc/{host_pid}/cmdline")).expect("cmdline");
    assert_eq!(cmdline.split('\0').take(2).collect::<Vec<_>>(), ["/bin/sleep", "1000"], "{cmdline:?}");

    // a running unit's limits change (how UpdateContainerResources reaches cgroup v2 hosts)
    let limits =
        vec![Property::u64("CPUWeight", 50), Property::u64("TasksMax", 64), Property::u64("MemoryMax", 64 << 20)];
    bus.set_unit_properties("app1.service", limits).expect("SetUnitProperties");

    // a second start of the same name is refused while it exists
    let e = bus.start_transient_service(&sh("app1.service", "true")).expect_err("exists");
    assert!(matches!(e, BusError::UnitExists(_)), "{e}");

    bus.stop_unit("app1.service", Duration::from_secs(10)).expect("stop");
    let s = bus.unit_status("app1.service").expect("status after stop");
    assert_eq!(s.main_exit(), Some(MainExit::Killed(libc::SIGTERM)), "{s:?}");
    assert_eq!(s.active_state, "inactive");
    assert!(s.exec_main_exit_us >= s.exec_main_start_us);
    assert!(!std::path::Path::new(&format!("/proc/{host_pid}")).exists(), "sleep still runs");
    let seen: Vec<_> = events.try_iter().collect();
    assert!(
        seen.iter().any(|e| matches!(e, rktlet::stage1::bus::BusEvent::JobRemoved { unit, result, .. }
            if unit == "app1.service" && result == "done")),
        "{seen:?}"
    );

    // name reuse after reset; kill_unit signals the app
    bus.reset_unit("app1.service").expect("reset");
    assert!(bus.unit_status("app1.service").expect_err("forgotten").is_not_found());
    bus.start_transient_service(&sh("app1.service", "exec sleep 1000")).expect("start again");
    bus.kill_unit("app1.service", libc::SIGKILL).expect("kill");
    let s = wait_status(&bus, "app1.service", |s| s.main_exit().is_some());
    assert_eq!(s.main_exit(), Some(MainExit::Killed(libc::SIGKILL)), "{s:?}");
    bus.reset_unit("app1.service").expect("reset failed unit");
    bus.start_transient_service(&sh("app1.service", "true")).expect("start a third time");
    // reset stops an active unit first
    bus.reset_unit("app1.service").expect("reset active unit");
    assert!(bus.unit_status("app1.service").expect_err("gone").is_not_found());
}

#[test]
fn errors_are_clear() {
    let pod = TestPod::boot();
    let bus = PodBus::connect(pod.pid1()).expect("connect");
    let e = bus.unit_status("nope.service").expect_err("unknown");
    assert!(e.is_not_found(), "{e}");
    let e = bus.stop_unit("nope.service", Duration::from_secs(5)).expect_err("unknown");
    assert!(e.is_not_found(), "{e}");
    assert!(bus.kill_unit("nope.service", libc::SIGTERM).expect_err("unknown").is_not_found());
    let e = bus.set_unit_properties("nope.service", vec![Property::u64("TasksMax", 1)]).expect_err("unknown");
    assert!(e.is_not_found(), "{e}");
    bus.reset_unit("nope.service").expect("nothing to reset is fine");

    let mut spec = ServiceSpec::new("bad.service", ExecCommand::new("/bin/does-not-exist", ["x"]));
    spec.root_directory = Some("/opt/stage2/app1/rootfs".into());
    let e = bus.start_transient_service(&spec).expect_err("bad ExecStart");
    let msg = e.to_string();
    assert!(matches!(e, BusError::JobFailed { ref result, .. } if result == "failed"), "{msg}");
    assert!(msg.contains("bad.service") && msg.contains("203/EXEC"), "{msg}");

    let spec = ServiceSpec::new("relative.service", ExecCommand::new("bin/sh", ["-c", "true"]));
    let e = bus.start_transient_service(&spec).expect_err("relative path");
    assert!(e.to_string().contains("relative.service"), "{e}");

    // the pod goes away: calls fail as disconnected, not hang
    let pid1 = pod.pid1();
    drop(pod);
    let deadline = Instant::now() + Duration::from_secs(10);
    let e = loop {
        match bus.unit_status("bad.service") {
            Err(e @ BusError::Disconnected { .. }) => break e,
            other => assert!(Instant::now() < deadline, "still answering after the pod is gone: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(e.to_string().contains(&pid1.to_string()), "{e}");
}

/// Connections and units over and over (the bench `pod_bus` times these):
/// every connection answers, every start runs its unit, every stop and reset
/// leaves no unit behind.
#[test]
fn repeated_connects_starts_and_stops_leave_no_unit_behind() {
    const N: usize = 15;
    let pod = TestPod::boot();
    let pid1 = pod.pid1();
    for _ in 0..N {
        let bus = PodBus::connect(pid1).expect("connect");
        // a round trip on the new connection: the pod's systemd answers
        let e = bus.unit_status("not-there.service").expect_err("no such unit");
        assert!(e.is_not_found(), "{e}");
    }
    let bus = PodBus::connect(pid1).expect("connect");
    for i in 0..N {
        let name = format!("t{i}.service");
        bus.start_transient_service(&sh(&name, "exec sleep 1000")).expect("start");
        assert!(bus.unit_status(&name).expect("status").is_active(), "{name} runs");
        bus.stop_unit(&name, Duration::from_secs(10)).expect("stop");
        bus.reset_unit(&name).expect("reset");
        match bus.unit_status(&name) {
            Ok(s) => assert!(!s.is_active(), "{name} still active after stop: {s:?}"),
            Err(e) => assert!(e.is_not_found(), "{name}: {e}"),
        }
    }
}

/// The host pid of the process that is `ns_pid` in the PID namespace of `pid1`.
fn host_pid_of(pid1: i32, ns_pid: u32) -> Option<i32> {
    let ns = std::fs::read_link(format!("/proc/{pid1}/ns/pid")).ok()?;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        if std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok().as_ref() != Some(&ns) {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
        if nspid.split_whitespace().last() == Some(&ns_pid.to_string()) {
            return Some(pid);
        }
    }
    None
}

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("tasks")
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix)))
        .count()
}

/// One thread waits on every pod's bus: many connections add no thread,
/// and a pod whose systemd does not answer holds up only its own callers;
/// the other pod's start, whose end is read from its signals, completes.
#[test]
fn one_bus_thread_for_all_pods_and_a_stalled_pod_stalls_no_other() {
    let (a, b) = (TestPod::boot(), TestPod::boot());
    let buses: Vec<PodBus> = (0..20).map(|_| PodBus::connect(b.pid1()).expect("connect")).collect();
    for bus in &buses {
        assert!(bus.unit_status("not-there.service").expect_err("no such unit").is_not_found());
    }
    assert_eq!(threads_named("podbus"), 1, "one pod bus thread for 20 connections");

    let bus_a = std::sync::Arc::new(PodBus::connect(a.pid1()).expect("connect a"));
    let stopped = nix::sys::signal::kill(nix::unistd::Pid::from_raw(a.pid1()), nix::sys::signal::Signal::SIGSTOP);
    stopped.expect("SIGSTOP pod a's systemd");
    let stalled = {
        let bus_a = std::sync::Arc::clone(&bus_a);
        std::thread::spawn(move || bus_a.unit_status("not-there.service"))
    };
    let bus_b = &buses[0];
    bus_b.start_transient_service(&sh("b.service", "exec sleep 1000")).expect("start in pod b");
    assert!(bus_b.unit_status("b.service").expect("status").is_active());
    bus_b.stop_unit("b.service", Duration::from_secs(10)).expect("stop in pod b");
    assert!(!stalled.is_finished(), "pod a's systemd is stopped: its call cannot have been answered");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(a.pid1()), nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
    let e = stalled.join().expect("join").expect_err("no such unit in pod a");
    assert!(e.is_not_found(), "pod a answers once it runs again: {e}");
}
