//! Which endpoints serve a registry: mirrors per upstream host (ordered, each
//! with its own TLS setting, the upstream last unless disabled) and which
//! hosts may be reached over plain HTTP. Read from `registries.toml`:
//!
//! ```toml
//! insecure = ["registry.lan:5000"]        # plain HTTP allowed (loopback hosts always are)
//! [hosts."docker.io"]
//! skip_upstream = false                    # true: never fall back to the upstream
//! mirrors = [
//!   { endpoint = "https://mirror.example" },
//!   { endpoint = "http://10.0.0.5:5000", insecure = true },
//!   { endpoint = "https://self-signed.example", skip_verify = true },
//! ]
//! ```
//!
//! `signature_policy = "policy.json"` names the signature policy (`policy.rs`;
//! that is the default, next to this file).

use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

/// The upstream of `docker.io`.
pub(crate) const DOCKER_HUB_ENDPOINT: &str = "https://registry-1.docker.io";

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// Registry hosts (`host[:port]`) reached over plain HTTP.
    #[serde(default)]
    pub insecure: Vec<String>,
    /// Per upstream host: its mirrors.
    #[serde(default)]
    pub hosts: BTreeMap<String, HostConfig>,
    /// Seconds a registry may send nothing, mid-response, before the pull
    /// fails (default [`DEFAULT_STALL_SECS`]).
    #[serde(default)]
    pub stall_timeout_secs: Option<u64>,
    /// The largest layer accepted, uncompressed, in bytes (default
    /// [`DEFAULT_MAX_LAYER_BYTES`]): a decompression bomb stops there.
    #[serde(default)]
    pub max_layer_bytes: Option<u64>,
    /// The signature policy file (containers-policy.json shape, `policy.rs`);
    /// default: `policy.json` next to this file. Relative to this file's directory.
    #[serde(default)]
    pub signature_policy: Option<std::path::PathBuf>,
    /// Every registry over plain HTTP (`--insecure-options=http`).
    #[serde(skip)]
    pub all_http: bool,
    /// No TLS certificate verification anywhere (`--insecure-options=tls`).
    #[serde(skip)]
    pub all_skip_verify: bool,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    #[serde(default)]
    pub mirrors: Vec<MirrorConfig>,
    #[serde(default)]
    pub skip_upstream: bool,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MirrorConfig {
    /// `https://host[:port]`, `http://...`, or a bare `host[:port]` (HTTPS unless insecure).
    pub endpoint: String,
    #[serde(default)]
    pub insecure: bool,
    #[serde(default)]
    pub skip_verify: bool,
}

/// One place to send `/v2/...` requests for a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// Scheme, host and port, no trailing slash.
    pub base: String,
    pub skip_verify: bool,
    pub mirror: bool,
}

/// Five minutes without a byte, as containerd's `image_pull_progress_timeout`.
pub(crate) const DEFAULT_STALL_SECS: u64 = 300;
/// 64 GiB: above any real layer, below filling a node's disk with zeros.
pub(crate) const DEFAULT_MAX_LAYER_BYTES: u64 = 64 << 30;

impl RegistryConfig {
    pub(crate) fn stall_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.stall_timeout_secs.unwrap_or(DEFAULT_STALL_SECS).max(1))
    }

    pub(crate) fn max_layer_bytes(&self) -> u64 {
        self.max_layer_bytes.unwrap_or(DEFAULT_MAX_LAYER_BYTES)
    }

    /// Reads `path`; a missing file means no mirrors and no extra insecure hosts.
    pub(crate) fn load(path: &Path) -> Result<Self, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text).map_err(|e| format!("invalid registry config {}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Where the signature policy of a config read from `config_path` is,
    /// and whether it was named explicitly (then it must exist: a typo must
    /// not turn the policy off).
    pub(crate) fn policy_path(&self, config_path: &Path) -> (std::path::PathBuf, bool) {
        let dir = config_path.parent().unwrap_or(Path::new("/"));
        match &self.signature_policy {
            Some(p) => (dir.join(p), true),
            None => (dir.join("policy.json"), false),
        }
    }

    fn is_insecure(&self, host: &str) -> bool {
        self.all_http || is_loopback(host) || self.insecure.iter().any(|h| h == host)
    }

    /// The endpoints for registry `domain`, in the order to try them.
    pub(crate) fn endpoints(&self, domain: &str) -> Vec<Endpoint> {
        let host = self.hosts.get(domain);
        let mut out: Vec<Endpoint> = host
            .map(|h| {
                h.mirrors
                    .iter()
                    .map(|m| {
                        let base = m.endpoint.trim_end_matches('/').trim_end_matches("/v2").to_string();
                        let base = if base.contains("://") {
                            base
                        } else if m.insecure || self.is_insecure(&base) {
                            format!("http://{base}")
                        } else {
                            format!("https://{base}")
                        };
                        Endpoint { base, skip_verify: m.skip_verify || self.all_skip_verify, mirror: true }
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !host.is_some_and(|h| h.skip_upstream) || out.is_empty() {
            let base = if domain == rkt::reference::DEFAULT_DOMAIN {
                DOCKER_HUB_ENDPOINT.to_string()
            } else if self.is_insecure(domain) {
                format!("http://{domain}")
            } else {
                format!("https://{domain}")
            };
            out.push(Endpoint { base, skip_verify: self.all_skip_verify, mirror: false });
        }
        out
    }
}

/// `localhost`, `127.x.y.z`, `[::1]`, with or without a port.
pub(crate) fn is_loopback(host: &str) -> bool {
    let h = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        host.rsplit_once(':').map_or(host, |(h, p)| if p.bytes().all(|b| b.is_ascii_digit()) { h } else { host })
    };
    h == "localhost" || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_then_upstream() {
        let c: RegistryConfig = toml::from_str(
            r#"insecure = ["reg.lan:5000"]
            [hosts."docker.io"]
            mirrors = [{ endpoint = "https://m1.example/" }, { endpoint = "10.0.0.5:5000", insecure = true }]
            [hosts."quay.io"]
            skip_upstream = true
            mirrors = [{ endpoint = "https://q.example/v2", skip_verify = true }]"#,
        )
        .expect("parse");
        let bases = |d: &str| c.endpoints(d).into_iter().map(|e| e.base).collect::<Vec<_>>();
        assert_eq!(bases("docker.io"), ["https://m1.example", "http://10.0.0.5:5000", DOCKER_HUB_ENDPOINT]);
        assert_eq!(bases("quay.io"), ["https://q.example"]);
        assert!(c.endpoints("quay.io")[0].skip_verify);
        assert_eq!(bases("reg.lan:5000"), ["http://reg.lan:5000"]);
        assert_eq!(bases("127.0.0.1:5000"), ["http://127.0.0.1:5000"]);
        assert_eq!(bases("ghcr.io"), ["https://ghcr.io"]);
        assert!(toml::from_str::<RegistryConfig>("mirrorz = 1").is_err());
    }

    #[test]
    fn loopback_hosts() {
        for h in ["localhost", "localhost:5000", "127.0.0.1:80", "127.1.2.3", "[::1]:5000"] {
            assert!(is_loopback(h), "{h}");
        }
        for h in ["example.com", "10.0.0.1:5000", "localhost.example"] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
