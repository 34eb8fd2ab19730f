//! The daemon's table of pods for the read verbs kubelet calls all the time
//! (PodSandboxStatus, ContainerStatus, ListPodSandbox, ListContainers): what
//! was read from a pod directory is kept until the pod changes, so a read of
//! an unchanged pod makes no file system call at all.
//!
//! The pod directories stay the truth; the table only remembers. Rules:
//! - Every use starts with [`PodWatch::drain`]: changes completed before the
//!   request are seen (the kernel queues the event inside the changing call).
//! - A pod's watches (and, if it runs, a pidfd of its sandbox process) are in
//!   place before its files are read, so a change during the read is
//!   reported too; a view is stored only if no change to that pod was
//!   reported between the start of its read and the store (epochs).
//! - Only views of a pod that can change only in watched ways are stored: a
//!   running pod whose sandbox exit is watched, or an exited one. Pods being
//!   prepared, or whose watches could not be set, are read from disk on
//!   every request, as before the table existed.
//! - Without inotify (or if the pod state directories cannot be watched) the
//!   table is off and every request reads from disk.

use crate::pod::cache::ManifestCache;
use crate::pod::watch::{Change, PodWatch};
use rkt::pod::{self, DataDir, Pod, PodDir, PodError, PodState};
use rkt::schema::{PodManifest, RuntimeApp};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::UNIX_EPOCH;
use uuid::Uuid;

/// What the table keeps of each app of a pod, read from the pod's files
/// (the daemon keeps CRI's `ContainerStatus`, made by `cri::container_status`).
pub(crate) trait AppStatus: Clone {
    /// The app's status, read from its pod (`running`: the pod's state).
    fn read(pod: &Pod, app: &RuntimeApp, running: bool) -> Self;
}

/// What the read verbs need to know about one pod.
pub(crate) struct SandboxView {
    pub pod: Pod,
    pub state: PodState,
    pub ready: bool,
    pub manifest: Arc<PodManifest>,
    pub created_at: i64,
    pub ips: Vec<String>,
}

impl SandboxView {
    /// Everything, read from the pod directory (the pod table keeps it).
    pub(crate) fn load(mut pod: Pod, manifests: &ManifestCache) -> Result<Self, PodError> {
        let state = pod.state()?;
        let manifest = manifests.read(&pod)?;
        let ready = state == PodState::Running && pod.is_ready();
        let created_at = pod
            .created_at()?
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let ips = pod.read_file(pod::NET_INFO_FILE)?.map(|s| ips_from_net_info(&s)).unwrap_or_default();
        Ok(SandboxView { pod, state, ready, manifest, created_at, ips })
    }

    /// The same view for another handle of the same pod.
    pub(crate) fn same(&self, pod: Pod) -> Self {
        SandboxView {
            pod,
            state: self.state,
            ready: self.ready,
            manifest: self.manifest.clone(),
            created_at: self.created_at,
            ips: self.ips.clone(),
        }
    }
}

