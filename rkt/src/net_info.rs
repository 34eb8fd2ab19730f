//! rkt's `net-info.json` in the pod dir: one entry per network the pod joined
//! (rkt's `networking/netinfo`), read by `rkt list/status` as `networks`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One network of a pod. IPs are written as Go's `net.IP` marshals them: a
/// string, empty when unset; `mask` is the netmask written as an address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetInfo {
    /// The network's name.
    #[serde(rename = "netName")]
    pub net_name: String,
    /// Path of the network's config file.
    #[serde(rename = "netConf")]
    pub net_conf: String,
    /// Path of the network's first plugin.
    #[serde(rename = "pluginPath")]
    pub plugin_path: String,
    /// The pod's interface on the network (`eth0`).
    #[serde(rename = "ifName")]
    pub if_name: String,
    /// The pod's address on the network.
    #[serde(with = "go_ip", default)]
    pub ip: Option<IpAddr>,
    /// The CNI_ARGS the plugins were given.
    #[serde(default)]
    pub args: String,
    /// The network's netmask.
    #[serde(with = "go_ip", default)]
    pub mask: Option<IpAddr>,
}

impl NetInfo {
    /// The prefix length of `mask` (a contiguous netmask).
    #[cfg(test)]
    pub(crate) fn prefix_len(&self) -> Option<u8> {
        match self.mask? {
            IpAddr::V4(m) => Some(m.to_bits().count_ones() as u8),
            IpAddr::V6(m) => Some(m.to_bits().count_ones() as u8),
        }
    }
}

/// The netmask of a `prefix`-bit network as an address of `addr`'s family
/// (how `mask` is written).
pub fn prefix_to_mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(_) => {
            IpAddr::V4(Ipv4Addr::from_bits(u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0)))
        }
        IpAddr::V6(_) => {
            IpAddr::V6(Ipv6Addr::from_bits(u128::MAX.checked_shl(128 - u32::from(prefix.min(128))).unwrap_or(0)))
        }
    }
}

/// Serializes `net-info.json` (a JSON array, as rkt writes it).
pub fn to_json(infos: &[NetInfo]) -> Vec<u8> {
    serde_json::to_vec(infos).unwrap_or_else(|_| b"[]".to_vec())
}

/// Parses `net-info.json`.
pub fn from_json(bytes: &[u8]) -> Result<Vec<NetInfo>, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// Go's `net.IP` JSON form: a string, `""` for nil; `null` is read as unset too.
mod go_ip {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(ip: &Option<IpAddr>, s: S) -> Result<S::Ok, S::Error> {
        match ip {
            Some(ip) => s.collect_str(ip),
            None => s.serialize_str(""),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(s) if s.is_empty() => Ok(None),
            Some(s) => s.parse().map(Some).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_rkt_format() {
        // As rkt 1.30 wrote it for the default ptp network.
        let rkt = br#"[{"netName":"default","netConf":"net/99-default.conf","pluginPath":"stage1/rootfs/usr/lib/rkt/plugins/net/ptp","ifName":"eth0","ip":"172.16.28.7","args":"","mask":"255.255.255.0"}]"#;
        let infos = from_json(rkt).expect("parse");
        assert_eq!(infos.len(), 1);
        assert_eq!(infos[0].ip, Some("172.16.28.7".parse().expect("ip")));
        assert_eq!(infos[0].prefix_len(), Some(24));
        assert_eq!(to_json(&infos), rkt.to_vec());
        let empty = from_json(br#"[{"netName":"n","netConf":"","pluginPath":"","ifName":"eth0","ip":null,"mask":""}]"#)
            .expect("nulls");
        assert_eq!((empty[0].ip, empty[0].mask), (None, None));
        assert!(String::from_utf8_lossy(&to_json(&empty)).contains(r#""ip":"","args":"","mask":"""#));
    }

    #[test]
    fn masks_of_prefixes() {
        assert_eq!(
            prefix_to_mask("fd00::1".parse().expect("v6"), 64),
            "ffff:ffff:ffff:ffff::".parse::<IpAddr>().expect("m")
        );
        assert_eq!(prefix_to_mask("10.0.0.1".parse().expect("v4"), 0), "0.0.0.0".parse::<IpAddr>().expect("m"));
        assert_eq!(prefix_to_mask("10.0.0.1".parse().expect("v4"), 24), "255.255.255.0".parse::<IpAddr>().expect("m"));
    }
}
