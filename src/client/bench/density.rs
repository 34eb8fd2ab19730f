//! Density and concurrent starts, as a node operator meets them: `pods`
//! pods, each running one container, started `concurrency` at a time (as
//! kubelet's pod workers start them); then what the node pays for them at
//! rest, broken down by process (PSS) and by kernel memory; then all
//! stopped and removed at the same concurrency, and the node checked for
//! what they left behind (mounts, cgroups, links, processes).

use super::report::{Density, Stats};
use super::{BenchError, Session};
use crate::proto::v1 as cri;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Memory, in KiB, that is the kernel's, from /proc/meminfo: slab that
/// cannot be reclaimed, page tables, kernel stacks, per-CPU areas, and
/// tmpfs/shared memory (a pod's /run, /dev/shm), which no PSS shows.
const KERNEL_FIELDS: [(&str, &str); 5] = [
    ("SUnreclaim:", "unreclaimable slab"),
    ("PageTables:", "page tables"),
    ("KernelStack:", "kernel stacks"),
    ("Percpu:", "per-CPU"),
    ("Shmem:", "shmem/tmpfs"),
];

/// How long the node is left after the starts before memory is read: the
/// pods' own boots and the daemons' trims settle.
const REST: Duration = Duration::from_secs(3);

/// How long the teardown may take to give everything back before what is
/// left counts as left behind (shims and their cgroups go asynchronously).
const GIVE_BACK: Duration = Duration::from_secs(20);

/// What the node holds at one moment.
struct Node {
    meminfo: String,
    /// Live processes (kernel threads excluded) and their command names.
    procs: BTreeMap<i32, String>,
    mounts: usize,
    links: usize,
    /// Cgroup directories, relative to `/sys/fs/cgroup` (hierarchy first).
    cgroups: BTreeSet<String>,
}

impl Node {
    fn read() -> Node {
        let procs = super::memory::pids()
            .into_iter()
            .filter(|pid| super::memory::pss_kib(*pid).is_some())
            .map(|pid| (pid, comm(pid)))
            .collect();
        Node {
            meminfo: std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
            procs,
            mounts: std::fs::read_to_string("/proc/self/mountinfo").map(|m| m.lines().count()).unwrap_or(0),
            links: std::fs::read_dir("/sys/class/net").map(|d| d.count()).unwrap_or(0),
            cgroups: cgroup_dirs(Path::new("/sys/fs/cgroup")),
        }
    }

    fn kib(&self, field: &str) -> Option<u64> {
        crate::base::fsutil::kib_field(&self.meminfo, field)
    }

    /// `field`'s growth since `before`, KiB.
    fn grown(&self, before: &Node, field: &str) -> Option<f64> {
        Some(self.kib(field)? as f64 - before.kib(field)? as f64)
    }

    /// What is here now that was not in `before`, one phrase each.
    /// Processes count by command name: a runtime's standing helper
    /// replaced by another of its kind (rktlet's standby sandbox process)
    /// is not left behind.
    fn more_than(&self, before: &Node) -> Vec<String> {
        let mut left = Vec::new();
        for (what, now, then) in [("mounts", self.mounts, before.mounts), ("network links", self.links, before.links)] {
            if now > then {
                left.push(format!("{} {what}", now - then));
            }
        }
        if self.cgroups.len() > before.cgroups.len() {
            // named, so that a unit of the node's own (one cgroup in each
            // hierarchy) is told from a pod's
            let mut new: Vec<&str> = self
                .cgroups
                .difference(&before.cgroups)
                .map(|c| c.split_once('/').map_or(c.as_str(), |(_, inner)| inner))
                .collect();
            new.sort_unstable();
            new.dedup();
            let shown = new.iter().take(3).copied().collect::<Vec<_>>().join(", ");
            let more = if new.len() > 3 { format!(" and {} more", new.len() - 3) } else { String::new() };
            left.push(format!("{} cgroups ({shown}{more})", self.cgroups.len() - before.cgroups.len()));
        }
        let count = |procs: &BTreeMap<i32, String>| {
            let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
            for name in procs.values() {
                *by_name.entry(name.clone()).or_default() += 1;
            }
            by_name
        };
        let then = count(&before.procs);
        for (name, n) in count(&self.procs) {
            let more = n.saturating_sub(then.get(&name).copied().unwrap_or(0));
            if more > 0 {
                left.push(format!("{more} {name} processes"));
            }
        }
        left
    }
}

/// Directories under `dir` (cgroups, under the cgroup mounts) as paths
/// relative to it, not following links (v1's aliases such as `cpu` ->
/// `cpu,cpuacct`).
fn cgroup_dirs(dir: &Path) -> BTreeSet<String> {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            walk(&e.path(), &rel, out);
            out.insert(rel);
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, "", &mut out);
    out
}

