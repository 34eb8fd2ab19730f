//! The daemon's shared state: configuration, the data dir and host facts.
//! Pod and container state is not kept here: it is read from disk.

mod buses;

use crate::cgroup;
use crate::config::Config;
use crate::image::{RegistryConfig, Store};
use crate::net::cni;
use crate::stage1::bus::PodBus;
use crate::stage1::host::Host;
use rkt::pod::{DataDir, PodError};
use std::sync::{Arc, RwLock};
use uuid::Uuid;

/// Everything a CRI handler needs, shared behind an `Arc`.
#[derive(Debug)]
pub(crate) struct Runtime {
    pub config: Config,
    pub data: DataDir,
    pub host: Host,
    pub cgroup_driver: cgroup::Driver,
    /// The image store (`$D/cas`) and its registry client.
    pub images: Store,
    /// Pod CIDR kubelet sent with UpdateRuntimeConfig (empty until then).
    pod_cidr: RwLock<String>,
    /// One sd-bus connection per pod, made on first use or right after the
    /// pod starts (a cache: the pod's systemd is the source of truth, and a
    /// lost connection is remade).
    buses: buses::PodBuses,
    /// Parsed pod manifests for the read paths (status, list); checked
    /// against the file on every use.
    pub manifests: crate::pod::cache::ManifestCache,
    /// What the read verbs last read about each pod, kept until it changes.
    pub pods: crate::pod::table::PodTable<crate::proto::v1::ContainerStatus>,
    /// Previous CPU samples, for the usage rates in stats.
    pub cpu_rates: crate::cgroup::stats::CpuRates,
    /// Container lifecycle events for GetContainerEvents subscribers. A
    /// broadcast channel: a subscriber that falls behind loses the oldest
    /// events (and is told so), the daemon never waits for one.
    pub events: tokio::sync::broadcast::Sender<ContainerEvent>,
    /// Pods booted ahead for RunPodSandbox (filled by `sandbox::pool::fill::refill`).
    pub pool: crate::pool::Pool,
    /// The streaming server's tokens and address (Exec URLs).
    pub streams: crate::stream::server::StreamServer,
    /// True once `reconcile` has recorded the exits missed while no daemon
    /// listened; container status waits for it (briefly) after a restart.
    reconciled: tokio::sync::watch::Sender<bool>,
    /// A double answering for every pod's systemd where the verbs need only
    /// unit calls (stop, limits): the handler tests' (`with_unit_bus`).
    unit_bus: Option<UnitBusDouble>,
}

/// The double of `Runtime::with_unit_bus`.
struct UnitBusDouble(Arc<dyn crate::stage1::bus::UnitBus + Send + Sync>);

impl std::fmt::Debug for UnitBusDouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UnitBusDouble")
    }
}

/// What happened to a container, as CRI's ContainerEventType names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    Created,
    Started,
    Stopped,
    Deleted,
}

/// One container event; subscribers read the statuses when they send it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerEvent {
    pub pod: Uuid,
    pub app: String,
    pub kind: EventKind,
    /// Nanoseconds since the epoch.
    pub at: i64,
}

impl ContainerEvent {
    pub(crate) fn now(pod: Uuid, app: &str, kind: EventKind) -> Self {
        ContainerEvent { pod, app: app.to_string(), kind, at: crate::base::time::now_nanos() }
    }
}

/// Events kept for a subscriber that has not read them yet.
const EVENT_BACKLOG: usize = 1024;

/// A readiness condition that does not hold: a CamelCase reason and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotReady {
    pub reason: &'static str,
    pub message: String,
}

/// What the runtime knows of the node it runs on: read once at start
/// ([`NodeFacts::probe`]), or given (tests run a runtime over a node of
/// their own making).
#[derive(Debug, Clone)]
pub(crate) struct NodeFacts {
    pub host: Host,
    pub cgroup_driver: cgroup::Driver,
}

