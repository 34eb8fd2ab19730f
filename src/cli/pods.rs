//! The rkt-style pod commands (`list`, `status`, `stop`, `rm`, `gc`) over the
//! same data directory the daemon uses. These are what an operator runs, and
//! what the exec design of the benchmark calls per CRI request.

use crate::cli::out::{self, Format, GoTime, ListApp, PodView};
use crate::stage1::rootfs::Stage1Root;
use crate::stage1::teardown::{self, NetDirs, TeardownError};
use rkt::api_v1::{AppInfo, MountInfo, PodInfo};
use rkt::net_info;
use rkt::pod::{self, DataDir, Pod, PodDir, PodError, PodState};
use rkt::schema::{ImageManifest, PodManifest, RuntimeApp};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Everything `list` and `status` print of a pod, read once.
pub(crate) struct PodRead {
    pub view: PodView,
    /// Go's `time.Time` values as nanoseconds since the epoch.
    created_ns: Option<i64>,
    started_ns: Option<i64>,
    gc_marked_ns: Option<i64>,
    manifest: Option<PodManifest>,
    /// Why the manifest rkt expected could not be read (rkt leaves such a pod out of `list`).
    manifest_error: Option<String>,
    ready: bool,
}

fn mtime_ns(path: &Path) -> Option<i64> {
    let m = std::fs::metadata(path).ok()?;
    Some(m.mtime().saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec()))
}

/// The leading integer of a file, as Go's `Sscanf("%d")` reads it.
fn read_int(path: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    let t = text.trim_start();
    let end = t
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+'))))
        .map_or(t.len(), |(i, _)| i);
    t[..end].parse().ok()
}

/// The image name `rkt list` shows for an app: its image manifest's name,
/// `:version` appended when the manifest has that label.
fn image_name(pod_path: &Path, app: &str) -> Result<String, String> {
    let path = pod_path.join("appsinfo").join(app).join("manifest");
    let text = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let m: ImageManifest =
        serde_json::from_slice(&text).map_err(|e| format!("invalid image manifest for app {app:?}: {e}"))?;
    Ok(match m.label("version") {
        Some(v) => format!("{}:{v}", m.name),
        None => m.name.clone(),
    })
}

/// Reads what rkt's `list` and `status` read of a pod (its pkg/pod rules):
/// the creation time once prepared (`pod-created`, else the manifest), the
/// start time once it ran (`pid`, else `ppid`), networks while running or
/// exited, the manifest where rkt expects one, recorded exit codes; the
/// apps' image names (their image manifests) only for a table.
pub(crate) fn read_pod(pod: &mut Pod, image_names: bool) -> Result<PodRead, PodError> {
    use PodState::*;
    let state = pod.state()?;
    let path = pod.path();
    let after_run = matches!(state, ExitedDeleting | Deleting | Exited | ExitedGarbage | Garbage);
    let created_ns = (state == Prepared || state == Running || after_run)
        .then(|| mtime_ns(&path.join(pod::CREATED_FILE)).or_else(|| mtime_ns(&path.join(pod::MANIFEST_FILE))))
        .flatten();
    let started_ns = (state == Running || after_run)
        .then(|| mtime_ns(&path.join("pid")).or_else(|| mtime_ns(&path.join(pod::PPID_FILE))))
        .flatten();
    let gc_marked_ns = matches!(state, Garbage | Deleting | ExitedGarbage | ExitedDeleting)
        .then(|| std::fs::symlink_metadata(&path).ok())
        .flatten()
        .map(|m| m.ctime().saturating_mul(1_000_000_000).saturating_add(m.ctime_nsec()));
    let networks = if matches!(state, Running | Exited | ExitedGarbage | ExitedDeleting) {
        pod.read_file(pod::NET_INFO_FILE)?.and_then(|s| net_info::from_json(s.as_bytes()).ok()).unwrap_or_default()
    } else {
        Vec::new()
    };
    let pid = read_int(&path.join("pid")).or_else(|| read_int(&path.join(pod::PPID_FILE)));
    let (manifest, manifest_error) = match state {
        Preparing | AbortedPrepare | Deleting => (None, None),
        _ => match pod.read_manifest() {
            Ok(m) => (Some(m), None),
            Err(e) => (None, Some(e.to_string())),
        },
    };
    let status_dir = Stage1Root::new(pod.stage1_rootfs()).status_dir();
    let apps = manifest.as_ref().map(|m| {
        m.apps
            .iter()
            .map(|a| ListApp {
                name: a.name.clone(),
                image_name: if image_names { image_name(&path, &a.name) } else { Ok(String::new()) },
                image_id: a.image.id.clone(),
            })
            .collect()
    });
    let exit_codes = manifest
        .iter()
        .flat_map(|m| &m.apps)
        .filter_map(|a| read_int(&status_dir.join(&a.name)).map(|c| (a.name.clone(), c)))
        .collect();
    let view = PodView {
        uuid: pod.uuid().to_string(),
        state,
        created: created_ns.map(GoTime::local),
        started: started_ns.map(GoTime::local),
        networks,
        pid,
        apps,
        exit_codes,
    };
    let ready = state == Running && pod.is_ready();
    Ok(PodRead { view, created_ns, started_ns, gc_marked_ns, manifest, manifest_error, ready })
}

