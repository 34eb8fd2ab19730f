//! `rktlet bench`: the end-to-end CRI benchmark. It drives any CRI endpoint
//! over its unix socket with critest-style lifecycles and reports p50/p90/p99
//! per operation and endpoint, with ratios to the first endpoint, as
//! Markdown, JSON and an SVG chart (`report`), plus memory figures (`memory`).
//!
//! Endpoints are measured one after another, never at once, so that no
//! endpoint's pods or execs load the machine while another is timed. Each
//! endpoint runs, in order: the gRPC floor (Version), the image lifecycle
//! (pull/status/list/remove), the pod lifecycle (run/status/stop/remove), the
//! container lifecycle in one pod (create/start/status/exec/stop/remove), then
//! list calls (ListPodSandbox, ListContainers, ListPodSandboxStats,
//! ListContainerStats) with 10/50/100 pods each running one container, with
//! the daemon's RSS at each count; then, where asked, density runs
//! (`density`: many pods started and removed a few at a time, the node's
//! memory per pod at rest, what was left behind). Everything it made is
//! removed at the end, also after a failed call.

mod daemon_log;
mod density;
pub(crate) mod memory;
pub(crate) mod report;

use crate::proto::v1 as cri;
use crate::proto::v1::image_service_client::ImageServiceClient;
use crate::proto::v1::runtime_service_client::RuntimeServiceClient;
use report::{Memory, Report};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A CRI endpoint to measure: `NAME=SOCKET`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Endpoint {
    pub name: String,
    pub socket: PathBuf,
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, socket) = s.split_once('=').ok_or_else(|| format!("endpoint {s:?} is not NAME=SOCKET"))?;
        let socket = socket.strip_prefix("unix://").unwrap_or(socket);
        if name.is_empty() || socket.is_empty() {
            return Err(format!("endpoint {s:?} is not NAME=SOCKET"));
        }
        Ok(Endpoint { name: name.to_string(), socket: PathBuf::from(socket) })
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The first is the baseline of the ratios.
    pub endpoints: Vec<Endpoint>,
    /// The containers' image; it must have `sh` and `sleep`.
    pub image: String,
    /// The image of the pull lifecycle (pulled and removed every round).
    pub pull_image: String,
    /// Lifecycles per operation.
    pub rounds: usize,
    /// Rounds of the image lifecycle (a pull of the pull image each).
    pub image_rounds: usize,
    /// Pod counts at which the list calls are measured.
    pub list_pods: Vec<usize>,
    /// Pods on the host network instead of the runtime's pod network (CNI).
    pub host_network: bool,
    /// Containers in their pod's PID namespace (CRI `POD`) instead of one
    /// each (`CONTAINER`, kubelet's default).
    pub shared_pid_namespace: bool,
    /// Where the pods' log directories go.
    pub log_dir: PathBuf,
    /// Endpoints measured on the pod lifecycle only (e.g. a second daemon
    /// that differs in how it starts pods).
    pub pods_only: Vec<String>,
    /// Endpoints (by NAME) measured with the image lifecycle's rounds in
    /// every lifecycle: one whose calls take seconds (exec mode) would make
    /// a run of hundreds of rounds last an hour.
    pub few_rounds: Vec<String>,
    /// Pod counts of the density runs (none: no density run); on every
    /// endpoint not in `pods_only` or `few_rounds`.
    pub density: Vec<usize>,
    /// Pods started (and removed) at once in a density run.
    pub concurrency: usize,
    /// Only the density runs (and the gRPC floor).
    pub density_only: bool,
    /// Untimed pod + container lifecycles per endpoint before its first
    /// timed call.
    pub warmup: usize,
    /// Facts about the run the caller knows (`--context KEY=VALUE`): the
    /// report's context gets them as they are.
    pub context: Vec<(String, String)>,
    /// Endpoints' daemon logs (`NAME=PATH`, rktlet's JSON lines with its
    /// teardown at debug): each StopPodSandbox's CNI DEL is read from there.
    pub daemon_logs: Vec<Endpoint>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    #[error("{endpoint}: cannot connect to {socket}: {message}")]
    Connect { endpoint: String, socket: String, message: String },
    #[error("{endpoint}: {operation} failed: {code:?}: {message}")]
    Call { endpoint: String, operation: String, code: tonic::Code, message: String },
    #[error("{0}")]
    Invalid(String),
    #[error("cannot make the pod log directory {path}: {source}")]
    LogDir { path: String, source: std::io::Error },
}

