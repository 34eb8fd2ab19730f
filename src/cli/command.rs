//! The command line's arguments (clap) and what each command runs:
//! `rktlet serve` runs the CRI daemon; the rkt-style commands work on the
//! same data directory.

use crate::cli::out::Format;
use crate::config::{Config, FileConfig};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rktlet",
    version,
    about = "A Kubernetes CRI runtime that runs pods the rkt way",
    after_help = "The options above are rkt's global flags: given before the command (`rktlet --dir DIR list`), \
                  as rkt takes them, they count for the commands that use them and are ignored by the others. \
                  Each command's --help lists the ones it uses, which may also follow the command."
)]
struct Cli {
    #[command(flatten)]
    rkt: TopFlags,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the CRI RuntimeService and ImageService on a unix socket.
    Serve(ServeArgs),
    /// App-level commands on mutable pods.
    App {
        #[command(flatten)]
        data: DataFlags,
        #[command(subcommand)]
        command: AppCommand,
    },
    /// Trust an OpenPGP key for image names under --prefix (or every name: --root);
    /// `trust list` shows the trusted keys, `trust rm FINGERPRINT` removes one.
    Trust {
        /// The image name prefix the key is trusted for (e.g. example.com/app).
        #[arg(long)]
        prefix: Option<String>,
        /// Trust the key for every image name.
        #[arg(long)]
        root: bool,
        /// Output format of `list`: tabbed (default) or json.
        #[arg(long, default_value = "tabbed")]
        format: String,
        /// KEYFILE, or `list`, or `rm FINGERPRINT`.
        args: Vec<String>,
        #[command(flatten)]
        dirs: ConfigDirs,
        #[command(flatten)]
        debug: DebugFlag,
    },
    /// List pods (rkt's table or JSON).
    List {
        /// json, json-pretty, or rkt's table (empty or `table`).
        #[arg(long, default_value = "")]
        format: String,
        /// Suppress the table's header.
        #[arg(long)]
        no_legend: bool,
        /// Whole UUIDs, image ids and absolute times.
        #[arg(long)]
        full: bool,
        #[command(flatten)]
        data: DataFlags,
    },
    /// Show one pod (rkt's key=value lines or JSON).
    Status {
        /// The pod's UUID or a unique prefix (or --uuid-file).
        uuid: Option<String>,
        /// Read the pod's UUID from this file.
        #[arg(long)]
        uuid_file: Option<PathBuf>,
        /// json, json-pretty, or rkt's key=value lines (empty or `table`).
        #[arg(long, default_value = "")]
        format: String,
        /// Wait for the pod to finish first: true, false or a duration (`30s`, `1m30s`).
        #[arg(long, default_value = "false", default_missing_value = "true", num_args = 0..=1, require_equals = true)]
        wait: String,
        /// Wait for the pod to be ready first: true, false or a duration.
        #[arg(long, default_value = "false", default_missing_value = "true", num_args = 0..=1, require_equals = true)]
        wait_ready: String,
        #[command(flatten)]
        data: DataFlags,
    },
    /// Stop pods (the pod's systemd powers off; --force kills at once).
    Stop {
        uuids: Vec<String>,
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        data: DataFlags,
        #[command(flatten)]
        net: NetFlags,
    },
    /// Stop and delete pods.
    Rm {
        uuids: Vec<String>,
        #[command(flatten)]
        data: DataFlags,
        #[command(flatten)]
        net: NetFlags,
    },
    /// Delete exited pods older than the grace period, and garbage.
    Gc {
        #[arg(long, default_value = "30m", value_parser = parse_duration)]
        grace_period: std::time::Duration,
        /// Only move exited pods to exited-garbage (and aborted prepares to
        /// garbage), as rkt's `gc --mark-only`: nothing is deleted.
        #[arg(long)]
        mark_only: bool,
        #[command(flatten)]
        data: DataFlags,
        #[command(flatten)]
        net: NetFlags,
    },
    /// rkt's stage1 entry points of rktlet's pods, as rkt's stage0 runs them
    /// (`$P/stage1/rootfs/{stop,gc}` exec this; not for direct use).
    #[command(name = "stage1-entrypoint", hide = true)]
    Stage1Entrypoint {
        #[command(subcommand)]
        command: Stage1Command,
    },
    /// Ask a running daemon for its Version and Status over the CRI socket (JSON).
    Info {
        /// The daemon's socket.
        #[arg(long, default_value = crate::config::DEFAULT_SOCKET)]
        socket: PathBuf,
    },
    /// Fetch an image into the store and render its tree (`docker://REF`); prints its id.
    Fetch {
        /// Image reference, e.g. docker://busybox:latest; or an ACI: a file (./app.aci,
        /// file:///path/app.aci), an https URL, or `aci:NAME[:VERSION][,LABEL=VALUE...]`
        /// found by appc discovery; checked against its `.asc` and the trust store.
        image: String,
        #[command(flatten)]
        data: DataFlags,
        #[command(flatten)]
        dirs: ConfigDirs,
        #[command(flatten)]
        insecure: InsecureFlag,
    },
    /// Measure CRI endpoints side by side: p50/p90/p99 per operation, ratios to
    /// the first endpoint, memory (Markdown on stdout; JSON and SVG with --out).
    Bench(BenchArgs),
    /// Resource usage of ready pods and their running containers.
    Stats {
        #[arg(long, default_value = "table")]
        format: String,
        #[command(flatten)]
        data: DataFlags,
    },
    /// Work with the image store.
    Image {
        #[command(flatten)]
        data: DataFlags,
        #[command(flatten)]
        dirs: LocalConfig,
        #[command(flatten)]
        insecure: InsecureFlag,
        #[command(subcommand)]
        command: ImageCommand,
    },
    /// Check this host for what rktlet needs; every problem found comes with a fix.
    /// Takes the daemon's flags (or --config) to check the same paths.
    Doctor {
        #[command(flatten)]
        daemon: ServeArgs,
        /// text or json.
        #[arg(long, default_value = "text")]
        format: String,
    },
    /// The daemon's configuration file.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Run the crictl walk-through of docs/crictl.md against a running
    /// daemon: pull, pod, container, exec, logs, stats, stop, remove.
    Demo {
        /// The daemon's socket.
        #[arg(long, default_value = crate::config::DEFAULT_SOCKET)]
        socket: PathBuf,
        /// The container's image (needs `sh`).
        #[arg(long, default_value = "docker.io/library/busybox:latest")]
        image: String,
        /// The pod's log directory.
        #[arg(long, default_value = "/tmp/rktlet-demo")]
        log_dir: PathBuf,
    },
}

