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
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the CRI RuntimeService and ImageService on a unix socket.
    Serve(ServeArgs),
    /// Ask a running daemon for its Version and Status over the CRI socket (JSON).
    Info {
        /// The daemon's socket.
        #[arg(long, default_value = rktlet::config::DEFAULT_SOCKET)]
        socket: PathBuf,
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
    #[arg(long, visible_alias = "dir")]
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
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Info { socket } => info(socket),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rktlet: {e}");
            ExitCode::FAILURE
        }
    }
}