/// The cgroupfs parent of the pods' cgroup parents (removed after each endpoint).
const CGROUP_ROOT: &str = "rktlet-bench";
/// The systemd driver's: the pods' parent slices are `<SLICE>-pod<uid>.slice`,
/// in `<SLICE>.slice` (as kubelet's are in `kubepods.slice`).
const SLICE: &str = "rktletbench";

/// Suffix of the operations that only set up a measurement.
const SETUP: &str = " (setup)";
/// The pod lifecycle's StopPodSandbox, split at its CNI DEL (the daemon's log).
const STOP_CNI_DEL: &str = "StopPodSandbox: its CNI DEL";
const STOP_BEYOND_CNI_DEL: &str = "StopPodSandbox: beyond its CNI DEL";

/// Per-operation samples of one endpoint.
type Samples = BTreeMap<String, Vec<Duration>>;

/// One endpoint's connection and what it made (removed at the end).
struct Session<'a> {
    name: String,
    socket: PathBuf,
    opts: &'a Options,
    rt: RuntimeServiceClient<Channel>,
    img: ImageServiceClient<Channel>,
    samples: Samples,
    /// Operation names in the order first measured.
    order: Vec<String>,
    pods: Vec<String>,
    /// False once the endpoint answered Unimplemented to a stats call.
    stats: bool,
    /// The endpoint's RuntimeConfig says its cgroup driver is systemd.
    systemd_cgroups: bool,
    /// What the report should say about this endpoint (e.g. an operation it does not offer).
    notes: Vec<String>,
}

/// Runs every endpoint and collects the report. An endpoint that fails is
/// reported with the figures it got to, and its error in the context.
pub(crate) async fn run(opts: &Options) -> Result<Report, BenchError> {
    if opts.endpoints.is_empty() {
        return Err(BenchError::Invalid("no endpoint to measure: give --endpoint NAME=SOCKET".into()));
    }
    if opts.rounds == 0 || opts.image_rounds == 0 {
        return Err(BenchError::Invalid("--rounds and --image-rounds must be at least 1".into()));
    }
    if let Some(log) = opts.daemon_logs.iter().find(|l| !opts.endpoints.iter().any(|e| e.name == l.name)) {
        return Err(BenchError::Invalid(format!("--daemon-log {}: no endpoint of that name", log.name)));
    }
    if opts.image == opts.pull_image {
        return Err(BenchError::Invalid("the pull image must differ from the container image (it is removed)".into()));
    }
    let mut report =
        Report { endpoints: opts.endpoints.iter().map(|e| e.name.clone()).collect(), ..Default::default() };
    report.context.insert("rounds".into(), opts.rounds.to_string());
    if !opts.few_rounds.is_empty() {
        report.context.insert("rounds of".into(), format!("{}: {}", opts.few_rounds.join(", "), opts.image_rounds));
    }
    report.context.insert("image rounds".into(), opts.image_rounds.to_string());
    report.context.insert(
        "warm-up".into(),
        format!("{} untimed pod + container lifecycles on each endpoint before its first timed call", opts.warmup),
    );
    report.context.insert("image".into(), opts.image.clone());
    report.context.insert("pull image".into(), opts.pull_image.clone());
    report.context.insert("pod network".into(), if opts.host_network { "host" } else { "pod (CNI)" }.into());
    report.context.insert(
        "container PID namespace".into(),
        if opts.shared_pid_namespace { "the pod's" } else { "its own (kubelet's default)" }.into(),
    );
    report.context.insert("machine".into(), machine());
    report.context.extend(opts.context.iter().cloned());
    // whether the node's cgroup moves wait for an RCU grace period (the
    // container starts' tail): microseconds where it favors dynamic changes
    let quiet = Duration::from_millis(200);
    if let Ok(Some(took)) = tokio::task::spawn_blocking(move || crate::cgroup::warm::probe_after_quiet(quiet)).await {
        report
            .context
            .insert("cgroup v1 move after 200 ms quiet".into(), format!("{:.3} ms", took.as_secs_f64() * 1e3));
    }
    for endpoint in &opts.endpoints {
        tracing::info!(endpoint = endpoint.name, socket = %endpoint.socket.display(), "measuring");
        let mut session = Session::connect(endpoint, opts).await?;
        let outcome = session.measure(&mut report).await;
        let cleanup = session.cleanup().await;
        // the setup calls of the list phase are timed but not reported: their load grows as they go
        for (op, samples) in
            session.order.iter().filter(|op| !op.ends_with(SETUP)).filter_map(|op| Some((op, session.samples.get(op)?)))
        {
            report.add(&endpoint.name, op, samples);
        }
        if let Ok(v) = session.rt.clone().version(cri::VersionRequest::default()).await {
            let v = v.into_inner();
            report
                .context
                .insert(format!("{} runtime", endpoint.name), format!("{} {}", v.runtime_name, v.runtime_version));
        }
        for note in &session.notes {
            report.context.insert(format!("{} note", endpoint.name), note.clone());
        }
        if let Err(e) = outcome.and(cleanup) {
            tracing::error!(endpoint = endpoint.name, "{e}");
            report.context.insert(format!("{} error", endpoint.name), e.to_string());
        }
    }
    Ok(report)
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let kernel = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    format!("{cpus} CPUs, Linux {kernel}")
}