impl NodeFacts {
    /// Reads the host (systemd, systemd-nspawn, security modules, the cgroup
    /// driver) and raises the kernel limits every pod draws on
    /// (`stage1::host::tune_node`): the daemon's first step.
    pub(crate) fn probe() -> Self {
        let host = Host::detect();
        crate::stage1::host::tune_node();
        let cgroup_driver = cgroup::Driver::chosen(host.pid1_is_systemd);
        if host.pid1_is_systemd
            && cgroup_driver == cgroup::Driver::Cgroupfs
            && cgroup::Layout::cached().is_ok_and(|l| !l.is_pure_v2())
        {
            tracing::warn!(
                "the cgroupfs driver on a node whose PID 1 is systemd: on cgroup v1 that systemd moves pods' \
                 processes out of their cgroups when it turns a controller on or off for its slices \
                 (an exec puts its app back); the systemd driver is the one for this node"
            );
        }
        NodeFacts { host, cgroup_driver }
    }
}

/// Each new pod's directory placed anew by ext4 where that pays (an ext4
/// without a journal: [`fsutil::spread_subdirectories`]): pods are made
/// where their directory starts out, `pods/embryo`.
///
/// [`fsutil::spread_subdirectories`]: crate::base::fsutil::spread_subdirectories
fn spread_pods(data: &DataDir) {
    let embryo = data.pod_parent(rkt::pod::PodDir::Embryo);
    match crate::base::fsutil::spread_subdirectories(&embryo) {
        Ok(spread) => tracing::debug!(dir = %embryo.display(), spread, "pod directories over block groups"),
        Err(e) => tracing::warn!(dir = %embryo.display(), error = %e, "pod directories not spread over block groups"),
    }
}

impl Runtime {
    /// Prepares the data dir layout and reads the host ([`NodeFacts::probe`]).
    pub(crate) fn new(config: Config) -> Result<Self, PodError> {
        Self::on_node(config, NodeFacts::probe())
    }

    /// Prepares the data dir layout; the node is as `node` says. Changes
    /// nothing outside the data dir.
    pub(crate) fn on_node(config: Config, node: NodeFacts) -> Result<Self, PodError> {
        let data = DataDir::new(&config.data_dir);
        data.ensure()?;
        spread_pods(&data);
        let NodeFacts { host, cgroup_driver } = node;
        let image_err =
            |e: String| PodError::Io { context: "opening the image store".into(), source: std::io::Error::other(e) };
        let registries = RegistryConfig::load(&config.registry_config).map_err(image_err)?;
        let policy = registries.policy_path(&config.registry_config);
        let images =
            Store::open(&data, registries).and_then(|s| s.with_policy(policy)).map_err(|e| image_err(e.to_string()))?;
        let pool = crate::pool::Pool::new(config.pod_pool_size, &config, &host);
        let events = tokio::sync::broadcast::channel(EVENT_BACKLOG).0;
        Ok(Runtime {
            pool,
            streams: Default::default(),
            config,
            host,
            cgroup_driver,
            images,
            pod_cidr: RwLock::new(String::new()),
            buses: buses::PodBuses::new(data.clone(), events.clone()),
            manifests: Default::default(),
            pods: crate::pod::table::PodTable::new(data.clone()),
            cpu_rates: Default::default(),
            events,
            reconciled: tokio::sync::watch::channel(false).0,
            unit_bus: None,
            data,
        })
    }

    /// Every pod's systemd answered by `bus` for the unit calls (a
    /// recording double: the handlers run over it without pods).
    #[cfg(test)]
    pub(crate) fn with_unit_bus(mut self, bus: Arc<dyn crate::stage1::bus::UnitBus + Send + Sync>) -> Self {
        self.unit_bus = Some(UnitBusDouble(bus));
        self
    }

    /// The double set by `with_unit_bus`, if any.
    pub(crate) fn unit_bus_double(&self) -> Option<&(dyn crate::stage1::bus::UnitBus + Send + Sync)> {
        self.unit_bus.as_ref().map(|d| &*d.0)
    }

    /// Where the runtime's default AppArmor profile is written.
    pub(crate) fn apparmor_dir(&self) -> std::path::PathBuf {
        self.data.root().join("apparmor")
    }

