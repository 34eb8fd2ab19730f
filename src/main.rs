//! The `rktlet` binary: `rktlet serve` runs the CRI daemon; the rkt-style
//! subcommands (added as they are built) work on the same data directory.

use clap::{Args, Parser, Subcommand};
use rktlet::config::{Config, FileConfig};
use rktlet::runtime::Runtime;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Parser)]
#[command(name = "rktlet", version, about = "A Kubernetes CRI runtime that runs pods the rkt way")]
struct Cli {
    /// rkt data directory [default: /var/lib/rktlet/data].
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    /// Verbose logs on stderr.
    #[arg(long, global = true)]
    debug: bool,
    /// rkt's insecure options (comma list); accepted for compatibility.
    #[arg(long, global = true)]
    insecure_options: Option<String>,
    /// rkt's local configuration directory; accepted for compatibility.
    #[arg(long, global = true)]
    local_config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the CRI RuntimeService and ImageService on a unix socket.
    Serve(ServeArgs),
    /// App-level commands on mutable pods.
    #[command(subcommand)]
    App(AppCommand),
    /// List pods.
    List {
        #[arg(long, default_value = "table")]
        format: String,
    },
    /// Show one pod.
    Status {
        uuid: String,
        #[arg(long, default_value = "table")]
        format: String,
    },
    /// Stop pods (the pod's systemd powers off; --force kills at once).
    Stop {
        uuids: Vec<String>,
        #[arg(long)]
        force: bool,
    },
    /// Stop and delete pods.
    Rm { uuids: Vec<String> },
    /// Delete exited pods older than the grace period, and garbage.
    Gc {
        #[arg(long, default_value = "30m", value_parser = parse_duration)]
        grace_period: std::time::Duration,
    },
    /// Ask a running daemon for its Version and Status over the CRI socket (JSON).
    Info {
        /// The daemon's socket.
        #[arg(long, default_value = rktlet::config::DEFAULT_SOCKET)]
        socket: PathBuf,
    },
}

#[derive(Subcommand)]
enum AppCommand {
    /// Create and boot an empty mutable pod (stage0 + stage1), then become its nspawn.
    Sandbox(rktlet::stage1::sandbox::SandboxArgs),
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("invalid duration unit in {s:?}: use s, m or h")),
    };
    Ok(std::time::Duration::from_secs(secs))
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
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Program run as `<rkt> app sandbox` [default: this binary].
    #[arg(long)]
    rkt_path: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace [default: info]. RUST_LOG overrides.
    #[arg(long)]
    log_level: Option<String>,
    /// Directory with CNI network configs [default: /etc/cni/net.d].
    #[arg(long)]
    cni_conf_dir: Option<PathBuf>,
    /// Directory with CNI plugin binaries; repeat for several [default: /opt/cni/bin, /usr/lib/cni].
    #[arg(long = "cni-bin-dir")]
    cni_bin_dirs: Vec<PathBuf>,
}

impl ServeArgs {
    fn config(self) -> Result<Config, rktlet::config::ConfigError> {
        let file = match &self.config {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        let flags = FileConfig {
            socket: self.socket,
            data_dir: self.data_dir,
            rkt_path: self.rkt_path,
            log_level: self.log_level,
            cni_conf_dir: self.cni_conf_dir,
            cni_bin_dirs: (!self.cni_bin_dirs.is_empty()).then_some(self.cni_bin_dirs),
        };
        Config::resolve(file, flags)
    }
}

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("rktlet={level},warn")));
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).try_init();
}

fn serve(args: ServeArgs) -> Result<(), String> {
    let config = args.config().map_err(|e| e.to_string())?;
    init_logging(&config.log_level);
    let runtime = Runtime::new(config).map_err(|e| e.to_string())?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    tokio.block_on(rktlet::server::run(Arc::new(runtime))).map_err(|e| e.to_string())
}

fn info(socket: PathBuf) -> Result<(), String> {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let info = tokio.block_on(rktlet::client::info(&socket))?;
    println!("{}", serde_json::to_string_pretty(&info).map_err(|e| e.to_string())?);
    Ok(())
}

fn data_dir(dir: Option<PathBuf>) -> rktlet::pod::DataDir {
    rktlet::pod::DataDir::new(dir.unwrap_or_else(|| PathBuf::from(rktlet::config::DEFAULT_DATA_DIR)))
}

fn json_format(format: &str) -> Result<bool, String> {
    match format {
        "json" => Ok(true),
        "table" | "" => Ok(false),
        other => Err(format!("unknown --format={other}: use json or table")),
    }
}

fn for_each(ids: &[String], f: impl Fn(&str) -> Result<(), String>) -> Result<(), String> {
    let errors: Vec<String> = ids.iter().filter_map(|id| f(id).err().map(|e| format!("{id}: {e}"))).collect();
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.debug {
        init_logging("debug");
    }
    let result = match cli.command {
        Command::Serve(mut args) => {
            args.data_dir = args.data_dir.or(cli.dir);
            serve(args)
        }
        Command::Info { socket } => info(socket),
        Command::App(AppCommand::Sandbox(args)) => args
            .into_options(data_dir(cli.dir))
            .and_then(rktlet::stage1::sandbox::run)
            .map(|never| match never {})
            .map_err(|e| e.to_string()),
        Command::List { format } => json_format(&format)
            .and_then(|json| rktlet::cli::list(&data_dir(cli.dir), json).map_err(|e| e.to_string()))
            .map(|out| print!("{out}")),
        Command::Status { uuid, format } => json_format(&format)
            .and_then(|json| rktlet::cli::status(&data_dir(cli.dir), &uuid, json).map_err(|e| e.to_string()))
            .map(|out| println!("{}", out.trim_end())),
        Command::Stop { uuids, force } => {
            let data = data_dir(cli.dir);
            for_each(&uuids, |id| rktlet::cli::stop_pod(&data, id, force).map_err(|e| e.to_string()))
        }
        Command::Rm { uuids } => {
            let data = data_dir(cli.dir);
            for_each(&uuids, |id| rktlet::cli::rm_pod(&data, id).map_err(|e| e.to_string()))
        }
        Command::Gc { grace_period } => rktlet::cli::gc(&data_dir(cli.dir), grace_period)
            .map(|removed| removed.iter().for_each(|u| println!("removed {u}")))
            .map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rktlet: {e}");
            ExitCode::FAILURE
        }
    }
}