/// Times one call and records it under `op`.
async fn timed<T>(
    samples: &mut Samples,
    order: &mut Vec<String>,
    op: &str,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    let start = Instant::now();
    let out = call.await?;
    let took = start.elapsed();
    if !samples.contains_key(op) {
        order.push(op.to_string());
    }
    samples.entry(op.to_string()).or_default().push(took);
    Ok(out.into_inner())
}

impl<'a> Session<'a> {
    async fn connect(endpoint: &Endpoint, opts: &'a Options) -> Result<Session<'a>, BenchError> {
        let channel = crate::client::channel(&endpoint.socket).await.map_err(|e| BenchError::Connect {
            endpoint: endpoint.name.clone(),
            socket: endpoint.socket.display().to_string(),
            message: e.to_string(),
        })?;
        let mut rt = RuntimeServiceClient::new(channel.clone());
        let systemd_cgroups = match rt.runtime_config(cri::RuntimeConfigRequest {}).await {
            Ok(r) => r.into_inner().linux.is_some_and(|l| l.cgroup_driver == cri::CgroupDriver::Systemd as i32),
            // runtimes without RuntimeConfig (containerd 1.6): the driver
            // scripts/containerd-baseline.sh gives them, systemd's where PID 1 is systemd
            Err(_) => Path::new("/run/systemd/system").is_dir(),
        };
        Ok(Session {
            systemd_cgroups,
            name: endpoint.name.clone(),
            socket: endpoint.socket.clone(),
            opts,
            rt,
            img: ImageServiceClient::new(channel),
            samples: Samples::new(),
            order: Vec::new(),
            pods: Vec::new(),
            stats: true,
            notes: Vec::new(),
        })
    }

    fn fail(&self, operation: &str, status: tonic::Status) -> BenchError {
        BenchError::Call {
            endpoint: self.name.clone(),
            operation: operation.to_string(),
            code: status.code(),
            message: status.message().to_string(),
        }
    }

    /// Lifecycles per operation on this endpoint.
    fn rounds(&self) -> usize {
        if self.opts.few_rounds.contains(&self.name) { self.opts.image_rounds } else { self.opts.rounds }
    }

    async fn measure(&mut self, report: &mut Report) -> Result<(), BenchError> {
        let daemon = memory::server_pid(&self.socket).ok();
        let mut mem = Memory::default();
        self.pull_container_image().await?;
        self.warm_up().await?;
        self.floor().await?;
        if self.opts.density_only {
            return self.densities(report).await;
        }
        if self.opts.pods_only.contains(&self.name) {
            self.pod_lifecycle().await?;
            self.note_pool().await;
            return Ok(());
        }
        self.images().await?;
        self.pod_lifecycle().await?;
        self.note_pool().await;
        self.container_lifecycle().await?;
        tokio::time::sleep(memory::SETTLE).await;
        if let Some(rss) = daemon.and_then(memory::rss_mib) {
            mem.daemon_rss_mib.insert(0, rss);
        }
        let before = memory::pids();
        let mut levels = self.opts.list_pods.clone();
        levels.sort_unstable();
        levels.dedup();
        for n in levels {
            self.grow_to(n).await?;
            self.lists(n).await?;
            tokio::time::sleep(memory::SETTLE).await;
            if let Some(rss) = daemon.and_then(memory::rss_mib) {
                mem.daemon_rss_mib.insert(n, rss);
            }
        }
        if !self.pods.is_empty() {
            let (count, pss) = memory::new_processes(&before);
            let pods = self.pods.len() as f64;
            mem.pod_processes = Some(count as f64 / pods);
            mem.pod_pss_mib = Some(pss / pods);
        }
        report.memory.insert(self.name.clone(), mem);
        self.densities(report).await
    }

    /// The density runs asked for, from no pod of this session's (the list
    /// phase's are removed first), unless the endpoint is measured on pods
    /// only or with few rounds (there it would not be comparable).
    async fn densities(&mut self, report: &mut Report) -> Result<(), BenchError> {
        if self.opts.density.is_empty()
            || self.opts.pods_only.contains(&self.name)
            || self.opts.few_rounds.contains(&self.name)
        {
            return Ok(());
        }
        for id in self.pods.clone() {
            self.remove_pod(&id).await?;
        }
        let concurrency = self.opts.concurrency;
        report.context.insert("density: pods started at once".into(), concurrency.to_string());
        for &pods in &self.opts.density {
            tracing::info!(endpoint = self.name, pods, concurrency, "density run");
            let run = self.density(pods, concurrency).await?;
            report.density.entry(self.name.clone()).or_default().push(run);
        }
        Ok(())
    }

    /// The gRPC round trip that does no work: the floor of every other figure.
    async fn floor(&mut self) -> Result<(), BenchError> {
        for _ in 0..self.rounds() * 10 {
            let call = self.rt.version(cri::VersionRequest { version: "v1".into() });
            timed(&mut self.samples, &mut self.order, "Version (gRPC floor)", call)
                .await
                .map_err(|e| self.fail("Version", e))?;
        }
        Ok(())
    }

    /// `opts.warmup` untimed lifecycles of a pod with one container (run,
    /// create, start, stop, remove): the endpoint's first calls load its
    /// binaries and fill the node's caches, for this endpoint, so that each
    /// endpoint is measured warm whatever was measured before it.
    async fn warm_up(&mut self) -> Result<(), BenchError> {
        let op = format!("warm-up{SETUP}");
        for i in 0..self.opts.warmup {
            self.wait_for_pool().await;
            let config = self.pod_config(&format!("warm-up-{i}"))?;
            let pod = self.run_pod(&op, config.clone()).await?;
            let id = self.create_container(&op, &pod, &config, "app").await?;
            self.start_container(&op, &id).await?;
            self.remove_pod(&pod).await?;
        }
        Ok(())
    }

    fn image_spec(image: &str) -> Option<cri::ImageSpec> {
        Some(cri::ImageSpec { image: image.to_string(), ..Default::default() })
    }

    /// critest's image lifecycle: pull, status, list, remove; then the
    /// containers' image is pulled (untimed) for the next steps.
    async fn images(&mut self) -> Result<(), BenchError> {
        let pull = self.opts.pull_image.clone();
        // a copy left by an earlier run would make the first pull a no-op
        let _ = self.img.remove_image(cri::RemoveImageRequest { image: Self::image_spec(&pull) }).await;
        for _ in 0..self.opts.image_rounds {
            let call =
                self.img.pull_image(cri::PullImageRequest { image: Self::image_spec(&pull), ..Default::default() });
            timed(&mut self.samples, &mut self.order, "PullImage", call)
                .await
                .map_err(|e| self.fail("PullImage", e))?;
            let call =
                self.img.image_status(cri::ImageStatusRequest { image: Self::image_spec(&pull), verbose: false });
            let status = timed(&mut self.samples, &mut self.order, "ImageStatus", call)
                .await
                .map_err(|e| self.fail("ImageStatus", e))?;
            if status.image.is_none() {
                return Err(
                    self.fail("ImageStatus", tonic::Status::not_found(format!("{pull} not found after its pull")))
                );
            }
            let call = self.img.list_images(cri::ListImagesRequest { filter: None });
            timed(&mut self.samples, &mut self.order, "ListImages", call)
                .await
                .map_err(|e| self.fail("ListImages", e))?;
            let call = self.img.remove_image(cri::RemoveImageRequest { image: Self::image_spec(&pull) });
            timed(&mut self.samples, &mut self.order, "RemoveImage", call)
                .await
                .map_err(|e| self.fail("RemoveImage", e))?;
        }
        self.pull_container_image().await
    }

    /// The containers' image, pulled untimed.
    async fn pull_container_image(&mut self) -> Result<(), BenchError> {
        let image = self.opts.image.clone();
        self.img
            .pull_image(cri::PullImageRequest { image: Self::image_spec(&image), ..Default::default() })
            .await
            .map_err(|e| self.fail("PullImage (container image)", e))?;
        Ok(())
    }

    fn pod_config(&self, name: &str) -> Result<cri::PodSandboxConfig, BenchError> {
        let uid = uuid::Uuid::new_v4().to_string();
        let log_directory = self.opts.log_dir.join(&uid);
        std::fs::create_dir_all(&log_directory)
            .map_err(|source| BenchError::LogDir { path: log_directory.display().to_string(), source })?;
        let mut config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.to_string(),
                uid,
                namespace: "rktlet-bench".into(),
                attempt: 0,
            }),
            hostname: name.to_string(),
            log_directory: log_directory.display().to_string(),
            labels: [("rktlet-bench".to_string(), self.name.clone())].into(),
            ..Default::default()
        };
        // a cgroup parent per pod, as kubelet gives (containerd's pod stats need one)
        let uid = config.metadata.as_ref().map(|m| m.uid.replace('-', "")).unwrap_or_default();
        let cgroup_parent =
            if self.systemd_cgroups { format!("{SLICE}-pod{uid}.slice") } else { format!("/{CGROUP_ROOT}/pod{uid}") };
        let network = if self.opts.host_network { cri::NamespaceMode::Node } else { cri::NamespaceMode::Pod };
        config.linux = Some(cri::LinuxPodSandboxConfig {
            cgroup_parent,
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption { network: network as i32, ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        });
        Ok(config)
    }

    /// A container that stops at SIGTERM even as its pid namespace's init
    /// (as under runc), so that StopContainer never waits for the timeout.
    fn container_config(&self, name: &str) -> cri::ContainerConfig {
        let pid = if self.opts.shared_pid_namespace { cri::NamespaceMode::Pod } else { cri::NamespaceMode::Container };
        cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: name.to_string(), attempt: 0 }),
            image: Self::image_spec(&self.opts.image),
            command: vec!["sh".into(), "-c".into(), "trap 'exit 0' TERM; sleep 100000 & wait".into()],
            log_path: format!("{name}.log"),
            labels: [("rktlet-bench".to_string(), self.name.clone())].into(),
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    namespace_options: Some(cri::NamespaceOption { pid: pid as i32, ..Default::default() }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    async fn run_pod(&mut self, op: &str, config: cri::PodSandboxConfig) -> Result<String, BenchError> {
        let call =
            self.rt.run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() });
        let id = timed(&mut self.samples, &mut self.order, op, call)
            .await
            .map_err(|e| self.fail("RunPodSandbox", e))?
            .pod_sandbox_id;
        self.pods.push(id.clone());
        Ok(id)
    }

    /// The endpoint's pod pool figures (rktlet's Status verbose info
    /// `podPool`), if it has a pool.
    async fn pool_info(&mut self) -> Option<serde_json::Value> {
        let st = self.rt.status(cri::StatusRequest { verbose: true }).await.ok()?.into_inner();
        let info: serde_json::Value = serde_json::from_str(st.info.get("podPool")?).ok()?;
        (info["pool"]["size"].as_u64().unwrap_or(0) > 0).then_some(info)
    }

    /// Spaces pod starts on an endpoint with a pod pool: waits (untimed)
    /// until the pool has a pod ready, so every start measures a take.
    async fn wait_for_pool(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Some(info) = self.pool_info().await {
            if info["pool"]["ready"].as_u64().unwrap_or(0) > 0 || Instant::now() > deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Puts what the pool did and costs at rest into the report.
    async fn note_pool(&mut self) {
        let Some(info) = self.pool_info().await else { return };
        let (p, m) = (&info["pool"], &info["idleMemory"]);
        let pods = m["pods"].as_f64().unwrap_or(0.0).max(1.0);
        let mib = |k: &str| m[k].as_f64().unwrap_or(0.0) / 1024.0 / pods;
        self.notes.push(format!(
            "pod pool of {}: {} takes, {} misses; a refill boot takes {:.1} ms and {:.1} ms of CPU (mean of {}); \
             an idle pool pod holds {:.1} MiB private, {:.1} MiB PSS, {:.1} MiB RSS ({} processes in {} pods)",
            p["size"],
            p["takes"],
            p["misses"],
            p["bootMsMean"].as_f64().unwrap_or(0.0),
            p["bootCpuMsMean"].as_f64().unwrap_or(0.0),
            p["boots"],
            mib("privateKib"),
            mib("pssKib"),
            mib("rssKib"),
            m["processes"],
            m["pods"],
        ));
    }

    async fn pod_lifecycle(&mut self) -> Result<(), BenchError> {
        let log = self.opts.daemon_logs.iter().find(|l| l.name == self.name).map(|l| l.socket.clone());
        let from = log.as_deref().map(daemon_log::mark);
        let mut stops = Vec::new();
        for i in 0..self.rounds() {
            self.wait_for_pool().await;
            let config = self.pod_config(&format!("lifecycle-{i}"))?;
            let id = self.run_pod("RunPodSandbox", config).await?;
            let call =
                self.rt.pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: id.clone(), verbose: false });
            let status = timed(&mut self.samples, &mut self.order, "PodSandboxStatus", call)
                .await
                .map_err(|e| self.fail("PodSandboxStatus", e))?;
            if status.status.is_none_or(|s| s.state != cri::PodSandboxState::SandboxReady as i32) {
                return Err(self.fail("PodSandboxStatus", tonic::Status::internal(format!("pod {id} is not ready"))));
            }
            let call = self.rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.clone() });
            timed(&mut self.samples, &mut self.order, "StopPodSandbox", call)
                .await
                .map_err(|e| self.fail("StopPodSandbox", e))?;
            if let Some(took) = self.samples.get("StopPodSandbox").and_then(|s| s.last()) {
                stops.push((id.clone(), *took));
            }
            let call = self.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.clone() });
            timed(&mut self.samples, &mut self.order, "RemovePodSandbox", call)
                .await
                .map_err(|e| self.fail("RemovePodSandbox", e))?;
            self.pods.retain(|p| *p != id);
        }
        if let (Some(log), Some(from)) = (log, from) {
            self.split_stops(&log, from, &stops);
        }
        Ok(())
    }

    /// Each timed StopPodSandbox of `stops` split at its CNI DEL, as the
    /// daemon's log recorded it after `from`: the DEL, and the rest of the
    /// call (what the runtime adds to the network's floor).
    fn split_stops(&mut self, log: &Path, from: u64, stops: &[(String, Duration)]) {
        let deletes = match daemon_log::cni_deletes_since(log, from) {
            Ok(d) => d,
            Err(e) => {
                self.notes.push(format!("its daemon log {} could not be read: {e}", log.display()));
                return;
            }
        };
        let mut found = 0;
        for (id, took) in stops {
            let Some(del) = deletes.get(id) else { continue };
            found += 1;
            for (op, d) in [(STOP_CNI_DEL, *del), (STOP_BEYOND_CNI_DEL, took.saturating_sub(*del))] {
                if !self.samples.contains_key(op) {
                    self.order.push(op.to_string());
                }
                self.samples.entry(op.to_string()).or_default().push(d);
            }
        }
        if found < stops.len() {
            self.notes.push(format!(
                "its daemon log {} recorded the CNI DEL of {found} of {} pod stops (rktlet::stage1::teardown at debug, JSON)",
                log.display(),
                stops.len()
            ));
        }
    }

    async fn create_container(
        &mut self,
        op: &str,
        pod: &str,
        pod_config: &cri::PodSandboxConfig,
        name: &str,
    ) -> Result<String, BenchError> {
        let call = self.rt.create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.to_string(),
            config: Some(self.container_config(name)),
            sandbox_config: Some(pod_config.clone()),
        });
        Ok(timed(&mut self.samples, &mut self.order, op, call)
            .await
            .map_err(|e| self.fail("CreateContainer", e))?
            .container_id)
    }

    async fn start_container(&mut self, op: &str, id: &str) -> Result<(), BenchError> {
        let call = self.rt.start_container(cri::StartContainerRequest { container_id: id.to_string() });
        timed(&mut self.samples, &mut self.order, op, call).await.map_err(|e| self.fail("StartContainer", e))?;
        Ok(())
    }

    /// critest's container lifecycle, in one pod: create, start, status,
    /// exec, stop, remove.
    async fn container_lifecycle(&mut self) -> Result<(), BenchError> {
        let pod_config = self.pod_config("containers")?;
        let pod = self.run_pod("RunPodSandbox", pod_config.clone()).await?;
        let mut exec = true;
        for i in 0..self.rounds() {
            let id = self.create_container("CreateContainer", &pod, &pod_config, &format!("c{i}")).await?;
            self.start_container("StartContainer", &id).await?;
            let call =
                self.rt.container_status(cri::ContainerStatusRequest { container_id: id.clone(), verbose: false });
            let status = timed(&mut self.samples, &mut self.order, "ContainerStatus", call)
                .await
                .map_err(|e| self.fail("ContainerStatus", e))?;
            if status.status.is_none_or(|s| s.state != cri::ContainerState::ContainerRunning as i32) {
                return Err(self.fail("ContainerStatus", tonic::Status::internal(format!("{id} is not running"))));
            }
            if exec {
                exec = self.exec_sync(&id).await?;
            }
            let call = self.rt.stop_container(cri::StopContainerRequest { container_id: id.clone(), timeout: 10 });
            timed(&mut self.samples, &mut self.order, "StopContainer", call)
                .await
                .map_err(|e| self.fail("StopContainer", e))?;
            let call = self.rt.remove_container(cri::RemoveContainerRequest { container_id: id.clone() });
            timed(&mut self.samples, &mut self.order, "RemoveContainer", call)
                .await
                .map_err(|e| self.fail("RemoveContainer", e))?;
        }
        self.remove_pod(&pod).await
    }

    /// One ExecSync of `echo`; false when the endpoint does not offer it.
    async fn exec_sync(&mut self, id: &str) -> Result<bool, BenchError> {
        let call = self.rt.exec_sync(cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: vec!["echo".into(), "bench".into()],
            timeout: 10,
        });
        match timed(&mut self.samples, &mut self.order, "ExecSync", call).await {
            Ok(out) if out.exit_code == 0 && out.stdout == b"bench\n" => Ok(true),
            Ok(out) => Err(self.fail(
                "ExecSync",
                tonic::Status::internal(format!(
                    "exit {} with output {:?}",
                    out.exit_code,
                    String::from_utf8_lossy(&out.stdout)
                )),
            )),
            Err(e) if e.code() == tonic::Code::Unimplemented => {
                self.notes.push("ExecSync is not implemented".into());
                Ok(false)
            }
            Err(e) => Err(self.fail("ExecSync", e)),
        }
    }

    /// Runs pods, each with one running container, until there are `n`.
    async fn grow_to(&mut self, n: usize) -> Result<(), BenchError> {
        while self.pods.len() < n {
            let config = self.pod_config(&format!("list-{}", self.pods.len()))?;
            let pod = self.run_pod(&format!("RunPodSandbox{SETUP}"), config.clone()).await?;
            let id = self.create_container(&format!("CreateContainer{SETUP}"), &pod, &config, "app").await?;
            self.start_container(&format!("StartContainer{SETUP}"), &id).await?;
        }
        Ok(())
    }

    async fn lists(&mut self, n: usize) -> Result<(), BenchError> {
        let (pods_op, containers_op) = (format!("ListPodSandbox ({n} pods)"), format!("ListContainers ({n} pods)"));
        for _ in 0..self.rounds() {
            let call = self.rt.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None });
            let got = timed(&mut self.samples, &mut self.order, &pods_op, call)
                .await
                .map_err(|e| self.fail("ListPodSandbox", e))?;
            let ours = got.items.iter().filter(|p| p.labels.get("rktlet-bench") == Some(&self.name)).count();
            if ours != n {
                return Err(
                    self.fail("ListPodSandbox", tonic::Status::internal(format!("{ours} pods listed, {n} run")))
                );
            }
            let call = self.rt.list_containers(cri::ListContainersRequest { filter: None });
            let got = timed(&mut self.samples, &mut self.order, &containers_op, call)
                .await
                .map_err(|e| self.fail("ListContainers", e))?;
            let ours = got.containers.iter().filter(|c| self.pods.contains(&c.pod_sandbox_id)).count();
            if ours != n {
                return Err(
                    self.fail("ListContainers", tonic::Status::internal(format!("{ours} containers listed, {n} run")))
                );
            }
            if self.stats {
                self.pod_stats(n).await?;
            }
        }
        Ok(())
    }

    /// ListPodSandboxStats (pods with their containers' stats, what kubelet's
    /// summary API asks for); off once the endpoint answers Unimplemented.
    async fn pod_stats(&mut self, n: usize) -> Result<(), BenchError> {
        let op = format!("ListPodSandboxStats ({n} pods)");
        let call = self.rt.list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest { filter: None });
        match timed(&mut self.samples, &mut self.order, &op, call).await {
            Ok(got) => {
                let ours = got
                    .stats
                    .iter()
                    .filter(|s| s.attributes.as_ref().is_some_and(|a| self.pods.contains(&a.id)))
                    .count();
                if ours != n {
                    return Err(self.fail(
                        "ListPodSandboxStats",
                        tonic::Status::internal(format!("stats of {ours} pods listed, {n} run")),
                    ));
                }
            }
            Err(e) if e.code() == tonic::Code::Unimplemented => {
                self.stats = false;
                self.notes.push("ListPodSandboxStats is not implemented".into());
                return Ok(());
            }
            Err(e) => {
                // an endpoint that cannot list pod stats on this node (containerd
                // 1.6 under runc's systemd driver on cgroup v1: "cgroup deleted")
                // is measured on the rest; its note in the report says why the
                // stats rows are missing
                self.stats = false;
                self.notes.push(format!(
                    "ListPodSandboxStats failed, stats not measured: {:?}: {}",
                    e.code(),
                    e.message()
                ));
                return Ok(());
            }
        }
        let op = format!("ListContainerStats ({n} containers)");
        let call = self.rt.list_container_stats(cri::ListContainerStatsRequest { filter: None });
        let got = timed(&mut self.samples, &mut self.order, &op, call)
            .await
            .map_err(|e| self.fail("ListContainerStats", e))?;
        let ours = got
            .stats
            .iter()
            .filter(|s| s.attributes.as_ref().is_some_and(|a| a.labels.get("rktlet-bench") == Some(&self.name)))
            .count();
        if ours < n {
            return Err(self.fail(
                "ListContainerStats",
                tonic::Status::internal(format!("stats of {ours} containers listed, {n} run")),
            ));
        }
        Ok(())
    }

    async fn remove_pod(&mut self, id: &str) -> Result<(), BenchError> {
        self.rt
            .stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.to_string() })
            .await
            .map_err(|e| self.fail("StopPodSandbox (cleanup)", e))?;
        self.rt
            .remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.to_string() })
            .await
            .map_err(|e| self.fail("RemovePodSandbox (cleanup)", e))?;
        self.pods.retain(|p| p != id);
        Ok(())
    }

    /// Removes every pod this run made, and the container image; the first
    /// error is returned after trying them all.
    async fn cleanup(&mut self) -> Result<(), BenchError> {
        let mut first = None;
        for id in self.pods.clone() {
            if let Err(e) = self.remove_pod(&id).await {
                first.get_or_insert(e);
            }
        }
        remove_cgroup_parents();
        first.map_or(Ok(()), Err)
    }
}

