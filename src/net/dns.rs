//! resolv.conf for pods.

use std::fs;

/// Renders resolv.conf from explicit servers, search domains and options.
pub fn render_resolv_conf(servers: &[String], searches: &[String], options: &[String]) -> String {
    let mut s = String::new();
    if !searches.is_empty() {
        s.push_str(&format!("search {}\n", searches.join(" ")));
    }
    for server in servers {
        s.push_str(&format!("nameserver {server}\n"));
    }
    if !options.is_empty() {
        s.push_str(&format!("options {}\n", options.join(" ")));
    }
    s
}

/// The node's resolv.conf without loopback nameservers, which do not answer
/// from inside a pod's network namespace.
pub fn host_resolv_conf() -> String {
    let text = fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    text.lines()
        .filter(|l| {
            let mut w = l.split_whitespace();
            !(w.next() == Some("nameserver") && w.next().is_some_and(|ip| ip.starts_with("127.") || ip == "::1"))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}
