//! The rkt-style pod commands (`list`, `status`, `stop`, `rm`, `gc`) over the
//! same data directory the daemon uses. These are what an operator runs, and
//! what the exec design of the benchmark calls per CRI request.

use crate::api_v1::PodInfo;
use crate::pod::{self, DataDir, Pod, PodDir, PodError, PodState};
use crate::stage1::rootfs::Stage1Root;
use crate::stage1::teardown::{self, NetDirs, TeardownError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One pod as `rkt list --format=json` shows it.
pub fn pod_info(pod: &mut Pod) -> Result<PodInfo, PodError> {
    let state = pod.state()?;
    let manifest = pod.read_manifest().ok();
    let created_at = pod.created_at().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_secs());
    let networks: Vec<serde_json::Value> = pod
        .read_file(pod::NET_INFO_FILE)?
        .and_then(|s| serde_json::from_str::<Vec<serde_json::Value>>(&s).ok())
        .unwrap_or_default();
    let mut info = PodInfo {
        name: pod.uuid().to_string(),
        state: state.as_str().to_string(),
        ready: state == PodState::Running && Stage1Root::new(pod.stage1_rootfs()).is_ready(),
        networks,
        created_at,
        pid: pod.sandbox_pid().ok().flatten(),
        ..Default::default()
    };
    if let Some(m) = manifest {
        info.app_names = m.apps.iter().map(|a| a.name.clone()).collect();
        info.annotations = m.annotations.iter().flatten().map(|a| (a.name.clone(), a.value.clone())).collect();
        info.user_annotations = m.user_annotations;
        info.user_labels = m.user_labels;
    }
    Ok(info)
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// `rktlet list`: every pod (but idle pool pods), as a table or JSON.
pub fn list(data: &DataDir, json: bool) -> Result<String, PodError> {
    let mut rows = Vec::new();
    for (uuid, _) in data.list_pods()? {
        match Pod::open(data, &uuid.to_string()).and_then(|mut p| pod_info(&mut p)) {
            // waiting in the daemon's pod pool: nobody's pod yet
            Ok(v) if v.annotations.contains_key(crate::pool::POOL_ANNOTATION) => continue,
            Ok(v) => rows.push(v),
            Err(PodError::NotFound(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    if json {
        return Ok(to_json(&rows));
    }
    let mut out = String::from("UUID\tSTATE\tAPPS\tNETWORKS\n");
    for r in rows {
        out.push_str(&format!("{}\t{}\t{}\t{}\n", r.name, r.state, r.app_names.join(","), r.ips().join(",")));
    }
    Ok(out)
}

/// `rktlet status UUID`.
pub fn status(data: &DataDir, id: &str, json: bool) -> Result<String, PodError> {
    let mut pod = Pod::open(data, id)?;
    let info = pod_info(&mut pod)?;
    if json {
        return Ok(to_json(&info));
    }
    let v = serde_json::to_value(&info).unwrap_or_default();
    let mut out = String::new();
    if let serde_json::Value::Object(map) = v {
        for (k, v) in map {
            out.push_str(&format!("{k}={v}\n"));
        }
    }
    Ok(out)
}

fn block_on<T>(f: impl Future<Output = Result<T, TeardownError>>) -> Result<T, TeardownError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TeardownError::Worker(e.to_string()))?
        .block_on(f)
}

/// `rktlet stop UUID`: stop a pod and release its network (`force` skips the grace period).
pub fn stop_pod(data: &DataDir, id: &str, force: bool, net: &NetDirs) -> Result<(), TeardownError> {
    let grace = if force { Duration::ZERO } else { Duration::from_secs(10) };
    block_on(teardown::stop_pod(data, id, grace, net))
}

/// `rktlet rm UUID`: stop if needed and delete a pod with its network.
pub fn rm_pod(data: &DataDir, id: &str, net: &NetDirs) -> Result<(), TeardownError> {
    block_on(teardown::remove_pod(data, id, Duration::from_secs(10), net, teardown::Deletion::Now))
}

/// rkt's stage1 `stop` entry point (`rkt stop [--force] UUID`): stops the
/// pod as `rktlet stop` does, with the CNI directories the daemon recorded.
pub fn stage1_stop(data: &DataDir, id: &str, force: bool) -> Result<(), TeardownError> {
    stop_pod(data, id, force, &crate::stage1::entrypoints::recorded_net(data))
}

/// rkt's stage1 `gc` entry point (`rkt gc`/`rkt rm`, before they delete the
/// pod directory): releases what the exited pod holds on the node (mounts,
/// cgroup, network, a failed sandbox unit) as the daemon's teardown does.
/// Nothing to do for a pod already torn down or gone; refused for a running pod.
pub fn stage1_gc(data: &DataDir, id: &str) -> Result<(), TeardownError> {
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
/// `image list` shows times: "now", "1 minute ago", "3 days ago"; "never" for 0.
pub fn ago(unix_ns: i64, now: SystemTime) -> String {
    if unix_ns <= 0 {
        return "never".into();
    }
    let then = UNIX_EPOCH + Duration::from_nanos(unix_ns as u64);
    let Ok(age) = now.duration_since(then) else { return "now".into() };
    let secs = age.as_secs();
    let (n, unit) = match secs {
        0 => return "now".into(),
        1..60 => (secs, "second"),
        60..3600 => (secs / 60, "minute"),
        3600..86_400 => (secs / 3600, "hour"),
        86_400..604_800 => (secs / 86_400, "day"),
        604_800..2_629_800 => (secs / 604_800, "week"),
        2_629_800..31_557_600 => (secs / 2_629_800, "month"),
        _ => (secs / 31_557_600, "year"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

/// A size in bytes as rkt's `image list` shows it: "512 B", "4.2 MiB".
pub fn ibytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{v:.1} {}", UNITS[unit]) }
}

/// `rktlet gc --mark-only`, as rkt's: moves exited pods to `exited-garbage/`
/// and aborted prepares to `garbage/`, deleting nothing. Returns the uuids moved.
pub fn gc_mark(data: &DataDir) -> Result<Vec<String>, PodError> {
    let mut marked = Vec::new();
    for (uuid, dir) in data.list_pods()? {
        if !matches!(dir, PodDir::Run | PodDir::Prepare) {
            continue;
        }
        let Ok(mut pod) = Pod::open(data, &uuid.to_string()) else { continue };
        let moved = match pod.state()? {
            PodState::Exited => pod.to_exited_garbage(),
            PodState::AbortedPrepare => pod.to_garbage(),
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
/// aborted prepares and garbage. Returns the uuids removed.
pub fn gc(data: &DataDir, grace: Duration, net: &NetDirs) -> Result<Vec<String>, TeardownError> {
    let mut removed = Vec::new();
    let now = SystemTime::now();
    for (uuid, dir) in data.list_pods()? {
        let Ok(mut pod) = Pod::open(data, &uuid.to_string()) else { continue };
        let collect = match pod.state()? {
            PodState::Exited => {
                pod.created_at().ok().and_then(|t| now.duration_since(t).ok()).is_some_and(|age| age >= grace)
            }
            PodState::AbortedPrepare | PodState::Garbage | PodState::ExitedGarbage => true,
            _ => false,
        };
        if collect && dir != PodDir::Embryo {
            rm_pod(data, &pod.uuid().to_string(), net)?;
            removed.push(uuid.to_string());
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_sizes_read_like_rkts() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ns = |secs_ago: u64| ((1_800_000_000 - secs_ago) * 1_000_000_000) as i64;
        assert_eq!(ago(ns(0), now), "now");
        assert_eq!(ago(ns(1), now), "1 second ago");
        assert_eq!(ago(ns(125), now), "2 minutes ago");
        assert_eq!(ago(ns(3600), now), "1 hour ago");
        assert_eq!(ago(ns(3 * 86_400 + 5), now), "3 days ago");
        assert_eq!(ago(ns(400 * 86_400), now), "1 year ago");
        assert_eq!(ago(0, now), "never");
        assert_eq!(ibytes(512), "512 B");
        assert_eq!(ibytes(4_404_019), "4.2 MiB");
        assert_eq!(ibytes(3 << 30), "3.0 GiB");
    }
}