/// Removes the (empty) cgroupfs parents the pods were given, as kubelet
/// removes its pod cgroups; busy or missing ones are left.
fn remove_cgroup_parents() {
    // under the systemd driver the parents are slices (`pod_config`), which
    // systemd keeps until they are stopped, as kubelet stops a pod's; what
    // the runtimes made of them in hierarchies systemd does not manage
    // (cpuset, freezer, ...) goes below, as kubelet's cgroup manager removes it
    if Path::new("/run/systemd/system").is_dir() {
        let stopped = std::process::Command::new("systemctl")
            .args(["stop", &format!("{SLICE}.slice")])
            .stdin(std::process::Stdio::null())
            .status();
        if let Err(e) = stopped {
            tracing::warn!(error = %e, "systemctl stop of the pods' slices");
        }
    }
    let Ok(layout) = crate::cgroup::Layout::read() else { return };
    for mount in layout.hierarchies.iter().filter_map(|h| h.mount.as_ref()) {
        for root in [mount.join(CGROUP_ROOT), mount.join(format!("{SLICE}.slice"))] {
            if let Ok(entries) = std::fs::read_dir(&root) {
                for e in entries.flatten().filter(|e| e.path().is_dir()) {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
            let _ = std::fs::remove_dir(&root);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_with_or_without_the_unix_scheme() {
        let e: Endpoint = "in-process=unix:///run/rktlet/rktlet.sock".parse().expect("parse");
        assert_eq!(e, Endpoint { name: "in-process".into(), socket: "/run/rktlet/rktlet.sock".into() });
        let e: Endpoint = "x=/tmp/a=b.sock".parse().expect("parse");
        assert_eq!(e.socket, PathBuf::from("/tmp/a=b.sock"));
        assert!("no-socket".parse::<Endpoint>().is_err());
        assert!("=/a.sock".parse::<Endpoint>().is_err());
        assert!("a=".parse::<Endpoint>().is_err());
    }
}