/// An app of a pod as rkt's `list`/`status` JSON shows it: its state and
/// times inferred from the pod's (rkt does not read app status files there,
/// only a recorded exit code).
fn pod_app(r: &PodRead, a: &RuntimeApp, volumes: &[rkt::schema::Volume]) -> AppInfo {
    use PodState::*;
    let exit_code = r.view.exit_codes.iter().find(|(n, _)| *n == a.name).map(|(_, c)| *c);
    let state = match (exit_code, r.view.state) {
        (Some(_), _) => "exited",
        (None, Prepared) => "created",
        (None, Running) => "running",
        (None, Deleting | ExitedDeleting | Exited | ExitedGarbage | Garbage) => "exited",
        (None, _) => "unknown",
    };
    let mounts = a
        .mounts
        .iter()
        .map(|m| {
            let v = m.app_volume.as_ref().or_else(|| volumes.iter().find(|v| v.name == m.volume));
            MountInfo {
                name: m.volume.clone(),
                container_path: m.path.clone(),
                host_path: v.map(|v| v.source.clone()).unwrap_or_default(),
                read_only: v.and_then(|v| v.read_only).unwrap_or(false),
                propagation: crate::stage1::inject::Propagation::parse(v.and_then(|v| v.propagation.as_deref()))
                    .as_str()
                    .to_string(),
                ..Default::default()
            }
        })
        .collect();
    let section = a.app.clone().unwrap_or_default();
    AppInfo {
        name: a.name.clone(),
        state: state.into(),
        created_at: r.created_ns.unwrap_or(0),
        started_at: r.started_ns.unwrap_or(0),
        finished_at: r.gc_marked_ns.unwrap_or(0),
        exit_code: exit_code.unwrap_or(0),
        image_id: a.image.id.clone(),
        mounts,
        user_annotations: section.user_annotations,
        user_labels: section.user_labels,
        ..Default::default()
    }
}

