//! Daemon configuration: built-in defaults, overridden by an optional TOML
//! file (`--config`), overridden by command-line flags.

use serde::Deserialize;
use std::fs;
use std::path::{Path, PathBuf};

pub(crate) const DEFAULT_SOCKET: &str = "/run/rktlet/rktlet.sock";
pub(crate) const DEFAULT_DATA_DIR: &str = "/var/lib/rktlet/data";
pub(crate) const DEFAULT_CNI_CONF_DIR: &str = "/etc/cni/net.d";
pub(crate) const DEFAULT_CNI_BIN_DIRS: [&str; 2] = ["/opt/cni/bin", "/usr/lib/cni"];
/// Registry mirrors and insecure hosts (see `image::hosts`); a missing file means none.
pub(crate) const DEFAULT_REGISTRY_CONFIG: &str = "/etc/rktlet/registries.toml";
/// rkt's local configuration directory: its `trustedkeys/` (see `crate::trust`).
pub(crate) const DEFAULT_TRUST_DIR: &str = "/etc/rkt";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid config file {path}: {source}")]
    Parse { path: PathBuf, source: toml::de::Error },
    #[error("invalid log level {0:?} ({1}): use error, warn, info, debug or trace")]
    LogLevel(String, String),
    #[error("invalid log format {0:?} ({1}): use text or json")]
    LogFormat(String, String),
    #[error("metrics address {0} ({1}) is not a loopback address: the metrics listener is for the node itself")]
    MetricsAddress(std::net::SocketAddr, String),
    #[error("pod pool size {0} ({1}) is above the maximum of {MAX_POD_POOL_SIZE}")]
    PoolSize(usize, String),
}

/// The config file: every key optional; unknown keys are an error so typos show.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The file these values were read from (not a key: set by [`FileConfig::load`]).
    #[serde(skip)]
    pub path: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    pub rkt_path: Option<PathBuf>,
    pub log_level: Option<String>,
    /// `text` (human-readable) or `json` (one object per line).
    pub log_format: Option<String>,
    pub cni_conf_dir: Option<PathBuf>,
    pub cni_bin_dirs: Option<Vec<PathBuf>>,
    pub registry_config: Option<PathBuf>,
    /// Directory whose `trustedkeys/` holds the keys ACIs are checked with.
    pub trust_dir: Option<PathBuf>,
    /// Serve CRI the original rktlet's way, by exec'ing the CLI per call (for benchmarks).
    pub exec_mode: Option<bool>,
    /// Loopback address of the Prometheus metrics listener (none: off).
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Pre-booted pods kept ready for RunPodSandbox (0: none).
    pub pod_pool_size: Option<usize>,
    /// Address of the streaming server (Exec URLs); port 0 picks a free one.
    pub streaming_address: Option<std::net::SocketAddr>,
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        let mut file: FileConfig =
            toml::from_str(&text).map_err(|source| ConfigError::Parse { path: path.into(), source })?;
        file.path = Some(path.into());
        Ok(file)
    }

    /// Whether the key `key` (a config file key, e.g. `pod_pool_size`) has a value here.
    pub(crate) fn has(&self, key: &str) -> bool {
        match key {
            "socket" => self.socket.is_some(),
            "data_dir" => self.data_dir.is_some(),
            "rkt_path" => self.rkt_path.is_some(),
            "log_level" => self.log_level.is_some(),
            "log_format" => self.log_format.is_some(),
            "cni_conf_dir" => self.cni_conf_dir.is_some(),
            "cni_bin_dirs" => self.cni_bin_dirs.is_some(),
            "registry_config" => self.registry_config.is_some(),
            "trust_dir" => self.trust_dir.is_some(),
            "exec_mode" => self.exec_mode.is_some(),
            "metrics_address" => self.metrics_address.is_some(),
            "pod_pool_size" => self.pod_pool_size.is_some(),
            "streaming_address" => self.streaming_address.is_some(),
            _ => false,
        }
    }
}

