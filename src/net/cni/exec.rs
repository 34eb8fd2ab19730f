//! Running a network's plugin chain: ADD in order with `prevResult`, DEL in
//! reverse, CHECK against the cached ADD result. Runs in the daemon; each
//! plugin is a child process in its own process group, killed on timeout.

use super::{CniError, CniResult, NetworkConfig, find_plugin, join_dirs};
use crate::net::dns::DnsConfig;
use crate::net::netns;
use crate::proto::v1;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// How long one plugin may run before it is killed.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A loaded network config and where its plugins are.
#[derive(Debug, Clone)]
pub(crate) struct Network {
    pub config: NetworkConfig,
    pub bin_dirs: Vec<PathBuf>,
    /// Per plugin execution.
    pub timeout: Duration,
}

/// What a pod asks of a network: the CNI_* environment and the capability args.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CniRequest {
    /// CNI_CONTAINERID: the pod UUID.
    pub container_id: String,
    /// CNI_NETNS.
    pub netns_path: PathBuf,
    /// CNI_IFNAME (`eth0`, or `lo` for the loopback network).
    pub ifname: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
    /// The `portMappings` capability (portmap).
    pub port_mappings: Vec<PortMapping>,
    /// The `dns` capability, for plugins that declare it.
    pub dns: Option<DnsConfig>,
    /// Where the ADD result is cached for DEL and CHECK (e.g. the pod dir).
    pub cache_dir: PathBuf,
}

impl CniRequest {
    /// A request for `eth0`, with the other fields empty.
    pub(crate) fn new(container_id: &str, netns_path: &Path, cache_dir: &Path) -> Self {
        CniRequest {
            container_id: container_id.into(),
            netns_path: netns_path.into(),
            ifname: "eth0".into(),
            cache_dir: cache_dir.into(),
            ..Default::default()
        }
    }

    /// CNI_ARGS as kubelet-era runtimes pass them.
    fn cni_args(&self) -> String {
        let mut args = vec!["IgnoreUnknown=1".to_string()];
        for (k, v) in [
            ("K8S_POD_NAMESPACE", &self.pod_namespace),
            ("K8S_POD_NAME", &self.pod_name),
            ("K8S_POD_INFRA_CONTAINER_ID", &self.container_id),
            ("K8S_POD_UID", &self.pod_uid),
        ] {
            if !v.is_empty() {
                args.push(format!("{k}={v}"));
            }
        }
        args.join(";")
    }

    /// The capability arguments this request offers, by capability name.
    fn capability_args(&self) -> Map<String, Value> {
        let mut caps = Map::new();
        if !self.port_mappings.is_empty() {
            caps.insert("portMappings".into(), json!(self.port_mappings));
        }
        if let Some(dns) = self.dns.as_ref().filter(|d| !d.is_empty()) {
            caps.insert("dns".into(), json!(dns));
        }
        caps
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

/// One `portMappings` entry, as the portmap plugin reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: Protocol,
    #[serde(rename = "hostIP", default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

impl PortMapping {
    /// The CRI mapping, or `None` when it publishes no host port.
    pub(crate) fn from_cri(p: &v1::PortMapping) -> Option<PortMapping> {
        let host_port = u16::try_from(p.host_port).ok().filter(|p| *p != 0)?;
        let container_port = u16::try_from(p.container_port).ok().filter(|p| *p != 0)?;
        let protocol = match v1::Protocol::try_from(p.protocol) {
            Ok(v1::Protocol::Udp) => Protocol::Udp,
            Ok(v1::Protocol::Sctp) => Protocol::Sctp,
            _ => Protocol::Tcp,
        };
        Some(PortMapping { host_port, container_port, protocol, host_ip: p.host_ip.clone() })
    }
}

/// What ADD leaves in `cache_dir` so a later DEL (even after a daemon crash
/// or a config change) can give the plugins the same prevResult and args.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CacheEntry {
    kind: String,
    container_id: String,
    if_name: String,
    network_name: String,
    capability_args: Map<String, Value>,
    result: Value,
    /// Set while only the first plugins ran (a pool pod wired ahead of its
    /// request, see [`Network::add_prefix`]): how many, and the digest of
    /// the config they ran with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prefix: Option<Prefix>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Prefix {
    plugins: usize,
    config_sha256: String,
}

const CACHE_KIND: &str = "cniCacheV1";

/// Plugin types that read neither the pod's identity (`K8S_POD_*` in
/// CNI_ARGS) nor runtime config they did not declare a capability for, so
/// they may run before a pod is known. IPAM is checked separately.
const IDENTITY_FREE_PLUGINS: [&str; 10] =
    ["bridge", "ptp", "macvlan", "ipvlan", "vlan", "host-device", "loopback", "tuning", "sbr", "vrf"];
/// IPAM types that allocate by container id only (whereabouts, for one,
/// records the pod's name).
const IDENTITY_FREE_IPAM: [&str; 2] = ["host-local", "static"];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Command {
    Add,
    Del,
    #[cfg(test)]
    Check,
}

impl Command {
    fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            #[cfg(test)]
            Command::Check => "CHECK",
        }
    }
}