/// One pod as `rkt list|status --format=json` shows it (rkt's `v1.Pod`,
/// then rktlet's fields); `None` for a pod not prepared yet, which rkt
/// refuses (`invalid creation time`).
pub(crate) fn pod_info(r: &PodRead) -> Option<PodInfo> {
    let secs = |ns: i64| u64::try_from(ns.div_euclid(1_000_000_000)).ok();
    let created_at = r.created_ns.and_then(secs).filter(|s| *s > 0)?;
    let mut info = PodInfo {
        name: r.view.uuid.clone(),
        state: r.view.state.as_str().to_string(),
        networks: r.view.networks.clone(),
        created_at: Some(created_at),
        started_at: r.started_ns.and_then(secs),
        ready: r.ready,
        pid: r.view.pid,
        ..Default::default()
    };
    if let Some(m) = &r.manifest {
        let volumes = m.volumes.as_deref().unwrap_or_default();
        info.app_names = m.apps.iter().map(|a| a.name.clone()).collect();
        info.apps = m.apps.iter().map(|a| pod_app(r, a, volumes)).collect();
        info.annotations = m.annotations.iter().flatten().map(|a| (a.name.clone(), a.value.clone())).collect();
        info.user_annotations = m.user_annotations.clone();
        info.user_labels = m.user_labels.clone();
    }
    Some(info)
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// What `rktlet list` prints: on stdout, and the problems for stderr.
pub(crate) struct Listing {
    pub out: String,
    pub errors: Vec<String>,
}

/// `rktlet list`: as `rkt list`, the pods in the run, exited-garbage,
/// prepare and prepared directories by UUID (not idle pool pods), as rkt's
/// table (`full`: whole UUIDs, image ids, absolute times; `no_legend`: no
/// header) or its JSON.
pub(crate) fn list(data: &DataDir, format: Format, full: bool, no_legend: bool) -> Result<Listing, String> {
    let mut reads = Vec::new();
    let mut errors = Vec::new();
    let mut pods = data.list_pods().map_err(|e| e.to_string())?;
    pods.retain(|(_, dir)| matches!(dir, PodDir::Run | PodDir::ExitedGarbage | PodDir::Prepare | PodDir::Prepared));
    pods.sort_by_key(|(uuid, _)| uuid.to_string());
    for (uuid, _) in pods {
        match Pod::open(data, &uuid.to_string()).and_then(|mut p| read_pod(&mut p, format == Format::Tabbed)) {
            // waiting in the daemon's pod pool: nobody's pod yet
            Ok(r) if r.manifest.as_ref().is_some_and(|m| m.annotation(crate::pool::POOL_ANNOTATION).is_some()) => {}
            Ok(PodRead { manifest_error: Some(e), .. }) => {
                errors.push(format!("unable to read pod {uuid} manifest: {e}"))
            }
            Ok(r) => reads.push(r),
            Err(PodError::NotFound(_)) => {}
            Err(e) => errors.push(format!("skipping {uuid}: {e}")),
        }
    }
    let out = match format {
        Format::Tabbed => {
            let views: Vec<PodView> = reads.into_iter().map(|r| r.view).collect();
            let (table, problems) = out::list_table(&views, full, no_legend, now_secs());
            errors.extend(problems);
            table
        }
        json => {
            let mut infos = Vec::new();
            for r in &reads {
                match pod_info(r) {
                    Some(i) => infos.push(i),
                    None => errors.push(format!("pod {}: invalid creation time", r.view.uuid)),
                }
            }
            out::list_json(&infos, json)?
        }
    };
    Ok(Listing { out, errors })
}

/// `rktlet status UUID`: rkt's `key=value` lines or its JSON.
pub(crate) fn status(data: &DataDir, id: &str, format: Format) -> Result<String, String> {
    let mut pod = Pod::open(data, id).map_err(|e| e.to_string())?;
    let r = read_pod(&mut pod, false).map_err(|e| e.to_string())?;
    match format {
        Format::Tabbed => Ok(out::status_text(&r.view)),
        json => {
            let info = pod_info(&r).ok_or_else(|| format!("pod {}: invalid creation time", r.view.uuid))?;
            out::go_json(&info, json)
        }
    }
}

/// The pod `status` names: the argument, or the first line of `--uuid-file`
/// (one of the two, as rkt).
pub(crate) fn status_uuid(uuid: Option<String>, file: Option<&Path>) -> Result<String, String> {
    match (uuid, file) {
        (Some(id), None) => Ok(id),
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("unable to resolve UUID from file {}: {e}", f.display()))?;
            Ok(text.lines().next().unwrap_or_default().trim().to_string())
        }
        _ => Err("give either a pod UUID or --uuid-file".into()),
    }
}

/// How long `--wait`/`--wait-ready` wait: `None` not at all, `Some(None)`
/// without limit, `Some(Some(d))` at most `d`.
pub(crate) type Wait = Option<Option<Duration>>;