/// rkt's stage1 entry point interface (version 5) for `stop` and `gc`.
#[derive(Subcommand)]
enum Stage1Command {
    /// `rkt stop`: stop the pod as `rktlet stop` does.
    Stop {
        /// The data dir the pod is in (the entry point script names it).
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        force: bool,
        uuid: String,
    },
    /// `rkt gc`/`rkt rm`: release what the exited pod holds on the node.
    Gc {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        debug: bool,
        /// rkt's configuration directory; rktlet's pods take their CNI
        /// directories from the daemon's record instead.
        #[arg(long)]
        local_config: Option<PathBuf>,
        uuid: String,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print a commented config file with every key at its default.
    Default,
}

/// rkt's global flags, given before the command (`rktlet --dir DIR list`):
/// each command uses those it needs (the groups below, which it also takes
/// after its name), and rkt's callers pass them to every command alike.
#[derive(Args)]
struct TopFlags {
    /// rkt data directory [default: /var/lib/rktlet/data].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Local configuration directory: its `registries.toml` lists mirrors and insecure
    /// registries (default /etc/rktlet), its `trustedkeys/` holds trusted keys (default /etc/rkt).
    #[arg(long)]
    local_config: Option<PathBuf>,
    /// System configuration directory: its `trustedkeys/` holds the vendor's trusted keys,
    /// which an empty file of the same name under --local-config masks [default: /usr/lib/rkt].
    #[arg(long)]
    system_config: Option<PathBuf>,
    /// Comma-separated: http, tls, image, all-fetch, all, none (see `fetch --help`).
    #[arg(long)]
    insecure_options: Option<String>,
    /// Debug logging to stderr.
    #[arg(long)]
    debug: bool,
    /// Directory with CNI network configs, for the network release of `stop`, `rm`
    /// and `gc` [default: /etc/cni/net.d].
    #[arg(long)]
    cni_conf_dir: Option<PathBuf>,
    /// Directory with CNI plugins; repeat for several [default: /opt/cni/bin, /usr/lib/cni].
    #[arg(long = "cni-bin-dir")]
    cni_bin_dirs: Vec<PathBuf>,
}

/// The data directory, for the commands that work on it (`global`: an `app`
/// or `image` subcommand takes it after its own name too).
#[derive(Args, Clone, Default)]
struct DataFlags {
    /// rkt data directory [default: /var/lib/rktlet/data].
    #[arg(long, global = true, alias = "data-dir")]
    dir: Option<PathBuf>,
    #[command(flatten)]
    debug: DebugFlag,
}

#[derive(Args, Clone, Default)]
struct DebugFlag {
    /// Debug logging to stderr.
    #[arg(long, global = true)]
    debug: bool,
}

/// `registries.toml`'s directory, for the image store.
#[derive(Args, Clone, Default)]
struct LocalConfig {
    /// Local configuration directory: its `registries.toml` lists mirrors and insecure
    /// registries [default: /etc/rktlet].
    #[arg(long, global = true)]
    local_config: Option<PathBuf>,
}

/// The trust store's directories, and `registries.toml`'s.
#[derive(Args, Clone, Default)]
struct ConfigDirs {
    /// Local configuration directory: its `registries.toml` lists mirrors and insecure
    /// registries (default /etc/rktlet), its `trustedkeys/` holds trusted keys (default /etc/rkt).
    #[arg(long)]
    local_config: Option<PathBuf>,
    /// System configuration directory: its `trustedkeys/` holds the vendor's trusted keys,
    /// which an empty file of the same name under --local-config masks [default: /usr/lib/rkt].
    #[arg(long)]
    system_config: Option<PathBuf>,
}

#[derive(Args, Clone, Default)]
struct InsecureFlag {
    /// Comma-separated: http (plain HTTP to every registry and ACI URL), tls (no certificate
    /// checks), image (ACIs are imported without checking their OpenPGP signature against the
    /// trust store; registry pulls keep their signature policy), all-fetch, all (all three),
    /// none [default: none].
    #[arg(long, global = true)]
    insecure_options: Option<String>,
}

/// Where the CNI configs and plugins are, for releasing a pod's network.
#[derive(Args, Clone, Default)]
struct NetFlags {
    /// Directory with CNI network configs, to release the pods' networks [default: /etc/cni/net.d].
    #[arg(long)]
    cni_conf_dir: Option<PathBuf>,
    /// Directory with CNI plugins; repeat for several [default: /opt/cni/bin, /usr/lib/cni].
    #[arg(long = "cni-bin-dir")]
    cni_bin_dirs: Vec<PathBuf>,
}

/// The effective rkt flags of one command: its own, else the global ones
/// given before it, else the defaults.
#[derive(Default)]
struct RktFlags {
    dir: Option<PathBuf>,
    local_config: Option<PathBuf>,
    system_config: PathBuf,
    insecure_options: String,
    debug: bool,
    cni_conf_dir: Option<PathBuf>,
    cni_bin_dirs: Vec<PathBuf>,
}

/// What a command takes of the rkt flags (each `None`: it takes none of that group).
#[derive(Default)]
struct Given {
    data: Option<DataFlags>,
    debug: Option<DebugFlag>,
    dirs: Option<ConfigDirs>,
    insecure: Option<InsecureFlag>,
    net: Option<NetFlags>,
}

impl TopFlags {
    fn with(self, given: Given) -> RktFlags {
        let Given { data, debug, dirs, insecure, net } = given;
        let (data, debug) = (data.unwrap_or_default(), debug.unwrap_or_default());
        let (dirs, insecure, net) = (dirs.unwrap_or_default(), insecure.unwrap_or_default(), net.unwrap_or_default());
        if data.debug.debug || debug.debug {
            init_logging("debug");
        }
        RktFlags {
            dir: data.dir.or(self.dir),
            local_config: dirs.local_config.or(self.local_config),
            system_config: dirs
                .system_config
                .or(self.system_config)
                .unwrap_or_else(|| PathBuf::from(crate::trust::SYSTEM_CONFIG)),
            insecure_options: insecure.insecure_options.or(self.insecure_options).unwrap_or_else(|| "none".into()),
            debug: self.debug || data.debug.debug || debug.debug,
            cni_conf_dir: net.cni_conf_dir.or(self.cni_conf_dir),
            cni_bin_dirs: if net.cni_bin_dirs.is_empty() { self.cni_bin_dirs } else { net.cni_bin_dirs },
        }
    }
}

#[derive(Args)]
struct BenchArgs {
    /// An endpoint to measure, NAME=SOCKET; repeat for several. The first is the ratios' baseline.
    #[arg(long = "endpoint", required_unless_present = "render_only")]
    endpoints: Vec<crate::client::bench::Endpoint>,
    /// The containers' image (needs `sh` and `sleep`).
    #[arg(long, default_value = "127.0.0.1:5000/busybox:latest")]
    image: String,
    /// The image pulled and removed in every round of the image lifecycle.
    #[arg(long, default_value = "127.0.0.1:5000/big:latest")]
    pull_image: String,
    /// Lifecycles per operation.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Rounds of the image lifecycle (each pulls the pull image again) [default: --rounds].
    #[arg(long)]
    image_rounds: Option<usize>,
    /// Pod counts (each pod running one container) at which the list calls are measured.
    #[arg(long, value_delimiter = ',', default_value = "10,50,100")]
    list_pods: Vec<usize>,
    /// Run the pods on the host network instead of the pod network.
    #[arg(long)]
    host_network: bool,
    /// Containers share their pod's PID namespace (Kubernetes'
    /// shareProcessNamespace) instead of kubelet's default, one each.
    #[arg(long)]
    shared_pid_namespace: bool,
    /// Directory for the pods' log directories.
    #[arg(long, default_value = "/var/tmp/rktlet-bench/logs")]
    log_dir: PathBuf,
    /// Write bench.md, bench.json and bench.svg into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Measure only the pod lifecycle on this endpoint (by NAME; repeatable).
    #[arg(long)]
    pods_only: Vec<String>,
    /// Measure this endpoint (by NAME; repeatable) with --image-rounds in every lifecycle.
    #[arg(long)]
    few_rounds: Vec<String>,
    /// Density runs: this many pods (each with one container; comma-separated
    /// counts, e.g. 20,110) started and removed --concurrency at a time, with
    /// the node's memory per pod at rest and what the teardown left.
    #[arg(long, value_delimiter = ',')]
    density: Vec<usize>,
    /// Pods started at once in a density run (kubelet's parallel pod workers).
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Only the density runs: no lifecycles, no list calls.
    #[arg(long, requires = "density")]
    density_only: bool,
    /// Untimed pod + container lifecycles on each endpoint before its first
    /// timed call, so that no endpoint is measured on caches another one
    /// warmed (endpoints are measured one after another).
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// A fact about the run for the report's context, KEY=VALUE (repeatable;
    /// e.g. the node it ran on).
    #[arg(long = "context", value_parser = parse_context)]
    context: Vec<(String, String)>,
    /// An endpoint's daemon log, NAME=PATH (rktlet's JSON log lines with
    /// `rktlet::stage1::teardown` at debug; repeatable): each StopPodSandbox
    /// of the pod lifecycle is split there at its CNI DEL.
    #[arg(long = "daemon-log")]
    daemon_logs: Vec<crate::client::bench::Endpoint>,
    /// Measure nothing: render the README's performance section from this
    /// bench.json (printed, or written into --readme).
    #[arg(long, value_name = "BENCH_JSON", conflicts_with = "endpoints")]
    render_only: Option<PathBuf>,
    /// With --render-only: replace the section between the lines
    /// `<!-- STEM:begin -->` and `<!-- STEM:end -->` of this file, STEM
    /// being the bench json's file stem (`bench`, `bench-node`).
    #[arg(long, requires = "render_only")]
    readme: Option<PathBuf>,
}

/// `KEY=VALUE` of `--context`.
fn parse_context(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

fn bench(args: BenchArgs) -> Result<(), String> {
    if let Some(json) = &args.render_only {
        let section =
            crate::client::bench::report::render_readme(json, args.readme.as_deref()).map_err(|e| e.to_string())?;
        print!("{}", section.unwrap_or_default());
        return Ok(());
    }
    init_logging("info");
    let opts = crate::client::bench::Options {
        endpoints: args.endpoints,
        image: args.image,
        pull_image: args.pull_image,
        rounds: args.rounds,
        image_rounds: args.image_rounds.unwrap_or(args.rounds),
        list_pods: args.list_pods,
        host_network: args.host_network,
        shared_pid_namespace: args.shared_pid_namespace,
        log_dir: args.log_dir,
        pods_only: args.pods_only,
        few_rounds: args.few_rounds,
        density: args.density,
        concurrency: args.concurrency,
        density_only: args.density_only,
        warmup: args.warmup,
        context: args.context,
        daemon_logs: args.daemon_logs,
    };
    let report = runtime()?.block_on(crate::client::bench::run(&opts)).map_err(|e| e.to_string())?;
    let markdown = report.to_markdown();
    print!("{markdown}");
    if let Some(out) = args.out {
        let write = |name: &str, text: &str| {
            std::fs::write(out.join(name), text).map_err(|e| format!("cannot write {}: {e}", out.join(name).display()))
        };
        std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
        write("bench.md", &markdown)?;
        write("bench.json", &report.to_json())?;
        write("bench.svg", &report.to_svg())?;
    }
    match report.context.keys().find(|k| k.ends_with(" error")) {
        Some(k) => Err(format!("{k}: {}", report.context[k])),
        None => Ok(()),
    }
}

#[derive(Subcommand)]
enum ImageCommand {
    /// List images.
    List {
        /// Output format: tabbed (default) or json.
        #[arg(long, default_value = "tabbed")]
        format: String,
    },
    /// Remove images by id, tag or digest.
    Rm { images: Vec<String> },
    /// Remove trees no pod uses, images not used for the grace period, and leftovers.
    Gc {
        /// Keep images used more recently than this (e.g. 24h, 30m, 0s).
        #[arg(long, default_value = "24h")]
        grace_period: String,
    },
    /// Check the store: blobs against their keys, the index against the
    /// blobs, rendered trees against their layers, no pull leftovers. Exits
    /// 1 when something is wrong.
    Verify {
        /// Also compare every rendered tree, file by file, with a fresh rendering of its layers.
        #[arg(long)]
        deep: bool,
        /// Output format: tabbed (default) or json.
        #[arg(long, default_value = "tabbed")]
        format: String,
    },
    /// Print an image's manifest.
    CatManifest {
        image: String,
        /// Pretty-print.
        #[arg(long, default_value_t = true)]
        pretty_print: bool,
    },
}

#[derive(Subcommand)]
enum AppCommand {
    /// Create and boot an empty mutable pod (stage0 + stage1), then become its nspawn.
    Sandbox(crate::stage1::sandbox::SandboxArgs),
    /// Add an app to a running pod (prints the container id).
    Add(crate::cri::exec_mode::app_add::AddArgs),
    /// Start an added app.
    Start {
        uuid: String,
        #[arg(long)]
        app: String,
    },
    /// Stop an app (SIGTERM, SIGKILL after --timeout seconds).
    Stop {
        uuid: String,
        #[arg(long)]
        app: String,
        #[arg(long, default_value_t = 10)]
        timeout: i64,
    },
    /// Remove an app from its pod (stopping it first).
    Rm {
        uuid: String,
        #[arg(long)]
        app: String,
    },
    /// List a pod's apps (rkt's NAME/STATE table, or JSON).
    List {
        uuid: String,
        /// json, json-pretty, or rkt's table (empty or `table`).
        #[arg(long, default_value = "")]
        format: String,
        /// Suppress the table's header.
        #[arg(long)]
        no_legend: bool,
    },
    /// Run a command in a running app; exits with its exit code (125: rktlet failed).
    Exec {
        uuid: String,
        #[arg(long)]
        app: String,
        /// Seconds before the command is killed (0: no limit).
        #[arg(long, default_value_t = 0)]
        timeout: i64,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Show one app (rkt's key=value lines or JSON).
    Status {
        uuid: String,
        #[arg(long)]
        app: String,
        /// json, json-pretty, or rkt's key=value lines (empty or `table`).
        #[arg(long, default_value = "")]
        format: String,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// TOML config file; flags given here override its values.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Unix socket to serve CRI on [default: /run/rktlet/rktlet.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// rkt data directory [default: /var/lib/rktlet/data].
    #[arg(long, alias = "dir")]
    data_dir: Option<PathBuf>,
    /// Program run as `<rkt> app sandbox` [default: this binary].
    #[arg(long)]
    rkt_path: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace [default: info]. RUST_LOG overrides.
    #[arg(long)]
    log_level: Option<String>,
    /// Log format: text or json (one object per line) [default: text].
    #[arg(long)]
    log_format: Option<String>,
    /// Directory with CNI network configs [default: /etc/cni/net.d].
    #[arg(long)]
    cni_conf_dir: Option<PathBuf>,
    /// Directory with CNI plugin binaries; repeat for several [default: /opt/cni/bin, /usr/lib/cni].
    #[arg(long = "cni-bin-dir")]
    cni_bin_dirs: Vec<PathBuf>,
    /// Registry mirrors and insecure registries (TOML) [default: /etc/rktlet/registries.toml].
    #[arg(long)]
    registry_config: Option<PathBuf>,
    /// Directory whose trustedkeys/ checks ACI signatures [default: /etc/rkt].
    #[arg(long)]
    trust_dir: Option<PathBuf>,
    /// Serve every CRI call the original rktlet exec'd by exec'ing this binary's
    /// CLI instead (`app add`, `app start`, `status`, ...): the exec design, for benchmarks.
    #[arg(long)]
    exec_mode: bool,
    /// Serve Prometheus metrics on this loopback address, e.g. 127.0.0.1:9095 [default: off].
    #[arg(long)]
    metrics_address: Option<std::net::SocketAddr>,
    /// Pre-booted pods kept ready so RunPodSandbox adapts one instead of
    /// booting (0 disables) [default: 2].
    #[arg(long)]
    pod_pool_size: Option<usize>,
    /// Address of the streaming server for Exec (port 0: a free one) [default: 127.0.0.1:0].
    #[arg(long)]
    streaming_address: Option<std::net::SocketAddr>,
}

impl ServeArgs {
    fn config(self) -> Result<Config, crate::config::ConfigError> {
        self.config_with_origins().map(|(config, _)| config)
    }

    /// The configuration, with where its CNI config directory was set
    /// (`--cni-conf-dir`, `cni_conf_dir in FILE`, or the default).
    fn config_with_origins(self) -> Result<(Config, String), crate::config::ConfigError> {
        let file = match &self.config {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        let flags = FileConfig {
            path: None,
            socket: self.socket,
            data_dir: self.data_dir,
            rkt_path: self.rkt_path,
            log_level: self.log_level,
            log_format: self.log_format,
            cni_conf_dir: self.cni_conf_dir,
            cni_bin_dirs: (!self.cni_bin_dirs.is_empty()).then_some(self.cni_bin_dirs),
            registry_config: self.registry_config,
            trust_dir: self.trust_dir,
            exec_mode: self.exec_mode.then_some(true),
            metrics_address: self.metrics_address,
            pod_pool_size: self.pod_pool_size,
            streaming_address: self.streaming_address,
        };
        let cni_origin = crate::config::origin("cni_conf_dir", &file, &flags);
        Ok((Config::resolve(file, flags)?, cni_origin))
    }
}

fn demo(socket: &std::path::Path, image: &str, log_dir: &std::path::Path) -> Result<(), String> {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    tokio.block_on(crate::client::demo::run(socket, image, log_dir, &mut std::io::stdout()))
}

/// `rktlet doctor`: fails (exit 1) when a check fails.
fn doctor(args: ServeArgs, format: &str) -> Result<(), String> {
    let config = args.config().map_err(|e| e.to_string())?;
    let checks = crate::cli::doctor::run(&config);
    match format {
        "json" => println!("{}", serde_json::to_string_pretty(&checks).map_err(|e| e.to_string())?),
        "text" => print!("{}", crate::cli::doctor::to_text(&checks)),
        other => return Err(format!("unknown --format={other}: use text or json")),
    }
    let failed = checks.iter().filter(|c| c.outcome == crate::cli::doctor::Outcome::Fail).count();
    if failed > 0 { Err(format!("{failed} check(s) failed; see the fixes above")) } else { Ok(()) }
}

fn init_logging(level: &str) {
    init_logging_as(level, "text");
}

/// Logs to stderr: text (ANSI colours only on a terminal) or JSON lines.
fn init_logging_as(level: &str, format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("rktlet={level},warn")));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.with_ansi(std::io::stderr().is_terminal()).try_init()
    };
}

fn serve(args: ServeArgs) -> Result<(), String> {
    let (config, cni_origin) = args.config_with_origins().map_err(|e| e.to_string())?;
    init_logging_as(&config.log_level, &config.log_format);
    // as containerd: the daemon starts (a CNI daemonset may write the config
    // later) and Status says NetworkReady=false until then; but a mistyped
    // directory is said once, loudly, with where it was set
    if !config.cni_conf_dir.is_dir() {
        let what = if config.cni_conf_dir.exists() { "is not a directory" } else { "does not exist" };
        tracing::warn!(
            cni_conf_dir = %config.cni_conf_dir.display(),
            set_by = %cni_origin,
            "the CNI config directory {} (set by {cni_origin}) {what}: NetworkReady stays false and pods on \
             the pod network cannot start until a network config appears there (host-network pods can)",
            config.cni_conf_dir.display()
        );
    }
    // before the runtime's threads ask for arenas of their own
    crate::base::heap::tune();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    tokio.block_on(crate::server::run_with(config)).map_err(|e| e.to_string())
}

fn info(socket: PathBuf) -> Result<(), String> {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let info = tokio.block_on(crate::client::info(&socket))?;
    println!("{}", serde_json::to_string_pretty(&info).map_err(|e| e.to_string())?);
    Ok(())
}

fn data_dir(dir: Option<PathBuf>) -> rkt::pod::DataDir {
    rkt::pod::DataDir::new(dir.unwrap_or_else(|| PathBuf::from(crate::config::DEFAULT_DATA_DIR)))
}

/// rkt's `list` and `status` exit with 254 when they fail; scripts may check.
fn rkt_failure(e: &str) -> ExitCode {
    eprintln!("rktlet: {e}");
    ExitCode::from(254)
}

fn json_format(format: &str) -> Result<bool, String> {
    match format {
        "json" => Ok(true),
        "table" | "" => Ok(false),
        other => Err(format!("unknown --format={other}: use json or table")),
    }
}

fn for_each(ids: &[String], f: impl Fn(&str) -> Result<(), String>) -> Result<(), String> {
    // an error that names its pod already is not prefixed with it again
    let named = |id: &str, e: String| if e.contains(id) { e } else { format!("{id}: {e}") };
    let errors: Vec<String> = ids.iter().filter_map(|id| f(id).err().map(|e| named(id, e))).collect();
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

impl RktFlags {
    fn net_dirs(&self) -> crate::stage1::teardown::NetDirs {
        let bin_dirs = if self.cni_bin_dirs.is_empty() {
            crate::config::DEFAULT_CNI_BIN_DIRS.iter().map(PathBuf::from).collect()
        } else {
            self.cni_bin_dirs.clone()
        };
        let conf_dir = self.cni_conf_dir.clone().unwrap_or_else(|| PathBuf::from(crate::config::DEFAULT_CNI_CONF_DIR));
        crate::stage1::teardown::NetDirs { conf_dir, bin_dirs }
    }

    /// rkt's trust store: `--local-config` (default /etc/rkt) over `--system-config`.
    fn trust_store(&self) -> crate::trust::TrustStore {
        let local = self.local_config.clone().unwrap_or_else(|| PathBuf::from("/etc/rkt"));
        crate::trust::TrustStore::new(local, &self.system_config)
    }

    fn store(&self) -> Result<crate::image::Store, String> {
        if self.debug {
            init_logging("debug");
        }
        let local = self.local_config.clone().unwrap_or_else(|| PathBuf::from("/etc/rktlet"));
        let mut registries = crate::image::RegistryConfig::load(&local.join("registries.toml"))?;
        for opt in self.insecure_options.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            match opt {
                "none" | "image" | "ondisk" | "pubkey" | "capabilities" | "paths" | "seccomp" | "all-run" => {}
                "http" => registries.all_http = true,
                "tls" => registries.all_skip_verify = true,
                "all-fetch" | "all" => {
                    registries.all_http = true;
                    registries.all_skip_verify = true;
                }
                other => return Err(format!("unknown --insecure-options value {other:?}")),
            }
        }
        let data = data_dir(self.dir.clone());
        let policy = registries.policy_path(&local.join("registries.toml"));
        crate::image::Store::open(&data, registries).and_then(|s| s.with_policy(policy)).map_err(|e| e.to_string())
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

fn fetch(rkt: RktFlags, image: String) -> Result<(), String> {
    use std::io::{IsTerminal, Write};
    let store = rkt.store()?;
    // an ACI (rkt's own image format), checked against the trust store
    let file = image.strip_prefix("file://").unwrap_or(&image);
    let url = image.starts_with("https://") || image.starts_with("http://");
    let aci =
        image.starts_with(crate::image::aci::ACI_PREFIX) || image.starts_with("file://") || image.ends_with(".aci");
    if url || aci || std::path::Path::new(file).is_file() {
        let opts: Vec<&str> = rkt.insecure_options.split(',').map(str::trim).collect();
        let skip = opts.iter().any(|o| matches!(*o, "image" | "all" | "all-fetch"));
        let trust = rkt.trust_store();
        let mut fetcher = crate::image::aci::Fetcher::new(&store, (!skip).then_some(&trust));
        fetcher.allow_http = opts.iter().any(|o| matches!(*o, "http" | "all" | "all-fetch"));
        let imported = runtime()?.block_on(fetcher.fetch(&image)).map_err(|e| e.to_string())?;
        println!("{}", imported.id);
        return Ok(());
    }
    let reference: rkt::reference::Reference =
        image.parse().map_err(|e: rkt::reference::ReferenceError| e.to_string())?;
    let creds = crate::image::auth::DockerConfig::default_path()
        .map(|p| crate::image::auth::DockerConfig::load(&p))
        .transpose()?
        .and_then(|c| c.for_domain(&reference.domain))
        .unwrap_or_default();
    let progress: Option<crate::image::Progress> = std::io::stderr().is_terminal().then(|| {
        let totals = std::sync::Mutex::new(std::collections::BTreeMap::<usize, (u64, u64)>::new());
        let name = reference.to_string();
        std::sync::Arc::new(move |layer: usize, got: u64, size: u64| {
            if let Ok(mut t) = totals.lock() {
                t.insert(layer, (got, size));
                let (got, size) = t.values().fold((0, 0), |(a, b), (g, s)| (a + g, b + s));
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\rDownloading {name}: {:.1} / {:.1} MB", got as f64 / 1e6, size as f64 / 1e6);
                let _ = err.flush();
            }
        }) as crate::image::Progress
    });
    let shown = progress.is_some();
    let result = runtime()?.block_on(store.pull(&image, creds, progress));
    if shown {
        eprintln!();
    }
    let image = result.map_err(|e| e.to_string())?;
    println!("{}", image.id);
    Ok(())
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..split].parse().map_err(|_| format!("invalid duration {s:?}"))?;
    let secs = match &s[split..] {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        _ => return Err(format!("invalid duration {s:?}: use s, m, h or d")),
    };
    Ok(std::time::Duration::from_secs(secs))
}

fn image_cmd(rkt: RktFlags, command: ImageCommand) -> Result<(), String> {
    let store = rkt.store()?;
    match command {
        ImageCommand::List { format } => {
            let images = store.list().map_err(|e| e.to_string())?;
            let now = std::time::SystemTime::now();
            match format.as_str() {
                "json" => {
                    let rows: Vec<rkt::api_v1::ImageInfo> = images
                        .iter()
                        .map(|i| rkt::api_v1::ImageInfo {
                            id: i.id.clone(),
                            name: i.manifest.name.clone(),
                            size: i.size,
                            import_time: i.import_time,
                            last_used_time: i.last_used,
                            tags: i.tags.clone(),
                            digests: i.digests.clone(),
                        })
                        .collect();
                    println!("{}", serde_json::to_string(&rows).map_err(|e| e.to_string())?);
                }
                "tabbed" => {
                    println!("ID\tNAME\tSIZE\tIMPORT TIME\tLAST USED");
                    for i in &images {
                        // as rkt prints it: the manifest's name and its version
                        // label; a docker image without one by the tag it was pulled by
                        let name = match (i.manifest.label("version"), i.tags.first()) {
                            (Some(version), _) => format!("{}:{version}", i.manifest.name),
                            (None, Some(tag)) => tag.clone(),
                            (None, None) => i.manifest.name.clone(),
                        };
                        let (size, import, used) = (
                            crate::cli::pods::ibytes(i.size),
                            crate::cli::pods::ago(i.import_time, now),
                            crate::cli::pods::ago(i.last_used, now),
                        );
                        println!("{}\t{name}\t{size}\t{import}\t{used}", i.id);
                    }
                }
                other => return Err(format!("unknown --format {other:?}: use tabbed or json")),
            }
        }
        ImageCommand::Rm { images } => {
            let mut failed = false;
            for name in images {
                match store.remove(&name) {
                    Ok(Some(id)) => println!("successfully removed aci for image: {id}"),
                    Ok(None) => {
                        eprintln!("rktlet: image {name:?} not found");
                        failed = true;
                    }
                    Err(e) => {
                        eprintln!("rktlet: {e}");
                        failed = true;
                    }
                }
            }
            if failed {
                return Err("some images could not be removed".into());
            }
        }
        ImageCommand::Gc { grace_period } => {
            let report = store.gc(parse_duration(&grace_period)?).map_err(|e| e.to_string())?;
            for t in &report.trees {
                println!("removed tree {t}");
            }
            for i in &report.images {
                println!("removed image {i}");
            }
            println!("removed {} layers, {} interrupted pulls", report.layers.len(), report.tmp);
        }
        ImageCommand::Verify { deep, format } => {
            let report = crate::image::fsck::verify(&store, deep).map_err(|e| e.to_string())?;
            match format.as_str() {
                "json" => println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?),
                "tabbed" => {
                    println!(
                        "{} images, {} blobs, {} trees ({} compared with their layers)",
                        report.images, report.blobs, report.trees, report.trees_compared
                    );
                    for n in &report.notes {
                        println!("note: {n}");
                    }
                    for p in &report.problems {
                        println!("problem: {p}");
                    }
                }
                other => return Err(format!("unknown --format {other:?}: use tabbed or json")),
            }
            if !report.ok() {
                return Err(format!("the image store has {} problem(s)", report.problems.len()));
            }
        }
        ImageCommand::CatManifest { image, pretty_print } => {
            let image = store.resolve(&image).map_err(|e| e.to_string())?;
            let out = if pretty_print {
                serde_json::to_string_pretty(&image.manifest)
            } else {
                serde_json::to_string(&image.manifest)
            };
            println!("{}", out.map_err(|e| e.to_string())?);
        }
    }
    Ok(())
}

/// `rktlet trust`: rkt's trust store under `--local-config` (default /etc/rkt).
fn trust(rkt: &RktFlags, prefix: Option<String>, root: bool, format: &str, args: &[String]) -> Result<(), String> {
    let store = rkt.trust_store();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["list"] => {
            let keys = store.list();
            match format {
                "json" => println!("{}", serde_json::to_string(&keys).map_err(|e| e.to_string())?),
                _ => {
                    println!("PREFIX\tFINGERPRINT\tPATH");
                    for k in keys {
                        let prefix = k.prefix.unwrap_or_else(|| "(root)".into());
                        println!("{prefix}\t{}\t{}", k.fingerprint, k.path.display());
                    }
                }
            }
        }
        ["rm", fingerprint] => {
            for k in store.remove(fingerprint).map_err(|e| e.to_string())? {
                println!("removed {}", k.path.display());
            }
        }
        [keyfile] => {
            if root == prefix.is_some() {
                return Err("give either --prefix=PREFIX or --root".into());
            }
            let bytes = std::fs::read(keyfile).map_err(|e| format!("cannot read {keyfile}: {e}"))?;
            let added = store.add(prefix.as_deref(), &bytes).map_err(|e| e.to_string())?;
            println!("trusted key {} at {}", added.fingerprint, added.path.display());
        }
        _ => return Err("usage: rktlet trust [--prefix=PREFIX | --root] KEYFILE | list | rm FINGERPRINT".into()),
    }
    Ok(())
}

/// `app exec`: the command's output and exit code are the CLI's own.
fn app_exec(dir: Option<PathBuf>, uuid: &str, app: &str, timeout: i64, cmd: Vec<String>) -> ExitCode {
    use std::io::{IsTerminal, Write};
    // on a terminal (and without a deadline) the command gets a terminal too
    if timeout == 0 && std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        return match crate::cli::app::exec_tty(data_dir(dir).root().to_path_buf(), uuid, app, cmd) {
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX)),
            Err(e) => {
                eprintln!("rktlet: {e}");
                ExitCode::from(crate::cri::exec_mode::app_add::EXEC_FAILED as u8)
            }
        };
    }
    match crate::cli::app::exec(data_dir(dir).root().to_path_buf(), uuid, app, timeout, cmd) {
        Ok(out) => {
            let _ = std::io::stdout().write_all(&out.stdout);
            let _ = std::io::stderr().write_all(&out.stderr);
            ExitCode::from(u8::try_from(out.exit_code).unwrap_or(u8::MAX))
        }
        Err(e) => {
            eprintln!("rktlet: {e}");
            ExitCode::from(crate::cri::exec_mode::app_add::EXEC_FAILED as u8)
        }
    }
}