/// Where the effective value of config key `key` came from, for messages:
/// `--pod-pool-size`, `pod_pool_size in /etc/rktlet/config.toml`, or `the default`.
pub(crate) fn origin(key: &str, file: &FileConfig, flags: &FileConfig) -> String {
    if flags.has(key) {
        let flag = if key == "cni_bin_dirs" { "cni-bin-dir".to_string() } else { key.replace('_', "-") };
        format!("--{flag}")
    } else if file.has(key) {
        match &file.path {
            Some(p) => format!("{key} in {}", p.display()),
            None => format!("{key} in the config file"),
        }
    } else {
        "the default".into()
    }
}

/// The effective configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub socket: PathBuf,
    pub data_dir: PathBuf,
    /// The program run as `<rkt> app sandbox`; `None` means this binary itself.
    pub rkt_path: Option<PathBuf>,
    pub log_level: String,
    pub log_format: String,
    pub cni_conf_dir: PathBuf,
    pub cni_bin_dirs: Vec<PathBuf>,
    pub registry_config: PathBuf,
    pub trust_dir: PathBuf,
    pub exec_mode: bool,
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Pre-booted pods kept ready for RunPodSandbox (see `crate::pool`).
    pub pod_pool_size: usize,
    pub streaming_address: std::net::SocketAddr,
}

/// The streaming server listens on loopback, on a free port, by default
/// (kubelet runs on the node and proxies streams to it).
pub(crate) const DEFAULT_STREAMING_ADDRESS: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// Pool pods by default: two idle pods cost about 11 MB of private memory
/// (pod-boot-fast.md §4) and serve a burst of two pod starts in ~10 ms each.
pub(crate) const DEFAULT_POD_POOL_SIZE: usize = 2;
/// More would only hold memory: refills boot one pod at a time anyway.
pub(crate) const MAX_POD_POOL_SIZE: usize = 64;

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: DEFAULT_SOCKET.into(),
            data_dir: DEFAULT_DATA_DIR.into(),
            rkt_path: None,
            log_level: "info".into(),
            log_format: "text".into(),
            cni_conf_dir: DEFAULT_CNI_CONF_DIR.into(),
            cni_bin_dirs: DEFAULT_CNI_BIN_DIRS.iter().map(PathBuf::from).collect(),
            registry_config: DEFAULT_REGISTRY_CONFIG.into(),
            trust_dir: DEFAULT_TRUST_DIR.into(),
            exec_mode: false,
            metrics_address: None,
            pod_pool_size: DEFAULT_POD_POOL_SIZE,
            streaming_address: DEFAULT_STREAMING_ADDRESS,
        }
    }
}

impl Config {
    /// Layers `file` then `flags` (a `FileConfig` too: `None` = not given) over the defaults.
    pub fn resolve(file: FileConfig, flags: FileConfig) -> Result<Self, ConfigError> {
        let from = |key: &str| origin(key, &file, &flags);
        let mut c = Config::default();
        for layer in [file.clone(), flags.clone()] {
            if let Some(v) = layer.socket {
                c.socket = v;
            }
            if let Some(v) = layer.data_dir {
                c.data_dir = v;
            }
            if let Some(v) = layer.rkt_path {
                c.rkt_path = Some(v);
            }
            if let Some(v) = layer.log_level {
                c.log_level = v;
            }
            if let Some(v) = layer.log_format {
                c.log_format = v;
            }
            if let Some(v) = layer.cni_conf_dir {
                c.cni_conf_dir = v;
            }
            if let Some(v) = layer.cni_bin_dirs {
                c.cni_bin_dirs = v;
            }
            if let Some(v) = layer.registry_config {
                c.registry_config = v;
            }
            if let Some(v) = layer.trust_dir {
                c.trust_dir = v;
            }
            if let Some(v) = layer.exec_mode {
                c.exec_mode = v;
            }
            if let Some(v) = layer.metrics_address {
                c.metrics_address = Some(v);
            }
            if let Some(v) = layer.pod_pool_size {
                c.pod_pool_size = v;
            }
            if let Some(v) = layer.streaming_address {
                c.streaming_address = v;
            }
        }
        if !["error", "warn", "info", "debug", "trace"].contains(&c.log_level.as_str()) {
            return Err(ConfigError::LogLevel(c.log_level, from("log_level")));
        }
        if !["text", "json"].contains(&c.log_format.as_str()) {
            return Err(ConfigError::LogFormat(c.log_format, from("log_format")));
        }
        if let Some(a) = c.metrics_address
            && !a.ip().is_loopback()
        {
            return Err(ConfigError::MetricsAddress(a, from("metrics_address")));
        }
        if c.pod_pool_size > MAX_POD_POOL_SIZE {
            return Err(ConfigError::PoolSize(c.pod_pool_size, from("pod_pool_size")));
        }
        Ok(c)
    }
}