impl Network {
    pub(crate) fn new(config: NetworkConfig, bin_dirs: Vec<PathBuf>) -> Self {
        Network { config, bin_dirs, timeout: DEFAULT_TIMEOUT }
    }

    /// The pod network: the first valid config in `conf_dir`.
    pub(crate) fn load_default(conf_dir: &Path, bin_dirs: &[PathBuf]) -> Result<Self, CniError> {
        Ok(Self::new(super::default_network(conf_dir)?, bin_dirs.to_vec()))
    }

    /// CNI's `loopback` plugin as a network of its own; run it with ifname `lo`.
    /// ([`crate::net::netns::Netns::set_link_up`] does the same without an exec.)
    #[cfg(test)]
    pub(crate) fn loopback(bin_dirs: &[PathBuf]) -> Self {
        let plugin: Map<String, Value> = [("type".to_string(), json!("loopback"))].into_iter().collect();
        let config = NetworkConfig {
            path: PathBuf::from("<built-in loopback>"),
            name: "cni-loopback".into(),
            cni_version: "1.0.0".into(),
            plugins: vec![super::PluginConf { plugin_type: "loopback".into() }],
            disable_check: false,
            bytes: Vec::new(),
            plugin_json: vec![plugin],
        };
        Self::new(config, bin_dirs.to_vec())
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// Runs ADD through the chain and caches the result in `req.cache_dir`.
    /// On failure, DEL runs for the whole chain so nothing is left behind.
    pub(crate) async fn add(&self, req: &CniRequest) -> Result<CniResult, CniError> {
        self.add_from(req, 0, None).await
    }

    /// How many leading plugins may run before the pod's identity and
    /// capability arguments are known: identity-free types with an
    /// identity-free IPAM (or none) that declare no capability.
    pub(crate) fn identity_free_prefix(&self) -> usize {
        self.config
            .plugin_json
            .iter()
            .take_while(|p| {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or_default();
                let ipam = p.get("ipam").and_then(|i| i.get("type")).and_then(Value::as_str);
                let caps = p.get("capabilities").and_then(Value::as_object);
                IDENTITY_FREE_PLUGINS.contains(&kind)
                    && ipam.is_none_or(|t| IDENTITY_FREE_IPAM.contains(&t))
                    && caps.is_none_or(|c| c.values().all(|v| v == &Value::Bool(false)))
            })
            .count()
    }

    fn config_sha256(&self) -> String {
        use sha2::Digest;
        sha2::Sha256::digest(&self.config.bytes).iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Runs ADD for the first `n` plugins (see [`Self::identity_free_prefix`])
    /// and caches their result, marked as a prefix, so DEL works from here on
    /// and [`Self::prefix_done`] finds it. On failure they are undone.
    pub(crate) async fn add_prefix(&self, req: &CniRequest, n: usize) -> Result<(), CniError> {
        let caps = Map::new();
        let prev = self.add_range(req, 0..n.min(self.config.plugin_json.len()), None, &caps).await?;
        let prefix = Some(Prefix { plugins: n, config_sha256: self.config_sha256() });
        self.write_cache(req, &self.cache_entry(req, caps, prev.unwrap_or(Value::Null), prefix))
    }

    /// A prefix [`Self::add_prefix`] ran for `req`'s container with this very
    /// config: how many plugins and their result, to go on from.
    pub(crate) fn prefix_done(&self, req: &CniRequest) -> Option<(usize, Value)> {
        let entry = self.read_cache(req).ok()??;
        let prefix = entry.prefix?;
        (entry.network_name == self.name() && prefix.config_sha256 == self.config_sha256())
            .then_some((prefix.plugins, entry.result))
    }

    /// Runs ADD from plugin `from` on, with `prev` as the result so far, and
    /// caches the whole chain's result. On failure, DEL runs for the whole
    /// chain.
    pub(crate) async fn add_from(
        &self,
        req: &CniRequest,
        from: usize,
        prev: Option<Value>,
    ) -> Result<CniResult, CniError> {
        let caps = req.capability_args();
        let prev = self.add_range(req, from..self.config.plugin_json.len(), prev, &caps).await?;
        let raw = prev.unwrap_or(Value::Null);
        let result = CniResult::parse(raw.clone()).map_err(|reason| CniError::BadResult {
            network: self.name().into(),
            plugin: self.config.plugins.last().map(|p| p.plugin_type.clone()).unwrap_or_default(),
            command: "ADD",
            reason,
        })?;
        self.write_cache(req, &self.cache_entry(req, caps, raw, None))?;
        tracing::debug!(network = self.name(), container = %req.container_id, ip = ?result.pod_ip(), "CNI ADD done");
        Ok(result)
    }

    /// Runs ADD for the plugins of `range` with `prev` as the result so far;
    /// on a failure, DEL runs for the whole chain so nothing is left behind.
    async fn add_range(
        &self,
        req: &CniRequest,
        range: std::ops::Range<usize>,
        mut prev: Option<Value>,
        caps: &Map<String, Value>,
    ) -> Result<Option<Value>, CniError> {
        for i in range {
            let mut added = self.run_plugin(i, Command::Add, req, prev.as_ref(), caps).await;
            if let Err(e) = &added
                && lost_a_chain_race(e)
            {
                // the chain is there now, made by the other ADD: once more
                tracing::debug!(network = self.name(), container = %req.container_id, error = %e, "CNI ADD lost an iptables chain race, again");
                added = self.run_plugin(i, Command::Add, req, prev.as_ref(), caps).await;
            }
            match added {
                Ok(result) => prev = Some(result),
                Err(e) => {
                    tracing::warn!(network = self.name(), container = %req.container_id, error = %e, "CNI ADD failed, undoing");
                    if let Err(undo) = self.del_chain(req, prev.as_ref(), caps).await {
                        tracing::warn!(network = self.name(), error = %undo, "CNI DEL after a failed ADD failed too");
                    }
                    return Err(e);
                }
            }
        }
        Ok(prev)
    }

    fn cache_entry(
        &self,
        req: &CniRequest,
        caps: Map<String, Value>,
        result: Value,
        prefix: Option<Prefix>,
    ) -> CacheEntry {
        CacheEntry {
            kind: CACHE_KIND.into(),
            container_id: req.container_id.clone(),
            if_name: req.ifname.clone(),
            network_name: self.name().into(),
            capability_args: caps,
            result,
            prefix,
        }
    }

    /// Runs DEL through the chain in reverse. Idempotent: works without a
    /// cached result, a second time, and after the netns is gone (then
    /// CNI_NETNS is empty, which the spec allows for DEL).
    pub(crate) async fn del(&self, req: &CniRequest) -> Result<(), CniError> {
        let cached = self.read_cache(req)?;
        let (prev, caps) = match cached {
            Some(c) => (Some(c.result), c.capability_args),
            None => (None, req.capability_args()),
        };
        self.del_chain(req, prev.as_ref(), &caps).await?;
        let path = self.cache_path(req);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(CniError::Cache { path, source }),
        }
    }

    /// Runs CHECK through the chain with the cached ADD result.
    #[cfg(test)]
    pub(crate) async fn check(&self, req: &CniRequest) -> Result<(), CniError> {
        if self.config.disable_check {
            return Ok(());
        }
        if !version_at_least(&self.config.cni_version, (0, 4)) {
            let what = format!("CHECK needs cniVersion 0.4.0 or later, config has {}", self.config.cni_version);
            return Err(CniError::Unsupported { network: self.name().into(), what });
        }
        let Some(cached) = self.read_cache(req)? else {
            let what =
                format!("no cached ADD result for container {} in {}", req.container_id, req.cache_dir.display());
            return Err(CniError::Unsupported { network: self.name().into(), what });
        };
        for i in 0..self.config.plugin_json.len() {
            self.run_plugin(i, Command::Check, req, Some(&cached.result), &cached.capability_args).await?;
        }
        Ok(())
    }

    /// DEL for every plugin, last first; all run even if one fails, and the
    /// first error is returned.
    async fn del_chain(
        &self,
        req: &CniRequest,
        prev: Option<&Value>,
        caps: &Map<String, Value>,
    ) -> Result<(), CniError> {
        let mut first_error = None;
        for i in (0..self.config.plugin_json.len()).rev() {
            if let Err(e) = self.run_plugin(i, Command::Del, req, prev, caps).await {
                tracing::warn!(network = self.name(), container = %req.container_id, error = %e, "CNI DEL failed");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The stdin of plugin `i`: its object plus name, cniVersion, prevResult
    /// and the runtimeConfig entries for the capabilities it declares.
    fn plugin_stdin(&self, i: usize, prev: Option<&Value>, caps: &Map<String, Value>) -> Vec<u8> {
        let mut conf = self.config.plugin_json.get(i).cloned().unwrap_or_default();
        conf.insert("name".into(), json!(self.config.name));
        conf.insert("cniVersion".into(), json!(self.config.cni_version));
        if let Some(prev) = prev {
            conf.insert("prevResult".into(), prev.clone());
        }
        let declared = conf.get("capabilities").and_then(Value::as_object);
        let runtime: Map<String, Value> = caps
            .iter()
            .filter(|(k, _)| declared.and_then(|d| d.get(*k)).and_then(Value::as_bool).unwrap_or(false))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !runtime.is_empty() {
            conf.insert("runtimeConfig".into(), Value::Object(runtime));
        }
        serde_json::to_vec(&Value::Object(conf)).unwrap_or_default()
    }

    async fn run_plugin(
        &self,
        i: usize,
        command: Command,
        req: &CniRequest,
        prev: Option<&Value>,
        caps: &Map<String, Value>,
    ) -> Result<Value, CniError> {
        let plugin = self.config.plugins.get(i).map(|p| p.plugin_type.clone()).unwrap_or_default();
        let path = find_plugin(&plugin, &self.bin_dirs).ok_or_else(|| CniError::MissingPlugin {
            network: self.name().into(),
            plugin: plugin.clone(),
            dirs: join_dirs(&self.bin_dirs),
        })?;
        // A DEL for a netns that is gone (removed, or lost in a reboot) passes none.
        let netns = if command == Command::Del && !netns::is_netns(&req.netns_path) {
            PathBuf::new()
        } else {
            req.netns_path.clone()
        };
        let mut cmd = tokio::process::Command::new(&path);
        cmd.env("CNI_COMMAND", command.as_str())
            .env("CNI_CONTAINERID", &req.container_id)
            .env("CNI_NETNS", &netns)
            .env("CNI_IFNAME", &req.ifname)
            .env("CNI_ARGS", req.cni_args())
            .env("CNI_PATH", join_dirs(&self.bin_dirs))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let stdin = self.plugin_stdin(i, prev, caps);
        let started = std::time::Instant::now();
        let output = self.spawn_and_wait(&mut cmd, &path, &plugin, command, stdin).await?;
        // a pod's network set-up and release are mostly these runs (a veth's
        // deletion waits for the kernel's RCU callbacks inside bridge's DEL)
        tracing::debug!(
            network = self.name(),
            container = %req.container_id,
            plugin,
            command = command.as_str(),
            micros = started.elapsed().as_micros() as u64,
            "CNI plugin ran"
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let (code, message) = plugin_error(&stdout, &stderr, output.status);
            return Err(CniError::Plugin {
                network: self.name().into(),
                plugin,
                command: command.as_str(),
                code,
                message,
            });
        }
        if command != Command::Add {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&output.stdout).map_err(|e| CniError::BadResult {
            network: self.name().into(),
            plugin,
            command: command.as_str(),
            reason: format!("{e}: {}", stdout.trim()),
        })
    }

    async fn spawn_and_wait(
        &self,
        cmd: &mut tokio::process::Command,
        path: &Path,
        plugin: &str,
        command: Command,
        stdin: Vec<u8>,
    ) -> Result<std::process::Output, CniError> {
        let exec_error = |source| CniError::Exec { network: self.name().into(), path: path.to_path_buf(), source };
        let mut attempts = 0;
        let mut child = loop {
            match cmd.spawn() {
                Ok(c) => break c,
                // A plugin binary just written by someone may still be open for
                // writing in a process that is between fork and exec.
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 20 => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => return Err(exec_error(e)),
            }
        };
        let pgid = child.id();
        let mut pipe = child.stdin.take();
        let run = async move {
            let write = async {
                if let Some(p) = pipe.as_mut() {
                    // A plugin that exits without reading its stdin is judged by its exit status.
                    let _ = p.write_all(&stdin).await;
                }
                drop(pipe);
            };
            let (_, out) = tokio::join!(write, output_reaped_later(child));
            out
        };
        match tokio::time::timeout(self.timeout, run).await {
            Ok(out) => out.map_err(exec_error),
            Err(_) => {
                // The child itself is killed on drop; this reaches what it started (e.g. IPAM).
                if let Some(pgid) = pgid.and_then(|p| i32::try_from(p).ok()) {
                    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::SIGKILL);
                }
                Err(CniError::Timeout {
                    network: self.name().into(),
                    plugin: plugin.into(),
                    command: command.as_str(),
                    timeout: self.timeout,
                })
            }
        }
    }

    fn cache_path(&self, req: &CniRequest) -> PathBuf {
        req.cache_dir.join(format!("cni-{}-{}.json", self.name(), req.ifname))
    }

    fn write_cache(&self, req: &CniRequest, entry: &CacheEntry) -> Result<(), CniError> {
        let path = self.cache_path(req);
        let cache_err = |source| CniError::Cache { path: path.clone(), source };
        let bytes = serde_json::to_vec(entry).map_err(|e| cache_err(io::Error::other(e)))?;
        fs::create_dir_all(&req.cache_dir).map_err(cache_err)?;
        let tmp = path.with_extension("json.tmp");
        fs::write(&tmp, bytes).map_err(cache_err)?;
        fs::rename(&tmp, &path).map_err(cache_err)
    }

    fn read_cache(&self, req: &CniRequest) -> Result<Option<CacheEntry>, CniError> {
        let path = self.cache_path(req);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(CniError::Cache { path, source }),
        };
        match serde_json::from_slice::<CacheEntry>(&bytes) {
            Ok(c) if c.kind == CACHE_KIND && c.container_id == req.container_id => Ok(Some(c)),
            // A torn or foreign cache must not block DEL: go on without it.
            other => {
                tracing::warn!(cache = %path.display(), ok = other.is_ok(), "ignoring unusable CNI result cache");
                Ok(None)
            }
        }
    }
}

/// The CNI error object (`code`, `msg`, `details`) if stdout has one, with
/// the exit status and stderr appended.
fn plugin_error(stdout: &str, stderr: &str, status: std::process::ExitStatus) -> (Option<u64>, String) {
    #[derive(Deserialize)]
    struct ErrorObject {
        code: Option<u64>,
        #[serde(default)]
        msg: String,
        #[serde(default)]
        details: String,
    }
    let mut message = String::new();
    let parsed = serde_json::from_str::<ErrorObject>(stdout.trim()).ok();
    let code = parsed.as_ref().and_then(|e| e.code);
    match parsed {
        Some(e) => {
            message.push_str(if e.msg.is_empty() { "(no message)" } else { &e.msg });
            if !e.details.is_empty() {
                message.push_str(": ");
                message.push_str(&e.details);
            }
            if let Some(c) = code {
                message.push_str(&format!(" (CNI code {c})"));
            }
        }
        None if !stdout.trim().is_empty() => message.push_str(stdout.trim()),
        None => message.push_str(&status.to_string()),
    }
    if !stderr.trim().is_empty() {
        message.push_str("; stderr: ");
        message.push_str(stderr.trim());
    }
    (code, message)
}

/// Whether a `major.minor.patch` version is at least `(major, minor)`.
#[cfg(test)]
fn version_at_least(version: &str, min: (u32, u32)) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= min
}

/// Whether a plugin's ADD failed because another ADD made the same
/// iptables chain between its check and its own create: portmap's shared
/// chains (CNI-HOSTPORT-*) on a node that has none yet, when pods start at
/// once. The plugins treat an existing chain as fine, but only as the
/// legacy iptables words it ("Chain already exists"); iptables-nft (Debian
/// 12's) says `CHAIN_USER_ADD failed (File exists)`.
fn lost_a_chain_race(e: &CniError) -> bool {
    matches!(e, CniError::Plugin { message, .. }
        if message.contains("iptables") && message.contains("chain CNI-HOSTPORT-") && message.contains("File exists"))
}

/// How long an ended plugin stays a zombie before it is reaped.
const REAP_AFTER: Duration = Duration::from_millis(20);

/// The plugin's output and exit status, once it ended; the plugin itself is
/// reaped [`REAP_AFTER`] later, off the pod's path. A plugin that entered the
/// pod's network namespace (bridge) ends as a multi-threaded process, and
/// reaping its zombie invalidates the /proc dentries of its threads while
/// the last of them may still be flushing its own: under load the reaper
/// spun there for milliseconds of CPU per plugin (measured: 6% of the node's
/// CPU in a run of 110 pods started 4 at a time). Where the pidfd is refused,
/// the plugin is reaped at once as before.
async fn output_reaped_later(mut child: tokio::process::Child) -> io::Result<std::process::Output> {
    use tokio::io::AsyncReadExt;
    let pidfd = child.id().and_then(|pid| crate::base::sys::pidfd_open(pid as i32).ok());
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let read_out = async {
        match out {
            Some(mut o) => o.read_to_end(&mut stdout).await.map(drop),
            None => Ok(()),
        }
    };
    let read_err = async {
        match err {
            Some(mut e) => e.read_to_end(&mut stderr).await.map(drop),
            None => Ok(()),
        }
    };
    let (a, b) = tokio::join!(read_out, read_err);
    a?;
    b?;
    let ended = match pidfd {
        Some(fd) => ended_unreaped(fd).await,
        None => None,
    };
    let status = match ended {
        Some(status) => {
            tokio::spawn(async move {
                tokio::time::sleep(REAP_AFTER).await;
                if let Err(e) = child.wait().await {
                    tracing::warn!("reaping a CNI plugin: {e}");
                }
            });
            status
        }
        None => child.wait().await?,
    };
    Ok(std::process::Output { status, stdout, stderr })
}

/// Waits for the child behind `pidfd` to end (a pidfd polls readable then)
/// and says how, without reaping it; None when it cannot be told so.
async fn ended_unreaped(pidfd: std::os::fd::OwnedFd) -> Option<std::process::ExitStatus> {
    // SAFETY: epoll registration of the pidfd we own, moved in: it stays open as long as the AsyncFd.
    let fd = unsafe { tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }.ok()?;
    loop {
        let mut ready = fd.readable().await.ok()?;
        match crate::base::sys::exit_status_unreaped(fd.get_ref()) {
            Ok(Some(status)) => return Some(status),
            Ok(None) => ready.clear_ready(),
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_iptables_chain_race_is_told_apart() {
        let plugin = |message: &str| CniError::Plugin {
            network: "pods".into(),
            plugin: "portmap".into(),
            command: "ADD",
            code: Some(999),
            message: message.into(),
        };
        // as portmap 1.1.1 reported it under iptables-nft (a test run, two ADDs at once)
        let raced = "unable to create chain CNI-HOSTPORT-SETMARK: running [/usr/sbin/iptables -t nat -N \
                     CNI-HOSTPORT-MASQ --wait]: exit status 4: iptables v1.8.9 (nf_tables):  CHAIN_USER_ADD \
                     failed (File exists): chain CNI-HOSTPORT-MASQ\n (CNI code 999)";
        assert!(lost_a_chain_race(&plugin(raced)));
        assert!(!lost_a_chain_race(&plugin("failed to set bridge addr: could not add IP address: file exists")));
        assert!(!lost_a_chain_race(&plugin(
            "running [/usr/sbin/iptables -t nat -N X]: exit status 1: Permission denied"
        )));
        let missing = CniError::MissingPlugin { network: "pods".into(), plugin: "portmap".into(), dirs: "/x".into() };
        assert!(!lost_a_chain_race(&missing));
    }

    fn network(json: &str) -> Network {
        let config = NetworkConfig::parse(Path::new("t.conflist"), json.as_bytes().to_vec()).expect("config");
        Network::new(config, vec![PathBuf::from("/nowhere")])
    }

    #[test]
    fn plugin_stdin_injects_name_version_prev_result_and_declared_capabilities() {
        let net = network(
            r#"{"cniVersion":"0.4.0","name":"pods","plugins":[
                {"type":"bridge","bridge":"br0","capabilities":{"dns":true}},
                {"type":"portmap","capabilities":{"portMappings":true,"dns":false}}]}"#,
        );
        let mut req = CniRequest::new("pod1", Path::new("/var/run/netns/x"), Path::new("/tmp"));
        req.port_mappings =
            vec![PortMapping { host_port: 8080, container_port: 80, protocol: Protocol::Tcp, host_ip: String::new() }];
        req.dns = Some(DnsConfig { servers: vec!["10.96.0.10".into()], ..Default::default() });
        let caps = req.capability_args();
        let first: Value = serde_json::from_slice(&net.plugin_stdin(0, None, &caps)).expect("json");
        assert_eq!(
            first,
            json!({"type":"bridge","bridge":"br0","capabilities":{"dns":true},"name":"pods","cniVersion":"0.4.0",
                   "runtimeConfig":{"dns":{"servers":["10.96.0.10"]}}})
        );
        let prev = json!({"cniVersion":"0.4.0","ips":[]});
        let second: Value = serde_json::from_slice(&net.plugin_stdin(1, Some(&prev), &caps)).expect("json");
        assert_eq!(second["prevResult"], prev);
        assert_eq!(
            second["runtimeConfig"],
            json!({"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]})
        );
        assert_eq!(second["name"], "pods");
        let none = net.plugin_stdin(1, None, &Map::new());
        assert!(serde_json::from_slice::<Value>(&none).expect("json").get("runtimeConfig").is_none());
    }

    #[test]
    fn single_conf_is_its_own_plugin() {
        let net = network(r#"{"cniVersion":"0.3.1","name":"n","type":"ptp","ipMasq":true}"#);
        let conf: Value = serde_json::from_slice(&net.plugin_stdin(0, None, &Map::new())).expect("json");
        assert_eq!(conf, json!({"cniVersion":"0.3.1","name":"n","type":"ptp","ipMasq":true}));
        assert_eq!(Network::loopback(&[]).config.plugins[0].plugin_type, "loopback");
    }

    #[test]
    fn cni_args_and_port_mappings_from_cri() {
        let mut req = CniRequest::new("abc", Path::new("/n"), Path::new("/c"));
        assert_eq!(req.cni_args(), "IgnoreUnknown=1;K8S_POD_INFRA_CONTAINER_ID=abc");
        req.pod_name = "web".into();
        req.pod_namespace = "default".into();
        req.pod_uid = "u1".into();
        assert_eq!(
            req.cni_args(),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u1"
        );
        let cri = |host_port, protocol| v1::PortMapping {
            protocol,
            container_port: 80,
            host_port,
            host_ip: "127.0.0.1".into(),
        };
        assert_eq!(PortMapping::from_cri(&cri(0, 0)), None);
        assert_eq!(PortMapping::from_cri(&cri(70000, 0)), None);
        let udp = PortMapping::from_cri(&cri(53, v1::Protocol::Udp as i32)).expect("mapping");
        assert_eq!(
            serde_json::to_value(&udp).expect("json"),
            json!({"hostPort":53,"containerPort":80,"protocol":"udp","hostIP":"127.0.0.1"})
        );
    }

    #[test]
    fn plugin_errors_are_readable() {
        use std::os::unix::process::ExitStatusExt;
        let status = std::process::ExitStatus::from_raw(1 << 8);
        let (code, msg) = plugin_error(
            r#"{"cniVersion":"1.0.0","code":11,"msg":"failed to allocate","details":"range full"}"#,
            "boom\n",
            status,
        );
        assert_eq!(code, Some(11));
        assert_eq!(msg, "failed to allocate: range full (CNI code 11); stderr: boom");
        assert_eq!(plugin_error("", "", status), (None, "exit status: 1".to_string()));
        assert_eq!(plugin_error("panic: x", "", status).1, "panic: x");
        assert!(version_at_least("1.0.0", (0, 4)) && version_at_least("0.4.0", (0, 4)));
        assert!(!version_at_least("0.3.1", (0, 4)));
    }
}
