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
    block_on(teardown::remove_pod(data, id, Duration::from_secs(10), net))
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