/// `rktlet config default`: every key of the config file with its default
/// and what it does (`/etc/rktlet/config.toml`; flags override it).
pub(crate) fn default_toml() -> String {
    let d = Config::default();
    let bins: Vec<String> = d.cni_bin_dirs.iter().map(|p| format!("{:?}", p.display().to_string())).collect();
    format!(
        r#"# rktlet daemon configuration (rktlet serve --config FILE). Every key is
# optional; a command-line flag of the same name (dashes for underscores)
# overrides it. Unknown keys are an error.

# Unix socket kubelet and crictl connect to (--container-runtime-endpoint=unix://...).
socket = "{socket}"

# rkt data directory: pods/, cas/ (images), locks, CNI result caches.
# Must be on a filesystem overlayfs can use as upper layer (ext4, xfs, tmpfs).
data_dir = "{data}"

# Program run as `<rkt> app sandbox` for each pod start. Default: this binary.
# rkt_path = "/usr/local/bin/rktlet"

# error, warn, info, debug or trace (RUST_LOG overrides).
log_level = "{log}"
# text (for people; colours on a terminal) or json (one object per line).
log_format = "{log_format}"

# CNI: the first valid config (by file name) in cni_conf_dir is the pod
# network; plugins are looked up in cni_bin_dirs in order.
cni_conf_dir = "{cni}"
cni_bin_dirs = [{bins}]

# Registry mirrors and insecure registries (see README); missing file = none.
registry_config = "{registries}"

# rkt's trust store: PullImage of an ACI ("aci:" + a file or https URL) needs
# its signature by a key under trust_dir/trustedkeys (see `rktlet trust`).
trust_dir = "{trust}"

# The streaming server (the URLs Exec answers with; kubelet proxies them).
# Port 0 picks a free port. Plain HTTP: keep it on loopback.
streaming_address = "{streaming}"

# Serve Prometheus metrics at http://ADDRESS/metrics (loopback only). Default: off.
# metrics_address = "127.0.0.1:9095"

# Pods booted ahead for RunPodSandbox (0 turns the pool off, at most {max_pool}).
# Each idle pool pod holds a few MiB of private memory (docs/bench.md).
pod_pool_size = {pool}

# Serve every CRI call by exec'ing this binary's rkt-style CLI, as the
# original rktlet did (for benchmarks only).
exec_mode = false

# Not settable: the cgroup driver (systemd when the host's PID 1 is systemd,
# cgroupfs otherwise; kubelet must use the same, RuntimeConfig reports it).
"#,
        socket = d.socket.display(),
        data = d.data_dir.display(),
        log = d.log_level,
        log_format = d.log_format,
        cni = d.cni_conf_dir.display(),
        bins = bins.join(", "),
        registries = d.registry_config.display(),
        trust = d.trust_dir.display(),
        max_pool = MAX_POD_POOL_SIZE,
        pool = d.pod_pool_size,
        streaming = d.streaming_address,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_file_override_defaults() {
        let t = tempfile::tempdir().expect("tempdir");
        let path = t.path().join("config.toml");
        fs::write(&path, "socket = \"/tmp/a.sock\"\ndata_dir = \"/srv/data\"\ncni_bin_dirs = [\"/x\"]\n").expect("w");
        let file = FileConfig::load(&path).expect("load");
        let flags = FileConfig { socket: Some("/tmp/b.sock".into()), ..Default::default() };
        let c = Config::resolve(file, flags).expect("resolve");
        assert_eq!(c.socket, PathBuf::from("/tmp/b.sock"));
        assert_eq!(c.data_dir, PathBuf::from("/srv/data"));
        assert_eq!(c.cni_bin_dirs, [PathBuf::from("/x")]);
        assert_eq!(c.cni_conf_dir, PathBuf::from(DEFAULT_CNI_CONF_DIR));
        assert_eq!(c.log_level, "info");
        assert_eq!(c.pod_pool_size, DEFAULT_POD_POOL_SIZE);
        let flags = FileConfig { pod_pool_size: Some(0), ..Default::default() };
        assert_eq!(Config::resolve(FileConfig::default(), flags).expect("resolve").pod_pool_size, 0);
    }

    /// The keys `FileConfig` takes, read from its `Debug` form (every field
    /// but `path`, which is not a key), so a new key cannot be forgotten here.
    fn file_keys() -> Vec<String> {
        let debug = format!("{:?}", FileConfig::default());
        let inner = debug.trim_start_matches("FileConfig {").trim_end_matches('}');
        inner
            .split(", ")
            .filter_map(|f| f.split_once(':').map(|(k, _)| k.trim().to_string()))
            .filter(|k| k != "path")
            .collect()
    }

    #[test]
    fn the_default_file_is_the_defaults() {
        let text = default_toml();
        let file: FileConfig = toml::from_str(&text).expect("the printed default parses");
        assert_eq!(Config::resolve(file, FileConfig::default()).expect("resolve"), Config::default());
        let keys = file_keys();
        assert!(keys.len() >= 13, "{keys:?}");
        for key in &keys {
            // every key the file takes is named in it (commented out or set), and `has` knows it
            assert!(
                text.lines().any(|l| l.trim_start_matches("# ").starts_with(&format!("{key} ="))),
                "{key} is not in `rktlet config default`"
            );
        }
        // the commented-out keys parse too, with their example values
        let uncommented: String = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if keys.iter().any(|k| rest.starts_with(&format!("{k} ="))) => rest,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let all: FileConfig = toml::from_str(&uncommented).expect("every key of the default parses");
        for key in &keys {
            assert!(all.has(key), "{key} not set by the uncommented default (or `has` misses it)");
        }
        // every config-key-like word of the comments is a key (the comment once said `trusted_dir`)
        for line in text.lines().filter(|l| l.starts_with('#')) {
            for word in line.split(|c: char| !(c.is_ascii_lowercase() || c == '_')) {
                let word = word.trim_matches('_');
                if word.contains('_') {
                    assert!(keys.iter().any(|k| k == word), "comment names {word:?}, not a config key: {line}");
                }
            }
        }
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let t = tempfile::tempdir().expect("tempdir");
        let path = t.path().join("config.toml");
        fs::write(&path, "sockit = \"/tmp/a.sock\"\n").expect("w");
        let err = FileConfig::load(&path).expect_err("unknown key").to_string();
        assert!(err.contains("sockit"), "{err}");
        assert!(matches!(FileConfig::load(&t.path().join("missing.toml")), Err(ConfigError::Read { .. })));
        let flags = FileConfig { log_level: Some("loud".into()), ..Default::default() };
        assert!(matches!(Config::resolve(FileConfig::default(), flags), Err(ConfigError::LogLevel(..))));
        let flags = FileConfig { pod_pool_size: Some(10_000), ..Default::default() };
        let err = Config::resolve(FileConfig::default(), flags).expect_err("too big").to_string();
        assert!(err.contains("10000 (--pod-pool-size)"), "{err}");
        // a value refused from the file names the file and the key
        fs::write(&path, "pod_pool_size = 500\n").expect("w");
        let file = FileConfig::load(&path).expect("load");
        let err = Config::resolve(file.clone(), FileConfig::default()).expect_err("too big").to_string();
        assert!(err.contains(&format!("500 (pod_pool_size in {})", path.display())), "{err}");
        // and the flag, given, overrides the file's value
        let flags = FileConfig { pod_pool_size: Some(1), ..Default::default() };
        assert_eq!(Config::resolve(file, flags).expect("flag wins").pod_pool_size, 1);
        let file = FileConfig { metrics_address: Some("10.0.0.1:9095".parse().expect("addr")), ..Default::default() };
        let err = Config::resolve(file, FileConfig::default()).expect_err("not loopback").to_string();
        assert!(err.contains("(metrics_address in the config file)"), "{err}");
    }
}
