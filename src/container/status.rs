//! An app as rkt's `app status` reports it (`api_v1::AppInfo`): its state
//! from the status files, its exit and why, its mounts and identity; and
//! the usage of a running one (`rktlet app status` prints both; ContainerStatus
//! is made from the first).

use super::{ContainerError, open};
use crate::runtime::Runtime;
use crate::stage1::app::{self, AppPaths, AppState};
use crate::stage1::inject::Propagation;
use rkt::api_v1::{AppInfo, AppUsage, MountInfo};
use rkt::pod::Pod;
use rkt::schema::RuntimeApp;

/// An app as rkt's `app status` reports it: what `rktlet app status` prints
/// and what ContainerStatus is made from.
pub(crate) fn app_info(pod: &Pod, app: &RuntimeApp, running: bool) -> AppInfo {
    let paths = AppPaths::new(pod, &app.name);
    let f = app::facts(&paths, running);
    let oom = || {
        if paths.status_file(app::OOM_KILLED).exists() {
            return true;
        }
        let subs = pod.subcgroups().ok().flatten();
        let layout = crate::cgroup::Layout::cached().ok();
        subs.zip(layout).is_some_and(|(s, l)| crate::cgroup::app::AppCgroup::new(l, &s, &app.name).oom_killed())
    };
    let start_error = match f.state {
        AppState::Exited(_) => std::fs::read_to_string(paths.status_file(app::START_ERROR)).ok(),
        _ => None,
    };
    let (exit_code, reason) = match f.state {
        AppState::Exited(Some(c)) if start_error.is_some() => (c, "StartError"),
        // whenever its cgroup counted an OOM kill, as containerd says (the
        // kernel may have chosen a child: the exit code stays the app's)
        AppState::Exited(Some(c)) if oom() => (c, "OOMKilled"),
        AppState::Exited(Some(0)) => (0, "Completed"),
        AppState::Exited(Some(c)) => (c, "Error"),
        AppState::Exited(None) => (255, "Unknown"),
        _ => (0, ""),
    };
    let mounts = app
        .mounts
        .iter()
        .filter_map(|m| {
            let v = m.app_volume.as_ref()?;
            Some(MountInfo {
                name: m.volume.clone(),
                container_path: m.path.clone(),
                host_path: v.source.clone(),
                read_only: v.read_only.unwrap_or(false),
                propagation: Propagation::parse(v.propagation.as_deref()).as_str().to_string(),
                selinux_relabel: v.selinux_relabel.unwrap_or(false),
                recursive_read_only: v.recursive_read_only.unwrap_or(false),
            })
        })
        .collect();
    let section = app.app.clone().unwrap_or_default();
    AppInfo {
        name: app.name.clone(),
        state: match f.state {
            AppState::Created => "created",
            AppState::Running => "running",
            AppState::Exited(_) => "exited",
        }
        .into(),
        created_at: f.created_at,
        started_at: f.started_at,
        finished_at: f.finished_at,
        exit_code,
        reason: reason.into(),
        message: start_error.unwrap_or_default(),
        image_id: app.image.id.clone(),
        image_name: app.image.name.clone(),
        mounts,
        user_annotations: section.user_annotations,
        user_labels: section.user_labels,
        user: section.user,
        group: section.group,
        supplementary_gids: section.supplementary_gids,
        usage: None,
    }
}

/// The usage of running container `id`: its cgroups' CPU time and memory
/// (as ContainerStats reads them) and its writable layer.
pub(crate) fn usage(rt: &Runtime, id: &str) -> Result<AppUsage, ContainerError> {
    let t = open(rt, id)?;
    if !t.running {
        return Err(ContainerError::NotFound(format!("container {id} has no stats: its pod is not running")));
    }
    let sub = t.pod.read_file(rkt::pod::SUBCGROUP_FILE).ok().flatten();
    let (sample, writable) = super::stats::app_sample(rt, &t.pod, &t.app.name, id, sub.as_deref());
    let usage = sample.usage;
    Ok(AppUsage {
        cpu_total_ns: usage.cpu_ns,
        memory_usage_bytes: usage.memory.map(|m| m.usage_bytes),
        memory_working_set_bytes: usage.memory.map(|m| m.working_set_bytes),
        memory_rss_bytes: usage.memory.map(|m| m.rss_bytes),
        writable_layer_bytes: writable.map(|(bytes, _)| bytes),
        writable_layer_inodes: writable.map(|(_, inodes)| inodes),
    })
}