/// A process's command name, or `?` once it is gone.
fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim().to_string()).unwrap_or_else(|_| "?".into())
}

/// One pod's start, as a pod worker makes it: RunPodSandbox, then
/// CreateContainer and StartContainer of its one container. On failure,
/// the pod's id if it got one (to be removed) and the failed call.
type Started = Result<(String, Duration), (Option<String>, &'static str, tonic::Status)>;

impl Session<'_> {
    /// `pods` pods started `concurrency` at a time, measured at rest, then
    /// all removed; every pod made is in `self.pods` until removed.
    pub(super) async fn density(&mut self, pods: usize, concurrency: usize) -> Result<Density, BenchError> {
        let daemon = super::memory::server_pid(&self.socket).ok();
        // one pod first, started and removed: what a node makes once, at its
        // first pod (the CNI bridge, a runtime's standby processes), is there
        // before the node is read, and is neither a pod's cost nor left behind
        let (warm, app) = (self.pod_config("density-warm-up")?, self.container_config("app"));
        let id = start_one(&mut self.rt, warm, app)
            .await
            .map_err(|(id, op, status)| {
                self.pods.extend(id);
                self.fail(op, status)
            })?
            .0;
        self.pods.push(id);
        self.remove_all(1).await?;
        super::remove_cgroup_parents();
        tokio::time::sleep(super::memory::SETTLE).await;
        let before = tokio::task::spawn_blocking(Node::read)
            .await
            .map_err(|e| BenchError::Invalid(format!("reading the node: {e}")))?;
        let permits = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
        let mut starts = tokio::task::JoinSet::new();
        for i in 0..pods {
            let config = self.pod_config(&format!("density-{i}"))?;
            let container = self.container_config("app");
            let (mut rt, permits) = (self.rt.clone(), permits.clone());
            starts.spawn(async move {
                let _permit = permits.acquire_owned().await;
                start_one(&mut rt, config, container).await
            });
        }
        let clock = Instant::now();
        let mut samples = Vec::new();
        let mut first_error = None;
        while let Some(joined) = starts.join_next().await {
            match joined {
                Ok(Ok((id, took))) => {
                    self.pods.push(id);
                    samples.push(took);
                }
                Ok(Err((id, op, status))) => {
                    self.pods.extend(id);
                    first_error.get_or_insert_with(|| self.fail(op, status));
                }
                Err(e) => {
                    first_error.get_or_insert(BenchError::Invalid(format!("a pod start's task failed: {e}")));
                }
            }
        }
        let all_running = clock.elapsed();
        if let Some(e) = first_error {
            return Err(e);
        }
        tokio::time::sleep(REST).await;
        let daemon_rss_mib = daemon.and_then(super::memory::rss_mib);
        let (at_rest, pss) = tokio::task::spawn_blocking(|| {
            let node = Node::read();
            let pss: BTreeMap<i32, u64> =
                node.procs.keys().filter_map(|pid| Some((*pid, super::memory::pss_kib(*pid)?))).collect();
            (node, pss)
        })
        .await
        .map_err(|e| BenchError::Invalid(format!("reading the node: {e}")))?;
        let per_pod = |kib: f64| kib / pods.max(1) as f64;
        let mut kernel_kib_per_pod = BTreeMap::new();
        for (field, label) in KERNEL_FIELDS {
            if let Some(kib) = at_rest.grown(&before, field) {
                kernel_kib_per_pod.insert(label.to_string(), per_pod(kib));
            }
        }
        let anon_mib_per_pod = at_rest.grown(&before, "AnonPages:").map(|kib| per_pod(kib) / 1024.0);
        let node_mib_per_pod = anon_mib_per_pod.map(|anon| anon + kernel_kib_per_pod.values().sum::<f64>() / 1024.0);

        let clock = Instant::now();
        let stop_samples = self.remove_all(concurrency).await?;
        let teardown = clock.elapsed();
        super::remove_cgroup_parents();
        let deadline = Instant::now() + GIVE_BACK;
        let after = loop {
            let after = tokio::task::spawn_blocking(Node::read)
                .await
                .map_err(|e| BenchError::Invalid(format!("reading the node: {e}")))?;
            if after.more_than(&before).is_empty() || Instant::now() > deadline {
                break after;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        // the pods' processes: those that came with the pods and went with them
        let mut pss_mib_per_pod = BTreeMap::new();
        for (pid, name) in &at_rest.procs {
            if before.procs.contains_key(pid) || after.procs.contains_key(pid) {
                continue;
            }
            if let Some(kib) = pss.get(pid) {
                *pss_mib_per_pod.entry(name.clone()).or_insert(0.0) += per_pod(*kib as f64) / 1024.0;
            }
        }
        let left_behind = after.more_than(&before);
        Ok(Density {
            pods,
            concurrency,
            start: Stats::of(&samples),
            pods_per_s: pods as f64 / all_running.as_secs_f64().max(1e-9),
            stop_remove: Stats::of(&stop_samples),
            teardown_s: teardown.as_secs_f64(),
            node_mib_per_pod,
            anon_mib_per_pod,
            kernel_kib_per_pod,
            pss_mib_per_pod,
            daemon_rss_mib,
            left_behind,
        })
    }

    /// Stops and removes every pod of this session, `concurrency` at a
    /// time; the time of each pod's StopPodSandbox + RemovePodSandbox.
    async fn remove_all(&mut self, concurrency: usize) -> Result<Vec<Duration>, BenchError> {
        let permits = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
        let mut stops = tokio::task::JoinSet::new();
        for id in std::mem::take(&mut self.pods) {
            let (mut rt, permits) = (self.rt.clone(), permits.clone());
            stops.spawn(async move {
                let _permit = permits.acquire_owned().await;
                let clock = Instant::now();
                let stopped = rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.clone() }).await;
                let removed = match stopped {
                    Ok(_) => rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await,
                    Err(e) => Err(e),
                };
                (id, removed.map(|_| clock.elapsed()))
            });
        }
        let mut samples = Vec::new();
        let mut first_error = None;
        while let Some(joined) = stops.join_next().await {
            match joined {
                Ok((_, Ok(took))) => samples.push(took),
                Ok((id, Err(status))) => {
                    self.pods.push(id);
                    first_error.get_or_insert_with(|| self.fail("StopPodSandbox + RemovePodSandbox", status));
                }
                Err(e) => {
                    first_error.get_or_insert(BenchError::Invalid(format!("a pod removal's task failed: {e}")));
                }
            }
        }
        first_error.map_or(Ok(samples), Err)
    }
}

