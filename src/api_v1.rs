//! The JSON the CLI prints with `--format=json`, in the shape of rkt's
//! `api/v1` types: `rktlet list|status` print [`PodInfo`], `rktlet app
//! list|status` print [`AppInfo`], `rktlet image list` prints [`ImageInfo`].
//! The exec design (`serve --exec-mode`) reads the same types back, so the
//! CLI and the daemon cannot drift apart.
//!
//! Times: pods in seconds (`created_at`, as rkt printed them), apps in
//! nanoseconds (as rkt's app status did).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One pod (rkt's `v1.Pod`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodInfo {
    /// The pod's UUID.
    pub name: String,
    /// rkt's state name: embryo, preparing, prepared, running, exited, ...
    pub state: String,
    /// Running and its systemd reported the pod ready.
    #[serde(default)]
    pub ready: bool,
    /// rkt's `net-info.json` entries (each has at least `netName` and `ip`).
    #[serde(default)]
    pub networks: Vec<serde_json::Value>,
    #[serde(default)]
    pub app_names: Vec<String>,
    /// Seconds since the epoch.
    #[serde(default)]
    pub created_at: Option<u64>,
    /// The sandbox (nspawn) process.
    #[serde(default)]
    pub pid: Option<i32>,
    #[serde(default)]
    pub user_annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub user_labels: BTreeMap<String, String>,
    /// The pod manifest's annotations (rktlet keeps network/IPC modes and the hostname there).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl PodInfo {
    /// The pod's IPs, first network first.
    pub fn ips(&self) -> Vec<String> {
        self.networks
            .iter()
            .filter_map(|n| n.get("ip").and_then(|ip| ip.as_str()))
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// A volume mounted into an app.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MountInfo {
    pub name: String,
    pub container_path: String,
    pub host_path: String,
    #[serde(default)]
    pub read_only: bool,
    /// private, slave or shared.
    #[serde(default)]
    pub propagation: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub selinux_relabel: bool,
    /// Asked to be read-only recursively (it is whenever `read_only` is).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recursive_read_only: bool,
}

/// One app of a pod (rkt's `v1.App`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AppInfo {
    pub name: String,
    /// created, running, exited or unknown.
    pub state: String,
    /// Nanoseconds since the epoch; 0 when not reached.
    #[serde(default)]
    pub created_at: i64,
    #[serde(default)]
    pub started_at: i64,
    #[serde(default)]
    pub finished_at: i64,
    #[serde(default)]
    pub exit_code: i32,
    /// Why it exited: Completed, Error, OOMKilled, StartError, Unknown (empty while not exited).
    #[serde(default)]
    pub reason: String,
    /// What went wrong, for a StartError.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub image_id: String,
    #[serde(default)]
    pub image_name: Option<String>,
    #[serde(default)]
    pub mounts: Vec<MountInfo>,
    #[serde(default)]
    pub user_annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub user_labels: BTreeMap<String, String>,
    /// The numeric user, group and supplementary groups it runs as.
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub supplementary_gids: Vec<u32>,
    /// What a running app uses now (`app status --app=NAME` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<AppUsage>,
}

/// An app's resource use, read from its cgroups and writable layer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AppUsage {
    pub cpu_total_ns: Option<u64>,
    pub memory_usage_bytes: Option<u64>,
    pub memory_working_set_bytes: Option<u64>,
    pub memory_rss_bytes: Option<u64>,
    pub writable_layer_bytes: Option<u64>,
    pub writable_layer_inodes: Option<u64>,
}

/// One image of the store (a row of `rkt image list --format=json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageInfo {
    pub id: String,
    pub name: String,
    pub size: u64,
    pub import_time: i64,
    pub last_used_time: i64,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub digests: Vec<String>,
}
