//! The JSON the CLI prints with `--format=json`, in the shape of rkt's
//! `api/v1` types: `rktlet list|status` print [`PodInfo`], `rktlet app
//! list|status` print [`AppInfo`], `rktlet image list` prints [`ImageInfo`].
//! The exec design (`serve --exec-mode`) reads the same types back, so the
//! CLI and the daemon cannot drift apart.
//!
//! Times: pods in seconds (`created_at`, as rkt printed them), apps in
//! nanoseconds (as rkt's app status did).

use crate::net_info::NetInfo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One pod (rkt's `v1.Pod`): rkt's fields first, in rkt's order and with
/// its `omitempty` rules, then rktlet's own (`ready`, `pid`, `annotations`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodInfo {
    /// The pod's UUID.
    pub name: String,
    /// rkt's state name: embryo, preparing, prepared, running, exited, ...
    pub state: String,
    /// rkt's `net-info.json` entries (running and exited pods).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_default")]
    pub networks: Vec<NetInfo>,
    /// The names of the pod's apps, in the manifest's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_default")]
    pub app_names: Vec<String>,
    /// Each app as rkt infers it from the pod (its state follows the pod's;
    /// `exited` with its code once one is recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_default")]
    pub apps: Vec<AppInfo>,
    /// Seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
    /// Seconds since the epoch; absent until the pod ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// The pod's annotations as its user gave them (the CRI's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "null_as_default")]
    pub user_annotations: BTreeMap<String, String>,
    /// The pod's labels as its user gave them (the CRI's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "null_as_default")]
    pub user_labels: BTreeMap<String, String>,
    /// rktlet's: running and its systemd reported the pod ready.
    #[serde(default)]
    pub ready: bool,
    /// rktlet's: the sandbox (nspawn) process.
    #[serde(default)]
    pub pid: Option<i32>,
    /// rktlet's: the pod manifest's annotations (network/IPC modes and the hostname).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl PodInfo {
    /// The pod's IPs, first network first.
    pub fn ips(&self) -> Vec<String> {
        self.networks.iter().filter_map(|n| n.ip).map(|ip| ip.to_string()).collect()
    }
}

/// `null` (Go's nil slice or map) read as empty.
fn null_as_default<'de, D: serde::Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A volume mounted into an app.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MountInfo {
    /// The volume's name in the pod manifest.
    pub name: String,
    /// Where it is mounted in the app.
    pub container_path: String,
    /// What is mounted: a path on the node.
    pub host_path: String,
    /// Mounted read-only.
    #[serde(default)]
    pub read_only: bool,
    /// private, slave or shared.
    #[serde(default)]
    pub propagation: String,
    /// Asked to be relabelled for SELinux.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub selinux_relabel: bool,
    /// Asked to be read-only recursively (it is whenever `read_only` is).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recursive_read_only: bool,
}

/// One app of a pod (rkt's `v1.App`). Printed (see `AppJson`) with
/// rkt's fields first, in rkt's order and with its `omitempty` rules (no
/// zero times; `exit_code` only once exited), then rktlet's own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(into = "AppJson")]
pub struct AppInfo {
    /// The app's name in the pod.
    pub name: String,
    /// created, running, exited or unknown.
    pub state: String,
    /// Nanoseconds since the epoch; 0 when not reached.
    #[serde(default)]
    pub created_at: i64,
    /// Nanoseconds since the epoch; 0 when not started.
    #[serde(default)]
    pub started_at: i64,
    /// Nanoseconds since the epoch; 0 while not exited.
    #[serde(default)]
    pub finished_at: i64,
    /// The main process' exit code, once exited.
    #[serde(default)]
    pub exit_code: i32,
    /// Why it exited: Completed, Error, OOMKilled, StartError, Unknown (empty while not exited).
    #[serde(default)]
    pub reason: String,
    /// What went wrong, for a StartError.
    #[serde(default)]
    pub message: String,
    /// The image's id (rkt's CAS key of its ACI).
    pub image_id: String,
    /// The image's name as it was asked for.
    #[serde(default)]
    pub image_name: Option<String>,
    /// The volumes mounted into the app.
    #[serde(default, deserialize_with = "null_as_default")]
    pub mounts: Vec<MountInfo>,
    /// The app's annotations as its user gave them (the CRI's).
    #[serde(default, deserialize_with = "null_as_default")]
    pub user_annotations: BTreeMap<String, String>,
    /// The app's labels as its user gave them (the CRI's).
    #[serde(default, deserialize_with = "null_as_default")]
    pub user_labels: BTreeMap<String, String>,
    /// The numeric user, group and supplementary groups it runs as.
    #[serde(default)]
    pub user: String,
    /// The numeric group it runs as.
    #[serde(default)]
    pub group: String,
    /// Its supplementary groups.
    #[serde(default, deserialize_with = "null_as_default")]
    pub supplementary_gids: Vec<u32>,
    /// What a running app uses now (`app status --app=NAME` only).
    #[serde(default)]
    pub usage: Option<AppUsage>,
}

/// [`AppInfo`] as printed: rkt's `v1.App` fields in its order (pointers
/// left out when nil, empty lists and maps left out), then rktlet's own,
/// left out when empty. Reading it back gives the same [`AppInfo`].
#[derive(Serialize)]
pub(crate) struct AppJson {
    name: String,
    state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    created_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    image_id: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    mounts: Vec<MountInfo>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    user_annotations: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    user_labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    reason: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    image_name: Option<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    user: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    group: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    supplementary_gids: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<AppUsage>,
}

impl From<AppInfo> for AppJson {
    fn from(a: AppInfo) -> Self {
        let set = |t: i64| (t != 0).then_some(t);
        AppJson {
            exit_code: (a.state == "exited").then_some(a.exit_code),
            name: a.name,
            state: a.state,
            created_at: set(a.created_at),
            started_at: set(a.started_at),
            finished_at: set(a.finished_at),
            image_id: a.image_id,
            mounts: a.mounts,
            user_annotations: a.user_annotations,
            user_labels: a.user_labels,
            reason: a.reason,
            message: a.message,
            image_name: a.image_name,
            user: a.user,
            group: a.group,
            supplementary_gids: a.supplementary_gids,
            usage: a.usage,
        }
    }
}

/// An app's resource use, read from its cgroups and writable layer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AppUsage {
    /// CPU time used, in nanoseconds (cpuacct.usage or cpu.stat).
    pub cpu_total_ns: Option<u64>,
    /// Memory charged to its cgroup, page cache included.
    pub memory_usage_bytes: Option<u64>,
    /// The usage less inactive file pages (what kubelet evicts on).
    pub memory_working_set_bytes: Option<u64>,
    /// Anonymous memory and swap cache.
    pub memory_rss_bytes: Option<u64>,
    /// Bytes written to its writable layer.
    pub writable_layer_bytes: Option<u64>,
    /// Inodes of its writable layer.
    pub writable_layer_inodes: Option<u64>,
}

/// One image of the store (a row of `rkt image list --format=json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageInfo {
    /// rkt's CAS key of the image's ACI (`sha512-...`).
    pub id: String,
    /// The image's name (`registry/repository:tag` for a docker image).
    pub name: String,
    /// Bytes on disk.
    pub size: u64,
    /// When it was fetched, nanoseconds since the epoch.
    pub import_time: i64,
    /// When a pod last used it, nanoseconds since the epoch.
    pub last_used_time: i64,
    /// Every reference the image is known by (rktlet's).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Its registry digests (rktlet's).
    #[serde(default)]
    pub digests: Vec<String>,
}