async fn start_one(
    rt: &mut crate::proto::v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    config: cri::PodSandboxConfig,
    container: cri::ContainerConfig,
) -> Started {
    let clock = Instant::now();
    let pod = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() })
        .await
        .map_err(|e| (None, "RunPodSandbox", e))?
        .into_inner()
        .pod_sandbox_id;
    let created = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(container),
            sandbox_config: Some(config),
        })
        .await
        .map_err(|e| (Some(pod.clone()), "CreateContainer", e))?
        .into_inner()
        .container_id;
    rt.start_container(cri::StartContainerRequest { container_id: created })
        .await
        .map_err(|e| (Some(pod.clone()), "StartContainer", e))?;
    Ok((pod, clock.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(procs: &[(i32, &str)], mounts: usize, cgroups: &[&str]) -> Node {
        Node {
            meminfo: "AnonPages:     1000 kB\nSUnreclaim:      50 kB\n".into(),
            procs: procs.iter().map(|(pid, name)| (*pid, name.to_string())).collect(),
            mounts,
            links: 3,
            cgroups: cgroups.iter().map(|c| c.to_string()).collect(),
        }
    }

    #[test]
    fn left_behind_counts_by_name_and_what_grew() {
        let cg = ["memory", "memory/system.slice", "pids", "pids/system.slice"];
        let before = node(&[(1, "init"), (10, "rktlet")], 30, &cg);
        // the standby sandbox process replaced by another: nothing left
        assert!(node(&[(1, "init"), (11, "rktlet")], 30, &cg).more_than(&before).is_empty());
        // fewer mounts or cgroups than before is not something left behind
        assert!(node(&[(1, "init")], 29, &cg[..3]).more_than(&before).is_empty());
        // a unit's cgroup in two hierarchies: two cgroups, named once
        let unit = ["memory/system.slice/x.service", "pids/system.slice/x.service"];
        let after = node(
            &[(1, "init"), (11, "rktlet"), (12, "sleep"), (13, "sleep"), (14, "systemd")],
            32,
            &[&cg[..], &unit[..]].concat(),
        );
        assert_eq!(
            after.more_than(&before),
            ["2 mounts", "2 cgroups (system.slice/x.service)", "2 sleep processes", "1 systemd processes"]
                .map(String::from)
        );
        let mut grown = node(&[], 0, &[]);
        grown.meminfo = "AnonPages:     3048 kB\n".into();
        assert_eq!(grown.grown(&before, "AnonPages:"), Some(2048.0));
        assert_eq!(grown.grown(&before, "SUnreclaim:"), None);
    }
}