    /// RuntimeReady: the data dir is usable and pods can be launched.
    pub(crate) fn runtime_ready(&self) -> Result<(), NotReady> {
        self.data.ensure().map_err(|e| NotReady { reason: "DataDirUnavailable", message: e.to_string() })?;
        if self.host.nspawn.is_none() {
            return Err(NotReady {
                reason: "NspawnMissing",
                message: "systemd-nspawn not found (install the systemd-container package)".into(),
            });
        }
        Ok(())
    }

    /// NetworkReady: a CNI network config exists and its plugins are installed.
    pub(crate) fn network_ready(&self) -> Result<(), NotReady> {
        let not_ready = |e: cni::CniError| NotReady { reason: "NetworkPluginNotReady", message: e.to_string() };
        let net = cni::default_network(&self.config.cni_conf_dir).map_err(not_ready)?;
        net.check_plugins(&self.config.cni_bin_dirs).map_err(not_ready)
    }

    /// The program run as `<rkt> app sandbox`: `--rkt-path`, or this binary.
    pub(crate) fn sandbox_program(&self) -> std::io::Result<std::path::PathBuf> {
        match &self.config.rkt_path {
            Some(p) => Ok(p.clone()),
            None => std::env::current_exe(),
        }
    }

    /// Who supervises a pod's sandbox process: the node's systemd (a transient unit) with
    /// the systemd cgroup driver, the daemon otherwise.
    pub(crate) fn supervisor(&self) -> crate::stage1::launch::Supervisor {
        if self.cgroup_driver == cgroup::Driver::Systemd {
            crate::stage1::launch::Supervisor::NodeSystemd
        } else {
            crate::stage1::launch::Supervisor::Detached
        }
    }

    /// The pod's bus connection, connecting (and starting its exit recorder)
    /// on first use. Blocking: call from a blocking thread.
    pub(crate) fn pod_bus(&self, pod: &rkt::pod::Pod) -> Result<Arc<PodBus>, String> {
        self.buses.get(pod)
    }

    /// Connects to a pod's systemd in the background, now that it runs: its
    /// first container start then finds the connection made.
    pub(crate) fn connect_pod_bus_soon(&self, uuid: Uuid) {
        self.buses.connect_soon(uuid);
    }