/// Pod IPs from rkt's `net-info.json` (array of `{.., "ip": ..}`), first network first.
pub(crate) fn ips_from_net_info(text: &str) -> Vec<String> {
    let Ok(serde_json::Value::Array(nets)) = serde_json::from_str(text) else { return Vec::new() };
    nets.iter()
        .filter_map(|n| n.get("ip").and_then(|ip| ip.as_str()))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// A pod as the read verbs show it.
pub(crate) struct PodView<S> {
    pub sandbox: SandboxView,
    /// The statuses of its containers, in manifest order.
    pub containers: Vec<S>,
    /// Its cgroup below the hierarchies' roots (`subcgroup`).
    pub subcgroup: Option<String>,
    /// Its sandbox process (`ppid`).
    pub sandbox_pid: Option<i32>,
}

/// A pod's view, or why it could not be read.
pub(crate) type ViewResult<S> = Result<Arc<PodView<S>>, PodError>;

struct Slot<S> {
    /// Changes whenever something about the pod was reported changed.
    epoch: u64,
    view: Option<Arc<PodView<S>>>,
    /// The view before the changes reported since: what of it did not
    /// change is taken into the next read instead of being read again.
    last: Option<Arc<PodView<S>>>,
    /// Changed since `last`: something besides app status files.
    pod_changed: bool,
    /// Changed since `last`: these entries of `/rkt/status`.
    statuses: Vec<String>,
}

impl<S> Slot<S> {
    fn new(epoch: u64) -> Self {
        Slot { epoch, view: None, last: None, pod_changed: false, statuses: Vec::new() }
    }

    /// Drops the view, keeping it as `last` for the next read.
    fn invalidate(&mut self, epoch: u64) {
        self.epoch = epoch;
        if let Some(view) = self.view.take() {
            self.last = Some(view);
            self.pod_changed = false;
            self.statuses.clear();
        }
    }
}

/// How a request gets a pod's view: kept, or read (from the epoch the read
/// starts at, stored only if the pod is watched).
enum Plan<S> {
    Kept(Arc<PodView<S>>),
    Read { epoch: u64, watched: bool, base: Base<S> },
}

/// What a read of a pod can take from its last view instead of the disk.
struct Base<S> {
    last: Option<Arc<PodView<S>>>,
    pod_changed: bool,
    statuses: Vec<String>,
}

impl<S> Base<S> {
    /// Nothing to take: the pod is read whole.
    fn none() -> Self {
        Base { last: None, pod_changed: false, statuses: Vec::new() }
    }
}

struct Inner<S> {
    watch: PodWatch,
    listing: Option<Arc<Vec<(Uuid, PodDir)>>>,
    listing_epoch: u64,
    slots: HashMap<Uuid, Slot<S>>,
    /// Source of epochs: never repeats, so a slot made again after its pod
    /// was gone cannot be mistaken for the one a read started with.
    next_epoch: u64,
}

impl<S> Inner<S> {
    /// Stores a view read from disk if nothing was reported about its pod
    /// since the read started and its state can only change in watched ways:
    /// running with its sandbox's exit watched, or exited.
    fn keep(&mut self, uuid: Uuid, epoch: u64, view: Arc<PodView<S>>, pidfd: Option<OwnedFd>) {
        if self.watch.is_broken() {
            return;
        }
        let keepable = match (view.sandbox.state, pidfd) {
            (PodState::Running, fd) => {
                // (no new pidfd: the view reused a sandbox whose exit is watched)
                if let Some(fd) = fd {
                    self.watch.watch_exit(uuid, fd);
                }
                self.watch.watches_exit(uuid)
            }
            (PodState::Exited, _) => true,
            _ => false,
        };
        if let Some(slot) = self.slots.get_mut(&uuid)
            && keepable
            && slot.epoch == epoch
        {
            slot.view = Some(view);
            slot.last = None;
            slot.statuses.clear();
        }
    }

    fn epoch(&mut self) -> u64 {
        self.next_epoch += 1;
        self.next_epoch
    }

    fn sync(&mut self) {
        for change in self.watch.drain() {
            match change {
                Change::All => {
                    self.listing = None;
                    self.listing_epoch = self.epoch();
                    let epoch = self.epoch();
                    for slot in self.slots.values_mut() {
                        *slot = Slot::new(epoch);
                    }
                }
                Change::Listing => {
                    self.listing = None;
                    self.listing_epoch = self.epoch();
                }
                Change::Pod(uuid) => {
                    let epoch = self.epoch();
                    if let Some(slot) = self.slots.get_mut(&uuid) {
                        slot.invalidate(epoch);
                        slot.pod_changed = true;
                    }
                }
                Change::Status(uuid, name) => {
                    let epoch = self.epoch();
                    if let Some(slot) = self.slots.get_mut(&uuid) {
                        slot.invalidate(epoch);
                        if slot.last.is_some() {
                            slot.statuses.push(name);
                        }
                        // a pod whose views are not kept (its exit unwatched)
                        // would collect entries for its whole life: read it whole
                        if slot.statuses.len() > MAX_STATUS_CHANGES {
                            slot.last = None;
                            slot.statuses.clear();
                        }
                    }
                }
                Change::Unwatched(uuid) => {
                    let epoch = self.epoch();
                    if let Some(slot) = self.slots.get_mut(&uuid) {
                        *slot = Slot::new(epoch);
                    }
                }
                Change::Gone(uuid) => {
                    self.slots.remove(&uuid);
                }
            }
        }
    }
}

/// Whether any of these `/rkt/status` entries is the app's (`<app>` or
/// `<app>-<what>`; one that another app's name also prefixes counts for
/// both), or belongs to none of `apps` (then it counts for every app).
fn touched(app: &str, apps: &[RuntimeApp], statuses: &[String]) -> bool {
    touched_by_name(app, || apps.iter().map(|a| a.name.as_str()), statuses)
}

fn touched_by_name<'a, I: Iterator<Item = &'a str>>(app: &str, apps: impl Fn() -> I, statuses: &[String]) -> bool {
    // `<app>`, `<app>-created` and the like, and `<app>.tmp-<id>` (an exit record being written)
    let owns = |name: &str, entry: &str| {
        entry.strip_prefix(name).is_some_and(|r| r.is_empty() || r.starts_with('-') || r.starts_with('.'))
    };
    statuses.iter().any(|s| owns(app, s) || (!s.starts_with('.') && !apps().any(|a| owns(a, s))))
}

/// Status entries changed since a pod's last view beyond which it is read whole.
const MAX_STATUS_CHANGES: usize = 64;

pub(crate) struct PodTable<S> {
    data: DataDir,
    inner: Option<Mutex<Inner<S>>>,
}

impl<S> std::fmt::Debug for PodTable<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodTable").field("enabled", &self.inner.is_some()).finish()
    }
}

