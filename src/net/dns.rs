//! The pod's name files, rendered as text: `/etc/resolv.conf` from the CRI
//! `DNSConfig`, `/etc/hosts` and `/etc/hostname`. Writing them into the
//! stage1 rootfs is the caller's job.

use crate::proto::v1;
use std::fmt::Write as _;
use std::net::IpAddr;

/// The host's resolver config, the fallback when the CRI gives no DNS config.
pub(crate) const HOST_RESOLV_CONF: &str = "/etc/resolv.conf";

/// The CRI `DNSConfig`; also the portmap-style `dns` capability of CNI plugins.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct DnsConfig {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl DnsConfig {
    pub(crate) fn is_empty(&self) -> bool {
        self.servers.is_empty() && self.searches.is_empty() && self.options.is_empty()
    }
}

impl From<&v1::DnsConfig> for DnsConfig {
    fn from(d: &v1::DnsConfig) -> Self {
        DnsConfig { servers: d.servers.clone(), searches: d.searches.clone(), options: d.options.clone() }
    }
}

/// `resolv.conf` for the pod: `dns` when it says anything, else the host's
/// file (`host_resolv`) without loopback nameservers (a host-local resolver
/// such as systemd-resolved's 127.0.0.53 is unreachable from the pod's netns).
pub(crate) fn resolv_conf(dns: Option<&DnsConfig>, host_resolv: &str) -> String {
    let mut out = String::new();
    match dns.filter(|d| !d.is_empty()) {
        Some(d) => {
            if !d.searches.is_empty() {
                let _ = writeln!(out, "search {}", d.searches.join(" "));
            }
            for s in &d.servers {
                let _ = writeln!(out, "nameserver {s}");
            }
            if !d.options.is_empty() {
                let _ = writeln!(out, "options {}", d.options.join(" "));
            }
        }
        None => {
            for line in host_resolv.lines() {
                if !is_loopback_nameserver(line) {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
    }
    out
}

fn is_loopback_nameserver(line: &str) -> bool {
    let mut words = line.split_whitespace();
    if words.next() != Some("nameserver") {
        return false;
    }
    // `::1%lo`-style scoped addresses parse after the zone is cut off.
    let addr = words.next().unwrap_or("").split('%').next().unwrap_or("");
    addr.parse::<IpAddr>().map(|a| a.is_loopback()).unwrap_or(false)
}

/// `/etc/hosts`: the localhost lines, then `hostname` on each pod IP (or on
/// 127.0.0.1 when the pod has none, as rkt does).
pub(crate) fn hosts(hostname: &str, pod_ips: &[IpAddr]) -> String {
    let mut out = String::from(
        "127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    if hostname.is_empty() {
        return out;
    }
    if pod_ips.is_empty() {
        let _ = writeln!(out, "127.0.0.1\t{hostname}");
    }
    for ip in pod_ips {
        let _ = writeln!(out, "{ip}\t{hostname}");
    }
    out
}

/// `/etc/hostname`.
#[cfg(test)]
pub(crate) fn hostname(hostname: &str) -> String {
    format!("{hostname}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const HOST: &str = "# generated\nnameserver 127.0.0.53\nnameserver 10.0.0.2\nnameserver ::1\n\
search corp.example\noptions edns0 trust-ad\n";

    #[test]
    fn cri_dns_config_wins() {
        let cri = v1::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["default.svc.cluster.local".into(), "svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            resolv_conf(Some(&DnsConfig::from(&cri)), HOST),
            "search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
        );
        let only_servers = DnsConfig { servers: vec!["1.1.1.1".into(), "fd00::1".into()], ..Default::default() };
        assert_eq!(resolv_conf(Some(&only_servers), HOST), "nameserver 1.1.1.1\nnameserver fd00::1\n");
    }

    #[test]
    fn falls_back_to_host_without_loopback_servers() {
        let expect = "# generated\nnameserver 10.0.0.2\nsearch corp.example\noptions edns0 trust-ad\n";
        assert_eq!(resolv_conf(None, HOST), expect);
        assert_eq!(resolv_conf(Some(&DnsConfig::default()), HOST), expect);
        assert_eq!(resolv_conf(None, "nameserver 127.0.1.1\nnameserver fe80::1%eth0\n"), "nameserver fe80::1%eth0\n");
        assert_eq!(resolv_conf(None, ""), "");
        let explicit =
            DnsConfig { servers: vec!["10.0.0.1".into()], searches: vec![], options: vec!["ndots:2".into()] };
        assert_eq!(resolv_conf(Some(&explicit), HOST), "nameserver 10.0.0.1\noptions ndots:2\n");
        let host = fs::read_to_string(HOST_RESOLV_CONF).unwrap_or_default();
        assert!(!resolv_conf(None, &host).lines().any(is_loopback_nameserver));
    }

    #[test]
    fn hosts_and_hostname() {
        let h = hosts("web-0", &["10.88.0.5".parse().expect("ip")]);
        assert!(h.starts_with("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"), "{h}");
        assert!(h.ends_with("fe00::2\tip6-allrouters\n10.88.0.5\tweb-0\n"), "{h}");
        assert!(hosts("web-0", &[]).ends_with("\n127.0.0.1\tweb-0\n"));
        assert!(hosts("", &[]).ends_with("ip6-allrouters\n"));
        assert_eq!(hostname("web-0"), "web-0\n");
    }
}