    /// After a (re)start of the daemon: connects to every running pod and
    /// records the exits that happened while nobody listened, so file-based
    /// status and list are right again. Blocking.
    pub(crate) fn reconcile(&self) {
        if let Ok(pods) = self.data.list_pods() {
            for (uuid, dir) in pods {
                let mut pod = rkt::pod::Pod::at(&self.data, uuid, dir);
                // pods an older rktlet made: rkt's stop and gc work on them too
                if dir.is_listed() {
                    match crate::stage1::entrypoints::install_missing(&pod.path(), self.data.root()) {
                        Ok(true) => tracing::info!(pod = %uuid, "gave the pod rkt's stage1 manifest and entry points"),
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(pod = %uuid, error = %e, "cannot give the pod rkt's stage1 entry points")
                        }
                    }
                }
                self.reconcile_pod(&mut pod);
            }
        }
        self.reconciled.send_replace(true);
    }

    /// Waits (up to 10 s) until `reconcile` is done, so a status read right
    /// after a restart does not report an app that exited meanwhile as running.
    pub(crate) async fn wait_reconciled(&self) {
        let mut rx = self.reconciled.subscribe();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), rx.wait_for(|done| *done)).await;
    }

    /// Records the exits of one running pod's started apps from its systemd
    /// (what `reconcile` does per pod; the CLI, with no daemon listening,
    /// does it for the one pod it reports on).
    pub(crate) fn reconcile_pod(&self, pod: &mut rkt::pod::Pod) {
        if pod.state().ok() != Some(rkt::pod::PodState::Running) {
            return;
        }
        let Ok(manifest) = pod.read_manifest() else { return };
        let started: Vec<String> = manifest
            .apps
            .iter()
            .map(|a| a.name.clone())
            .filter(|name| {
                let p = crate::stage1::app::AppPaths::new(pod, name);
                p.status_file("-started").exists() && !p.status_file("").exists()
            })
            .collect();
        if started.is_empty() {
            return;
        }
        let bus = match self.pod_bus(pod) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(pod = %pod.uuid(), error = %e, "cannot reconnect to pod");
                return;
            }
        };
        for name in started {
            let paths = crate::stage1::app::AppPaths::new(pod, &name);
            if paths.status_file(crate::stage1::app::HOST_PID).exists() {
                if crate::stage1::app::exit_recorded_by_writer(&paths) {
                    continue;
                }
                // its writer is gone: nothing supervises the app (nor would
                // record its exit), so it goes, its exit unknown. Recorded
                // before the kill: the exit recorder would otherwise record
                // the unit's end (137) first, and the first record wins
                let recorded = crate::stage1::app::record_exit(&paths, 255).unwrap_or(false);
                if let Some(cg) = pod.subcgroups().ok().flatten().and_then(|subs| {
                    let layout = crate::cgroup::Layout::cached().ok()?;
                    Some(crate::cgroup::app::AppCgroup::new(layout, &subs, &name))
                }) && let Err(e) = cg.kill_unit()
                {
                    tracing::warn!(pod = %pod.uuid(), app = name, error = %e, "cannot kill a host-PID app without its log writer");
                }
                tracing::warn!(pod = %pod.uuid(), app = name, "the log writer of a host-PID app is gone: app killed, exit unknown");
                if recorded {
                    self.emit(pod.uuid(), &name, EventKind::Stopped);
                }
                continue;
            }
            let code = match bus.unit_status(&format!("{name}.service")) {
                Ok(status) => match status.main_exit() {
                    Some(exit) => Some(crate::stage1::bus::exit_code(&exit)),
                    // stopped, its exit status already dropped: as if forgotten
                    None if !status.is_active() => crate::stage1::app::vanished_exit(&paths),
                    None => None,
                },
                Err(e) if e.is_not_found() => {
                    let code = crate::stage1::app::vanished_exit(&paths);
                    if let Some(code) = code {
                        tracing::warn!(pod = %pod.uuid(), app = name, code, "the pod's systemd forgot the app's unit: exit taken as {code}");
                    }
                    code
                }
                Err(_) => None,
            };
            if let Some(code) = code
                && crate::stage1::app::record_exit(&paths, code).unwrap_or(false)
            {
                self.emit(pod.uuid(), &name, EventKind::Stopped);
            }
        }
    }

    /// Makes the pod table's view of `pod` (`PodTable::warm`) off the
    /// caller's path: after a create or a start, for the reads kubelet makes
    /// next, without holding the reply back.
    pub(crate) fn warm_later(self: &Arc<Self>, pod: Uuid) {
        let rt = Arc::clone(self);
        tokio::task::spawn_blocking(move || rt.pods.warm(&rt.manifests, &pod.to_string()));
    }

    /// Tells GetContainerEvents subscribers (none listening is fine).
    pub(crate) fn emit(&self, pod: Uuid, app: &str, kind: EventKind) {
        let _ = self.events.send(ContainerEvent::now(pod, app, kind));
    }

    /// Says a pod is being stopped: its bus closing is expected.
    pub(crate) fn expect_pod_bus_close(&self, uuid: Uuid) {
        self.buses.expect_close(uuid);
    }

    /// Forgets a pod's connection (after an error, or when the pod stops).
    pub(crate) fn drop_pod_bus(&self, uuid: Uuid) {
        self.buses.forget(uuid);
    }

    /// CNI config and plugin directories, for pod network setup and teardown.
    pub(crate) fn net_dirs(&self) -> crate::stage1::teardown::NetDirs {
        crate::stage1::teardown::NetDirs {
            conf_dir: self.config.cni_conf_dir.clone(),
            bin_dirs: self.config.cni_bin_dirs.clone(),
        }
    }

    pub(crate) fn pod_cidr(&self) -> String {
        self.pod_cidr.read().map(|c| c.clone()).unwrap_or_default()
    }

    pub(crate) fn set_pod_cidr(&self, cidr: String) {
        if let Ok(mut c) = self.pod_cidr.write() {
            *c = cidr;
        }
    }
}