impl<S: AppStatus> PodTable<S> {
    /// A table over `data`'s pods; off (every read from disk) if the state
    /// directories cannot be watched.
    pub(crate) fn new(data: DataDir) -> Self {
        let inner = match PodWatch::new(&data) {
            Ok(watch) => {
                Some(Mutex::new(Inner { watch, listing: None, listing_epoch: 0, slots: HashMap::new(), next_epoch: 0 }))
            }
            Err(e) => {
                tracing::warn!(error = %e, "pod table off: cannot watch the pod directories; reads go to disk");
                None
            }
        };
        Self { data, inner }
    }

    fn lock(&self) -> Option<MutexGuard<'_, Inner<S>>> {
        let mut inner = self.inner.as_ref()?.lock().ok()?;
        inner.sync();
        Some(inner)
    }

    /// Every pod directory and the state directory it is in: kept in
    /// `inner` (already synced), or read from disk.
    fn listing_in(&self, inner: Option<MutexGuard<'_, Inner<S>>>) -> Result<Arc<Vec<(Uuid, PodDir)>>, PodError> {
        let epoch = match &inner {
            None => return Ok(Arc::new(self.data.list_pods()?)),
            Some(inner) => match &inner.listing {
                Some(l) => return Ok(l.clone()),
                None => inner.listing_epoch,
            },
        };
        drop(inner);
        let listing = Arc::new(self.data.list_pods()?);
        if let Some(mut inner) = self.lock() {
            if inner.listing_epoch == epoch && !inner.watch.is_broken() {
                inner.listing = Some(listing.clone());
            }
            let present: std::collections::HashSet<Uuid> = listing.iter().map(|(u, _)| *u).collect();
            inner.slots.retain(|u, _| present.contains(u));
        }
        Ok(listing)
    }

    /// The views of the pods `select` picks from the listing, in its order,
    /// kept from earlier reads where the pods did not change since. One
    /// request, one drain of the change queue (more only to store new reads).
    pub(crate) fn views(
        &self,
        manifests: &ManifestCache,
        select: impl FnOnce(&[(Uuid, PodDir)]) -> Result<Vec<(Uuid, PodDir)>, PodError>,
    ) -> Result<Vec<(Uuid, ViewResult<S>)>, PodError> {
        let mut inner = self.lock();
        let listing = match inner.as_ref().and_then(|i| i.listing.clone()) {
            Some(l) => l,
            None => {
                let l = self.listing_in(inner.take())?;
                // parsed manifests of pods that are gone go with a new listing
                manifests.retain(&l.iter().map(|(uuid, _)| *uuid).collect());
                inner = self.lock();
                l
            }
        };
        let wanted = select(&listing)?;
        // what is kept, and for the rest the epoch their read starts at
        let mut out: Vec<(Uuid, Plan<S>)> = Vec::with_capacity(wanted.len());
        for &(uuid, dir) in &wanted {
            let Some(inner) = inner.as_mut() else {
                out.push((uuid, Plan::Read { epoch: 0, watched: false, base: Base::none() }));
                continue;
            };
            if let Some(view) = inner.slots.get(&uuid).and_then(|s| s.view.clone()) {
                out.push((uuid, Plan::Kept(view)));
                continue;
            }
            let (epoch, base) = match inner.slots.get(&uuid) {
                Some(slot) => (
                    slot.epoch,
                    Base { last: slot.last.clone(), pod_changed: slot.pod_changed, statuses: slot.statuses.clone() },
                ),
                None => {
                    let epoch = inner.epoch();
                    inner.slots.insert(uuid, Slot::new(epoch));
                    (epoch, Base::none())
                }
            };
            let watched = inner.watch.watch_pod(uuid, &self.data.pod_parent(dir).join(uuid.to_string()));
            // what was read before the watches were in place is not to be trusted
            let base = if watched { base } else { Base::none() };
            out.push((uuid, Plan::Read { epoch, watched, base }));
        }
        drop(inner);
        let mut loaded = Vec::new();
        let mut result = Vec::with_capacity(out.len());
        for ((uuid, plan), &(_, dir)) in out.into_iter().zip(&wanted) {
            match plan {
                Plan::Kept(view) => result.push((uuid, Ok(view))),
                Plan::Read { epoch, watched, base } => match self.load(manifests, uuid, dir, &base) {
                    Ok((view, pidfd)) => {
                        if watched {
                            loaded.push((uuid, epoch, view.clone(), pidfd));
                        }
                        result.push((uuid, Ok(view)));
                    }
                    Err(e) => result.push((uuid, Err(e))),
                },
            }
        }
        if !loaded.is_empty()
            && let Some(mut inner) = self.lock()
        {
            for (uuid, epoch, view, pidfd) in loaded {
                inner.keep(uuid, epoch, view, pidfd);
            }
        }
        Ok(result)
    }

    /// Reads a pod's view from disk, but for what `base` says did not
    /// change; a pidfd of its sandbox if it runs and was read again.
    fn load(
        &self,
        manifests: &ManifestCache,
        uuid: Uuid,
        dir: PodDir,
        base: &Base<S>,
    ) -> Result<(Arc<PodView<S>>, Option<OwnedFd>), PodError> {
        let pod = Pod::at(&self.data, uuid, dir);
        // only app status files changed: the pod as it was read last
        let (sandbox, subcgroup, sandbox_pid, pidfd) =
            match base.last.as_ref().filter(|l| !base.pod_changed && l.sandbox.pod.dir() == dir) {
                Some(last) => (last.sandbox.same(pod), last.subcgroup.clone(), last.sandbox_pid, None),
                None => {
                    // the exit watch exists before the lock is probed: an exit after the probe is reported
                    let sandbox_pid = pod.sandbox_pid().ok().flatten();
                    let pidfd = sandbox_pid.and_then(|pid| crate::base::sys::pidfd_open(pid).ok());
                    let subcgroup = pod.read_file(pod::SUBCGROUP_FILE).ok().flatten();
                    (SandboxView::load(pod, manifests)?, subcgroup, sandbox_pid, pidfd)
                }
            };
        let running = sandbox.state == PodState::Running;
        // an app whose entry, status files and pod state are as in the last
        // view keeps its status (after a manifest rewrite for an app added or
        // removed, too)
        let unchanged = |(at, app): (usize, &RuntimeApp)| {
            let last = base.last.as_ref().filter(|l| l.sandbox.state == sandbox.state)?;
            let before = &last.sandbox.manifest.apps;
            // (where it was, unless apps before it went)
            let i = match before.get(at) {
                Some(a) if a.name == app.name => at,
                _ => before.iter().position(|a| a.name == app.name)?,
            };
            let same_entry = Arc::ptr_eq(&last.sandbox.manifest, &sandbox.manifest) || before[i] == *app;
            (same_entry && !touched(&app.name, &sandbox.manifest.apps, &base.statuses))
                .then(|| last.containers.get(i).cloned())
                .flatten()
        };
        let containers = sandbox
            .manifest
            .apps
            .iter()
            .enumerate()
            .map(|(i, a)| unchanged((i, a)).unwrap_or_else(|| S::read(&sandbox.pod, a, running)))
            .collect();
        let view = Arc::new(PodView { sandbox, containers, subcgroup, sandbox_pid });
        Ok((view, pidfd.filter(|_| running)))
    }

    /// Reads a pod's view after the daemon changed the pod (as it answers,
    /// or after: `Runtime::warm_later`): kubelet asks for the status right
    /// after every change it makes, and finds it kept (the next change of
    /// the pod drops it again).
    pub(crate) fn warm(&self, manifests: &ManifestCache, id: &str) {
        if self.inner.is_none() {
            return;
        }
        let on_workers = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if on_workers {
            let _ = tokio::task::block_in_place(|| self.view_of(manifests, id));
        } else {
            let _ = self.view_of(manifests, id);
        }
    }

    /// The view of a pod named by id (UUID or unique prefix).
    pub(crate) fn view_of(&self, manifests: &ManifestCache, id: &str) -> Result<Arc<PodView<S>>, PodError> {
        let data = &self.data;
        let mut views = self.views(manifests, |listing| {
            let uuid = match Uuid::parse_str(id) {
                Ok(uuid) => uuid,
                Err(_) => data.resolve_in(id, listing.iter().map(|(u, _)| *u))?,
            };
            let found = listing.iter().find(|(u, _)| *u == uuid).copied();
            Ok(vec![found.ok_or_else(|| PodError::NotFound(id.to_string()))?])
        })?;
        match views.pop() {
            Some((_, view)) => view,
            None => Err(PodError::NotFound(id.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ips_from_net_info, touched_by_name};

    #[test]
    fn net_info_ips() {
        let text = r#"[{"netName":"pods","netConf":"/etc/cni/net.d/10.conflist","pluginPath":"/usr/lib/cni/bridge",
            "ifName":"eth0","ip":"10.88.0.5","args":"","mask":"255.255.0.0"},
            {"netName":"b","netConf":"","pluginPath":"","ifName":"eth1","ip":"fd00::5","args":"","mask":""}]"#;
        assert_eq!(ips_from_net_info(text), ["10.88.0.5", "fd00::5"]);
        assert!(ips_from_net_info("garbage").is_empty());
    }

    #[test]
    fn status_entries_name_their_apps() {
        let apps = || ["0-web", "0-web-sidecar", "1-db"].into_iter();
        let changed = |entries: &[&str]| -> Vec<&str> {
            let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
            apps().filter(|a| touched_by_name(a, apps, &entries)).collect()
        };
        assert_eq!(changed(&["1-db-started"]), ["1-db"]);
        assert_eq!(changed(&["1-db"]), ["1-db"], "the exit record");
        // a name another app's name prefixes counts for both
        assert_eq!(changed(&["0-web-sidecar-created"]), ["0-web", "0-web-sidecar"]);
        assert_eq!(changed(&["0-web-started"]), ["0-web"]);
        // an entry of no app: everything; a temporary file: nothing
        assert_eq!(changed(&["2-new-created"]), ["0-web", "0-web-sidecar", "1-db"]);
        assert!(changed(&[".tmp-1-db"]).is_empty());
        // the temporary file of an exit record (app::record_exit) is its app's
        assert_eq!(changed(&["1-db.tmp-0f1e2d3c"]), ["1-db"]);
        assert!(changed(&[]).is_empty());
    }
}