/// Runs the command the arguments name.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        // a command whose reader went away (`rktlet info | head -1`) ends
        // quietly, as Unix tools do, instead of panicking in println!
        // SAFETY: signal(2) restoring the default action, before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    if cli.rkt.debug {
        init_logging("debug");
    }
    let code = run(cli.command, cli.rkt);
    // trees this command rendered are synced before it ends (`rkt::tree`)
    rkt::tree::finish_settling();
    code
}

/// The exit code of a command that ends in a result: its error printed.
fn done(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rktlet: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The daemon's own flags win over rkt's global ones given before `serve`.
fn daemon_flags(mut args: ServeArgs, top: TopFlags) -> ServeArgs {
    args.data_dir = args.data_dir.or(top.dir);
    args.cni_conf_dir = args.cni_conf_dir.or(top.cni_conf_dir);
    if args.cni_bin_dirs.is_empty() {
        args.cni_bin_dirs = top.cni_bin_dirs;
    }
    args
}

fn run(command: Command, top: TopFlags) -> ExitCode {
    done(match command {
        Command::Serve(args) => serve(daemon_flags(args, top)),
        Command::Info { socket } => info(socket),
        Command::Stage1Entrypoint { command } => stage1_entrypoint(command),
        Command::Doctor { daemon, format } => doctor(daemon_flags(daemon, top), &format),
        Command::Demo { socket, image, log_dir } => demo(&socket, &image, &log_dir),
        Command::Config(ConfigCommand::Default) => {
            print!("{}", crate::config::default_toml());
            Ok(())
        }
        Command::App { data, command } => {
            return app(top.with(Given { data: Some(data), ..Default::default() }), command);
        }
        Command::List { format, no_legend, full, data } => {
            let rkt = top.with(Given { data: Some(data), ..Default::default() });
            return list(&data_dir(rkt.dir), &format, full, no_legend);
        }
        Command::Status { uuid, uuid_file, format, wait, wait_ready, data } => {
            let rkt = top.with(Given { data: Some(data), ..Default::default() });
            let data = data_dir(rkt.dir);
            let out = (|| {
                let id = crate::cli::pods::status_uuid(uuid, uuid_file.as_deref())?;
                let format = Format::parse(&format)?;
                let wait_ready = crate::cli::pods::parse_wait(&wait_ready)?;
                let wait = crate::cli::pods::parse_wait(&wait)?;
                crate::cli::pods::wait_for(&data, &id, wait_ready, wait)?;
                crate::cli::pods::status(&data, &id, format)
            })();
            return match out {
                Ok(out) => {
                    print!("{out}");
                    ExitCode::SUCCESS
                }
                Err(e) => rkt_failure(&e),
            };
        }
        Command::Stop { uuids, force, data, net } => {
            let rkt = top.with(Given { data: Some(data), net: Some(net), ..Default::default() });
            let (data, net) = (data_dir(rkt.dir.clone()), rkt.net_dirs());
            for_each(&uuids, |id| crate::cli::pods::stop_pod(&data, id, force, &net).map_err(|e| e.to_string()))
        }
        Command::Rm { uuids, data, net } => {
            let rkt = top.with(Given { data: Some(data), net: Some(net), ..Default::default() });
            let (data, net) = (data_dir(rkt.dir.clone()), rkt.net_dirs());
            for_each(&uuids, |id| crate::cli::pods::rm_pod(&data, id, &net).map_err(|e| e.to_string()))
        }
        Command::Gc { mark_only: true, data, .. } => {
            let rkt = top.with(Given { data: Some(data), ..Default::default() });
            crate::cli::pods::gc_mark(&data_dir(rkt.dir))
                .map(|moved| moved.iter().for_each(|u| println!("moved {u} to garbage")))
                .map_err(|e| e.to_string())
        }
        Command::Gc { grace_period, data, net, mark_only: false } => {
            let rkt = top.with(Given { data: Some(data), net: Some(net), ..Default::default() });
            crate::cli::pods::gc(&data_dir(rkt.dir.clone()), grace_period, &rkt.net_dirs())
                .map(|removed| removed.iter().for_each(|u| println!("removed {u}")))
                .map_err(|e| e.to_string())
        }
        Command::Fetch { image, data, dirs, insecure } => fetch(
            top.with(Given { data: Some(data), dirs: Some(dirs), insecure: Some(insecure), ..Default::default() }),
            image,
        ),
        Command::Trust { prefix, root, format, args, dirs, debug } => trust(
            &top.with(Given { dirs: Some(dirs), debug: Some(debug), ..Default::default() }),
            prefix,
            root,
            &format,
            &args,
        ),
        Command::Image { data, dirs, insecure, command } => {
            let dirs = ConfigDirs { local_config: dirs.local_config, system_config: None };
            let given = Given { data: Some(data), dirs: Some(dirs), insecure: Some(insecure), ..Default::default() };
            image_cmd(top.with(given), command)
        }
        Command::Bench(args) => bench(args),
        Command::Stats { format, data } => {
            let rkt = top.with(Given { data: Some(data), ..Default::default() });
            json_format(&format)
                .and_then(|json| crate::cli::app::stats(data_dir(rkt.dir).root().to_path_buf(), json))
                .map(|out| print!("{}", if out.ends_with('\n') { out } else { format!("{out}\n") }))
        }
    })
}

/// `stop` and `gc` as rkt's stage1 entry points run them.
fn stage1_entrypoint(command: Stage1Command) -> Result<(), String> {
    match command {
        Stage1Command::Stop { dir, force, uuid } => {
            crate::cli::pods::stage1_stop(&data_dir(Some(dir)), &uuid, force).map_err(|e| e.to_string())
        }
        Stage1Command::Gc { dir, debug, local_config: _, uuid } => {
            if debug {
                init_logging("debug");
            }
            crate::cli::pods::stage1_gc(&data_dir(Some(dir)), &uuid).map_err(|e| e.to_string())
        }
    }
}

/// `rktlet list`: the table stands, the problems follow on stderr (as rkt).
fn list(data: &rkt::pod::DataDir, format: &str, full: bool, no_legend: bool) -> ExitCode {
    match Format::parse(format).and_then(|f| crate::cli::pods::list(data, f, full, no_legend)) {
        Ok(l) => {
            print!("{}", l.out);
            for e in l.errors {
                eprintln!("rktlet: {e}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => rkt_failure(&e),
    }
}

/// `rktlet app ...`: rkt's app commands on a running pod.
fn app(rkt: RktFlags, command: AppCommand) -> ExitCode {
    let dir = rkt.dir;
    let root = || data_dir(dir.clone()).root().to_path_buf();
    let shown = |out: Result<String, String>| out.map(|out| print!("{out}"));
    done(match command {
        AppCommand::Add(args) => crate::cli::app::add(root(), args).map(|id| println!("{id}")),
        AppCommand::Start { uuid, app } => crate::cli::app::lifecycle(root(), "start", &uuid, &app, 0),
        AppCommand::Stop { uuid, app, timeout } => crate::cli::app::lifecycle(root(), "stop", &uuid, &app, timeout),
        AppCommand::Rm { uuid, app } => crate::cli::app::lifecycle(root(), "rm", &uuid, &app, 0),
        AppCommand::List { uuid, format, no_legend } => {
            shown(Format::parse(&format).and_then(|f| crate::cli::app::show(root(), &uuid, None, f, no_legend)))
        }
        AppCommand::Status { uuid, app, format } => {
            shown(Format::parse(&format).and_then(|f| crate::cli::app::show(root(), &uuid, Some(&app), f, false)))
        }
        AppCommand::Exec { uuid, app, timeout, cmd } => return app_exec(dir, &uuid, &app, timeout, cmd),
        AppCommand::Sandbox(args) => {
            // a standby process: the daemon sends the arguments when a pod starts
            let args = match args.resolve_standby(&mut std::io::stdin().lock()) {
                Ok(Some(args)) => Ok(args),
                Ok(None) => return ExitCode::SUCCESS,
                Err(e) => Err(e),
            };
            args.and_then(|a| a.into_options(data_dir(dir.clone())))
                .and_then(crate::stage1::sandbox::run)
                .map(|never| match never {})
                .map_err(|e| e.to_string())
        }
    })
}