/// rkt's `--wait`/`--wait-ready` value: empty or a true boolean waits
/// without limit, a false one not at all, else a Go duration (`1m30s`;
/// negative: without limit, zero: not at all).
pub(crate) fn parse_wait(s: &str) -> Result<Wait, String> {
    match s {
        "" | "1" | "t" | "T" | "true" | "TRUE" | "True" => return Ok(Some(None)),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => return Ok(None),
        _ => {}
    }
    let bad = || format!("invalid wait value {s:?}: use true, false or a duration like 30s or 1m30s");
    let (negative, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let mut total = 0f64;
    if rest == "0" {
        return Ok(None);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let n: f64 = rest[..num_end].parse().map_err(|_| bad())?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    Ok(if total == 0.0 {
        None
    } else if negative {
        Some(None)
    } else {
        Some(Some(Duration::try_from_secs_f64(total).map_err(|_| bad())?))
    })
}

/// Waits as `status --wait-ready`/`--wait` ask: for the pod's systemd to
/// report it ready, then for the pod to finish (exited, or gone to garbage).
pub(crate) fn wait_for(data: &DataDir, id: &str, ready: Wait, finished: Wait) -> Result<(), String> {
    let poll = |what: &str, wait: Wait, done: &dyn Fn(&mut Pod) -> Result<bool, PodError>| -> Result<(), String> {
        let Some(limit) = wait else { return Ok(()) };
        let deadline = limit.map(|d| std::time::Instant::now() + d);
        loop {
            let mut pod = Pod::open(data, id).map_err(|e| e.to_string())?;
            if done(&mut pod).map_err(|e| e.to_string())? {
                return Ok(());
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Err(format!("error waiting for pod {what}: timed out"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // ready as rkt reads it (the supervisor-status link), whatever the state;
    // a pod that finished without it never will be (rkt would wait on)
    poll("readiness", ready, &|p| {
        if p.is_ready() {
            return Ok(true);
        }
        let state = p.state()?;
        if !matches!(state, PodState::Embryo | PodState::Preparing | PodState::Prepared | PodState::Running) {
            return Err(PodError::WrongState { uuid: p.uuid(), state, op: "become ready" });
        }
        Ok(false)
    })?;
    poll("to finish", finished, &|p| {
        Ok(matches!(
            p.state()?,
            PodState::Exited | PodState::ExitedGarbage | PodState::Garbage | PodState::AbortedPrepare
        ))
    })
}

fn block_on<T>(f: impl Future<Output = Result<T, TeardownError>>) -> Result<T, TeardownError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TeardownError::Worker(e.to_string()))?
        .block_on(f)
}

/// `rktlet stop UUID`: stop a pod and release its network (`force` skips the grace period).
pub(crate) fn stop_pod(data: &DataDir, id: &str, force: bool, net: &NetDirs) -> Result<(), TeardownError> {
    let grace = if force { Duration::ZERO } else { Duration::from_secs(10) };
    block_on(teardown::stop_pod(data, id, grace, net))
}

/// `rktlet rm UUID`: stop if needed and delete a pod with its network.
pub(crate) fn rm_pod(data: &DataDir, id: &str, net: &NetDirs) -> Result<(), TeardownError> {
    block_on(teardown::remove_pod(data, id, Duration::from_secs(10), net, teardown::Deletion::Now))
}

/// rkt's stage1 `stop` entry point (`rkt stop [--force] UUID`): stops the
/// pod as `rktlet stop` does, with the CNI directories the daemon recorded.
pub(crate) fn stage1_stop(data: &DataDir, id: &str, force: bool) -> Result<(), TeardownError> {
    stop_pod(data, id, force, &crate::stage1::entrypoints::recorded_net(data))
}

/// rkt's stage1 `gc` entry point (`rkt gc`/`rkt rm`, before they delete the
/// pod directory): releases what the exited pod holds on the node (mounts,
/// cgroup, network, a failed sandbox unit) as the daemon's teardown does.
/// Nothing to do for a pod already torn down or gone; refused for a running pod.
pub(crate) fn stage1_gc(data: &DataDir, id: &str) -> Result<(), TeardownError> {
    let uuid = match Pod::open(data, id) {
        Ok(mut pod) => {
            if pod.state()? == PodState::Running {
                return Err(PodError::WrongState { uuid: pod.uuid(), state: PodState::Running, op: "gc" }.into());
            }
            pod.uuid().to_string()
        }
        Err(PodError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let net = crate::stage1::entrypoints::recorded_net(data);
    block_on(async {
        teardown::stop_pod(data, &uuid, Duration::ZERO, &net).await?;
        if crate::stage1::host::pid1_is_systemd(std::path::Path::new("/")) {
            crate::stage1::launch::forget_unit(&uuid).await;
        }
        Ok(())
    })
}

/// How long ago `unix_ns` (nanoseconds since the epoch) was, as rkt's
/// `image list` shows times (go-humanize: "now", "1 minute ago", "3 days
/// ago"); "never" for 0.
pub(crate) fn ago(unix_ns: i64, now: SystemTime) -> String {
    if unix_ns <= 0 {
        return "never".into();
    }
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    out::humanize_ago(unix_ns.div_euclid(1_000_000_000), now)
}

/// A size in bytes as rkt 1.30's `image list` shows it (go-humanize's
/// `IBytes` of that release): "5B", "512B", "4.2MiB", "20MiB" (one decimal
/// below 10, rounded to the nearest tenth first).
pub(crate) fn ibytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 10 {
        return format!("{bytes}B");
    }
    let exp = ((bytes as f64).ln() / 1024f64.ln()).floor() as usize;
    let exp = exp.min(UNITS.len() - 1);
    let val = ((bytes as f64) / 1024f64.powi(exp as i32) * 10.0 + 0.5).floor() / 10.0;
    if val < 10.0 { format!("{val:.1}{}", UNITS[exp]) } else { format!("{val:.0}{}", UNITS[exp]) }
}

/// `rktlet gc --mark-only`, as rkt's: moves exited pods to `exited-garbage/`
/// and aborted prepares to `garbage/` ([`rkt::gc::pod_mark`]), deleting
/// nothing. Returns the uuids moved.
pub(crate) fn gc_mark(data: &DataDir) -> Result<Vec<String>, PodError> {
    let mut marked = Vec::new();
    for (uuid, dir) in data.list_pods()? {
        if !rkt::gc::may_mark(dir) {
            continue;
        }
        let Ok(mut pod) = Pod::open(data, &uuid.to_string()) else { continue };
        let moved = match rkt::gc::pod_mark(pod.state()?) {
            Some(PodDir::ExitedGarbage) => pod.to_exited_garbage(),
            Some(PodDir::Garbage) => pod.to_garbage(),
            _ => continue,
        };
        match moved {
            Ok(()) => marked.push(uuid.to_string()),
            // started, removed or marked by someone else meanwhile
            Err(PodError::WrongState { .. } | PodError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(marked)
}

/// `rktlet gc`: deletes exited pods older than `grace` (by pod-created time),
/// aborted prepares and garbage ([`rkt::gc::pod_verdict`]). Returns the
/// uuids removed.
pub(crate) fn gc(data: &DataDir, grace: Duration, net: &NetDirs) -> Result<Vec<String>, TeardownError> {
    let mut removed = Vec::new();
    let now = SystemTime::now();
    for (uuid, dir) in data.list_pods()? {
        let Ok(mut pod) = Pod::open(data, &uuid.to_string()) else { continue };
        let state = pod.state()?;
        if rkt::gc::pod_verdict(dir, state, pod.created_at().ok(), now, grace) == rkt::gc::Verdict::Remove {
            rm_pod(data, &pod.uuid().to_string(), net)?;
            removed.push(uuid.to_string());
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod taken through prepare, run and exit on disk, read as rkt's
    /// pkg/pod does: times from `pod-created` and `ppid`, apps' states from
    /// the pod's, recorded exit codes, image names from `appsinfo`.
    #[test]
    fn list_and_status_read_a_pod_as_rkt_does() {
        use rkt::schema::{NameValue, RuntimeImage};
        let tmp = tempfile::tempdir().unwrap();
        let data = DataDir::new(tmp.path().join("data"));
        data.ensure().unwrap();
        let mut pod = Pod::create(&data).unwrap();
        let uuid = pod.uuid().to_string();
        let image = RuntimeImage {
            name: Some("example.com/web".into()),
            id: format!("sha512-{}", "ab".repeat(64)),
            labels: vec![],
        };
        let app = RuntimeApp {
            name: "0-web".into(),
            image,
            app: None,
            read_only_root_fs: false,
            mounts: vec![],
            annotations: vec![],
        };
        let mut m = PodManifest::mutable();
        m.apps.push(app);
        m.user_labels.insert("tier".into(), "web".into());
        pod.to_preparing().unwrap();
        pod.write_initial(&m).unwrap();
        let mut im = ImageManifest::new("example.com/web");
        im.labels.push(NameValue::new("version", "1.0"));
        std::fs::create_dir_all(pod.path().join("appsinfo/0-web")).unwrap();
        std::fs::write(pod.path().join("appsinfo/0-web/manifest"), serde_json::to_vec(&im).unwrap()).unwrap();
        let json = |d: &DataDir| -> serde_json::Value {
            serde_json::from_str(&list(d, Format::Json, false, false).unwrap().out).unwrap()
        };
        let text = |d: &DataDir| status(d, &uuid, Format::Tabbed).unwrap();

        // preparing: no manifest expected, Go's zero creation time; rkt's JSON refuses the pod
        let l = list(&data, Format::Tabbed, false, true).unwrap();
        assert_eq!(l.out, format!("{}\t-\t-\tpreparing\ta long while ago\t\t\n", &uuid[..8]));
        let l = list(&data, Format::Json, false, false).unwrap();
        assert_eq!((l.out.as_str(), l.errors.len()), ("null\n", 1));
        assert_eq!(text(&data), "state=preparing\ncreated=0001-01-01 00:00:00 +0000 UTC\n");

        // prepared: created from pod-created; the app "created"
        pod.to_prepared().unwrap();
        let created = GoTime::local(mtime_ns(&pod.path().join(pod::CREATED_FILE)).unwrap());
        assert_eq!(text(&data), format!("state=prepared\ncreated={}\n", created.rkt_layout()));
        let p = &json(&data)[0];
        assert_eq!((p["state"].as_str(), p["apps"][0]["state"].as_str()), (Some("prepared"), Some("created")), "{p}");
        assert_eq!(p["created_at"], created.secs);
        assert!(p.get("started_at").is_none() && p["apps"][0].get("started_at").is_none(), "{p}");
        assert_eq!(p["user_labels"]["tier"], "web");

        // running (this handle holds the lock): started from ppid, its pid, no app lines
        pod.to_run().unwrap();
        std::fs::write(pod.path().join(pod::PPID_FILE), "4321\n").unwrap();
        let started = GoTime::local(mtime_ns(&pod.path().join(pod::PPID_FILE)).unwrap());
        assert_eq!(
            text(&data),
            format!(
                "state=running\ncreated={}\nstarted={}\nnetworks=\npid=4321\nexited=false\n",
                created.rkt_layout(),
                started.rkt_layout()
            )
        );
        assert_eq!(json(&data)[0]["apps"][0]["state"], "running");

        // the app's exit recorded, the pod exited (lock released)
        let status_dir = Stage1Root::new(pod.stage1_rootfs()).status_dir();
        std::fs::create_dir_all(&status_dir).unwrap();
        std::fs::write(status_dir.join("0-web"), "7\n").unwrap();
        drop(pod);
        let out = text(&data);
        assert!(out.starts_with("state=exited\n") && out.ends_with("pid=4321\nexited=true\napp-0-web=7\n"), "{out}");
        let p = &json(&data)[0];
        assert_eq!(
            (p["apps"][0]["state"].as_str(), p["apps"][0]["exit_code"].as_i64()),
            (Some("exited"), Some(7)),
            "{p}"
        );
        assert_eq!(p["started_at"], started.secs);
        assert_eq!(
            p["apps"][0]["started_at"].as_i64(),
            mtime_ns(&data.pod_parent(PodDir::Run).join(&uuid).join("ppid"))
        );
        let full = list(&data, Format::Tabbed, true, true).unwrap().out;
        let cells: Vec<&str> = full.split('\t').filter(|c| !c.is_empty()).collect();
        assert_eq!(
            cells[..5],
            [uuid.as_str(), "0-web", "example.com/web:1.0", "sha512-abababababab", "exited"],
            "{full}"
        );
    }

    #[test]
    fn wait_values_read_as_rkts() {
        // rkt's parseDuration: empty or a true bool waits forever, a false one not
        // at all, else a Go duration (negative: forever, zero: not at all)
        let secs = |s: f64| Ok(Some(Some(Duration::from_secs_f64(s))));
        assert_eq!(parse_wait(""), Ok(Some(None)));
        assert_eq!(parse_wait("true"), Ok(Some(None)));
        assert_eq!(parse_wait("T"), Ok(Some(None)));
        assert_eq!(parse_wait("false"), Ok(None));
        assert_eq!(parse_wait("0"), Ok(None));
        assert_eq!(parse_wait("0s"), Ok(None));
        assert_eq!(parse_wait("30s"), secs(30.0));
        assert_eq!(parse_wait("1m30s"), secs(90.0));
        assert_eq!(parse_wait("1.5h"), secs(5400.0));
        assert_eq!(parse_wait("250ms"), secs(0.25));
        assert_eq!(parse_wait("-1s"), Ok(Some(None)));
        assert!(parse_wait("5").is_err());
        assert!(parse_wait("soon").is_err());
        assert!(parse_wait("3d").is_err());
        assert!(parse_wait("99999999999999999999999h").is_err(), "out of range");
    }

    #[test]
    fn status_names_one_pod() {
        let dir = std::env::temp_dir().join(format!("rktlet-uuid-file-{}", std::process::id()));
        std::fs::write(&dir, "5f0b2c3a-1d2e-4f50-8a9b-0c1d2e3f4a5b\n").unwrap();
        assert_eq!(status_uuid(None, Some(&dir)).unwrap(), "5f0b2c3a-1d2e-4f50-8a9b-0c1d2e3f4a5b");
        assert_eq!(status_uuid(Some("5f0b".into()), None).unwrap(), "5f0b");
        assert!(status_uuid(Some("5f0b".into()), Some(&dir)).is_err());
        assert!(status_uuid(None, None).is_err());
        std::fs::remove_file(&dir).unwrap();
        assert!(status_uuid(None, Some(&dir)).is_err());
    }

    #[test]
    fn times_and_sizes_read_like_rkts() {
        // go-humanize as vendored by rkt 1.30: Time (months of 30 days) and
        // IBytes (no space before the unit, "%.1f" below 10, else "%.0f")
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ns = |secs_ago: u64| ((1_800_000_000 - secs_ago) * 1_000_000_000) as i64;
        assert_eq!(ago(ns(0), now), "now");
        assert_eq!(ago(ns(1), now), "1 second ago");
        assert_eq!(ago(ns(125), now), "2 minutes ago");
        assert_eq!(ago(ns(3600), now), "1 hour ago");
        assert_eq!(ago(ns(3 * 86_400 + 5), now), "3 days ago");
        assert_eq!(ago(ns(45 * 86_400), now), "1 month ago");
        assert_eq!(ago(ns(400 * 86_400), now), "1 year ago");
        assert_eq!(ago(0, now), "never");
        assert_eq!(ibytes(5), "5B");
        assert_eq!(ibytes(512), "512B");
        assert_eq!(ibytes(1023), "1023B");
        assert_eq!(ibytes(1024), "1.0KiB");
        assert_eq!(ibytes(4_404_019), "4.2MiB");
        assert_eq!(ibytes(21_495_808), "20MiB"); // 20.5 rounds to even, as Go's %.0f
        assert_eq!(ibytes(3 << 30), "3.0GiB");
    }
}
