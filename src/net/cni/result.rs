//! The CNI result of an ADD, typed: the pod's addresses for PodSandboxStatus,
//! plus the raw JSON that is cached and passed back as `prevResult`.

use serde::Deserialize;
use serde_json::Value;
use std::net::IpAddr;

/// A parsed CNI result (0.3.x, 0.4.0, 1.0.0; the 0.1/0.2 `ip4`/`ip6` form too).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CniResult {
    pub cni_version: String,
    pub interfaces: Vec<ResultInterface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
    /// The result as the last plugin printed it.
    pub raw: Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct ResultInterface {
    pub name: String,
    #[serde(default)]
    pub mac: String,
    /// The netns path for interfaces inside the pod; empty for host-side ones.
    #[serde(default)]
    pub sandbox: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IpConfig {
    pub address: IpAddr,
    pub prefix_len: u8,
    pub gateway: Option<IpAddr>,
    /// Index into [`CniResult::interfaces`].
    pub interface: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct Route {
    pub dst: String,
    #[serde(default)]
    pub gw: Option<IpAddr>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct Dns {
    #[serde(default)]
    pub nameservers: Vec<String>,
    #[serde(default)]
    pub domain: Option<String>,
    #[serde(default)]
    pub search: Vec<String>,
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Deserialize)]
struct RawIp {
    address: String,
    #[serde(default)]
    gateway: Option<IpAddr>,
    #[serde(default)]
    interface: Option<usize>,
}

#[derive(Deserialize)]
struct RawLegacyIp {
    ip: String,
    #[serde(default)]
    gateway: Option<IpAddr>,
    #[serde(default)]
    routes: Vec<Route>,
}

#[derive(Deserialize)]
struct RawResult {
    #[serde(rename = "cniVersion", default)]
    cni_version: String,
    #[serde(default)]
    interfaces: Vec<ResultInterface>,
    #[serde(default)]
    ips: Vec<RawIp>,
    #[serde(default)]
    routes: Vec<Route>,
    #[serde(default)]
    dns: Dns,
    #[serde(default)]
    ip4: Option<RawLegacyIp>,
    #[serde(default)]
    ip6: Option<RawLegacyIp>,
}

/// `10.88.0.5/16` -> address and prefix length.
fn parse_cidr(s: &str) -> Result<(IpAddr, u8), String> {
    let (addr, prefix) = s.split_once('/').ok_or_else(|| format!("address {s:?} has no prefix length"))?;
    let address: IpAddr = addr.parse().map_err(|_| format!("bad address {s:?}"))?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    match prefix.parse::<u8>() {
        Ok(p) if p <= max => Ok((address, p)),
        _ => Err(format!("bad prefix length in {s:?}")),
    }
}

impl CniResult {
    /// Parses a plugin's result JSON; the error text says what is wrong.
    pub(crate) fn parse(raw: Value) -> Result<CniResult, String> {
        let r: RawResult = serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
        let mut ips = Vec::new();
        for ip in r.ips {
            let (address, prefix_len) = parse_cidr(&ip.address)?;
            ips.push(IpConfig { address, prefix_len, gateway: ip.gateway, interface: ip.interface });
        }
        let mut routes = r.routes;
        for legacy in [r.ip4, r.ip6].into_iter().flatten() {
            let (address, prefix_len) = parse_cidr(&legacy.ip)?;
            ips.push(IpConfig { address, prefix_len, gateway: legacy.gateway, interface: None });
            routes.extend(legacy.routes);
        }
        Ok(CniResult { cni_version: r.cni_version, interfaces: r.interfaces, ips, routes, dns: r.dns, raw })
    }

    /// The pod's addresses, IPv4 first: those on interfaces inside the pod's
    /// netns, or every address when the result does not say where they are.
    pub(crate) fn pod_ips(&self) -> Vec<IpAddr> {
        let in_pod = |ip: &&IpConfig| {
            ip.interface.and_then(|i| self.interfaces.get(i)).map(|i| !i.sandbox.is_empty()).unwrap_or(false)
        };
        let mut chosen: Vec<&IpConfig> = self.ips.iter().filter(in_pod).collect();
        if chosen.is_empty() {
            chosen = self.ips.iter().collect();
        }
        let mut out: Vec<IpAddr> = chosen.iter().map(|i| i.address).collect();
        out.sort_by_key(|a| a.is_ipv6());
        out.dedup();
        out
    }

    /// The primary pod IP (PodSandboxStatus `network.ip`).
    pub(crate) fn pod_ip(&self) -> Option<IpAddr> {
        self.pod_ips().into_iter().next()
    }

    /// The [`IpConfig`] of the primary pod IP.
    pub(crate) fn pod_ip_config(&self) -> Option<&IpConfig> {
        let ip = self.pod_ip()?;
        self.ips.iter().find(|c| c.address == ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_bridge_result_and_picks_the_pod_ip() {
        let raw = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "rktlet0", "mac": "aa:bb:cc:dd:ee:01"},
                {"name": "veth1234", "mac": "aa:bb:cc:dd:ee:02"},
                {"name": "eth0", "mac": "aa:bb:cc:dd:ee:03", "sandbox": "/var/run/netns/cni-1"}
            ],
            "ips": [
                {"address": "fd00:88::5/64", "gateway": "fd00:88::1", "interface": 2},
                {"address": "10.88.0.5/16", "gateway": "10.88.0.1", "interface": 2}
            ],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.88.0.1"]}
        });
        let r = CniResult::parse(raw.clone()).expect("parse");
        assert_eq!(r.pod_ip(), Some("10.88.0.5".parse().expect("ip")));
        assert_eq!(r.pod_ips().len(), 2);
        let c = r.pod_ip_config().expect("config");
        assert_eq!((c.prefix_len, c.gateway), (16, Some("10.88.0.1".parse().expect("gw"))));
        assert_eq!(r.routes, [Route { dst: "0.0.0.0/0".into(), gw: None }]);
        assert_eq!(r.dns.nameservers, ["10.88.0.1"]);
        assert_eq!(r.raw, raw);
    }

    #[test]
    fn legacy_and_bad_results() {
        let r =
            CniResult::parse(json!({"cniVersion": "0.2.0", "ip4": {"ip": "172.16.28.3/24", "gateway": "172.16.28.1",
            "routes": [{"dst": "0.0.0.0/0"}]}}))
            .expect("legacy");
        assert_eq!(r.pod_ip(), Some("172.16.28.3".parse().expect("ip")));
        assert_eq!(r.routes.len(), 1);
        let empty = CniResult::parse(json!({"cniVersion": "1.0.0"})).expect("empty");
        assert_eq!(empty.pod_ip(), None);
        let err = CniResult::parse(json!({"ips": [{"address": "10.0.0.1"}]})).expect_err("no prefix");
        assert!(err.contains("no prefix length"), "{err}");
        assert!(CniResult::parse(json!({"ips": [{"address": "10.0.0.1/33"}]})).is_err());
        assert!(CniResult::parse(json!({"ips": "x"})).is_err());
    }
}
