//! appc image discovery: from an image name and labels to the URLs of its
//! ACI and signature. `https://<name>?ac-discovery=1` is fetched, then the
//! same for each parent path up to the host, until a page has an
//! `<meta name="ac-discovery" content="PREFIX TEMPLATE">` whose prefix the
//! name starts with and whose template fills completely: `{name}`, `{ext}`
//! (`aci`, then `aci.asc` for the signature) and every other `{label}` from
//! the labels asked for (`version` defaults to `latest`, `os` and `arch` to
//! the host's). Plain http is used only for loopback hosts or when allowed.

use std::collections::BTreeMap;

/// Where an image can be fetched from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub aci: String,
    pub asc: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{name}: invalid image name (appc names are lower-case [a-z0-9] words joined by -._~/)")]
    InvalidName { name: String },
    #[error("label {label}={value:?}: discovery label values are letters, digits and .-_~+")]
    InvalidLabel { label: String, value: String },
    #[error("discovery found no ACI for {name} ({labels}); tried {tried}")]
    NotFound { name: String, labels: String, tried: String },
}

pub(crate) use rkt::schema::is_ac_identifier;

/// The labels discovery fills templates with: those asked, plus `version`,
/// `os` and `arch` defaults.
pub(crate) fn with_defaults(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut all = labels.clone();
    all.entry("version".into()).or_insert_with(|| "latest".into());
    all.entry("os".into()).or_insert_with(|| "linux".into());
    all.entry("arch".into()).or_insert_with(host_arch);
    all
}

/// The host's architecture as appc names it (`amd64`, `aarch64`, ...).
pub fn host_arch() -> String {
    let p = super::oci::host_platform();
    super::convert::appc_arch(&p.architecture().to_string(), p.variant().as_deref())
}

/// `content` attributes of `<meta name="ac-discovery" ...>` tags in a page.
pub fn meta_tags(html: &str, meta_name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lower = html.to_ascii_lowercase();
    let mut at = 0;
    while let Some(start) = lower[at..].find("<meta") {
        let start = at + start;
        let end = lower[start..].find('>').map_or(lower.len(), |e| start + e);
        let tag = &html[start..end];
        if attribute(tag, "name").is_some_and(|n| n == meta_name)
            && let Some(content) = attribute(tag, "content")
        {
            out.push(content);
        }
        at = end;
    }
    out
}

/// The value of attribute `name` in a tag (quoted with " or ').
fn attribute(tag: &str, name: &str) -> Option<String> {
    let lower = tag.to_ascii_lowercase();
    let mut at = 0;
    while let Some(i) = lower[at..].find(name) {
        let i = at + i;
        at = i + name.len();
        let before_ok = i == 0 || lower.as_bytes()[i - 1].is_ascii_whitespace();
        let rest = tag[at..].trim_start();
        if !before_ok || !rest.starts_with('=') {
            continue;
        }
        let rest = rest[1..].trim_start();
        let quote = rest.chars().next()?;
        if quote == '"' || quote == '\'' {
            let body = &rest[1..];
            return body.find(quote).map(|e| body[..e].to_string());
        }
        return Some(rest.split_whitespace().next().unwrap_or("").trim_end_matches('/').to_string());
    }
    None
}

/// Fills `{name}`, `{ext}` and `{label}` in a template; None if any remain.
pub(crate) fn fill(template: &str, name: &str, ext: &str, labels: &BTreeMap<String, String>) -> Option<String> {
    let mut out = template.replace("{name}", name).replace("{ext}", ext);
    for (k, v) in labels {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    (!out.contains('{') && !out.contains('}')).then_some(out)
}

/// The ACI endpoints a discovery page offers for `name`.
pub fn endpoints_in(html: &str, name: &str, labels: &BTreeMap<String, String>) -> Vec<Endpoint> {
    meta_tags(html, "ac-discovery")
        .iter()
        .filter_map(|content| {
            let mut parts = content.split_whitespace();
            let (prefix, template) = (parts.next()?, parts.next()?);
            if !name.starts_with(prefix) {
                return None;
            }
            Some(Endpoint { aci: fill(template, name, "aci", labels)?, asc: fill(template, name, "aci.asc", labels)? })
        })
        .collect()
}

/// The discovery URLs for `name`: itself, then each parent path.
pub(crate) fn pages(name: &str, http: bool) -> Vec<String> {
    let scheme = if http { "http" } else { "https" };
    let mut out = Vec::new();
    let mut n = name;
    loop {
        out.push(format!("{scheme}://{n}?ac-discovery=1"));
        match n.rsplit_once('/') {
            Some((parent, _)) => n = parent,
            None => break,
        }
    }
    out
}

/// Runs discovery for `name` with `labels` (defaults added); `get` fetches a
/// page and returns its body.
pub(crate) async fn discover<F, Fut>(
    name: &str,
    labels: &BTreeMap<String, String>,
    allow_http: bool,
    get: F,
) -> Result<Endpoint, DiscoveryError>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<String, String>>,
{
    if !is_ac_identifier(name) {
        return Err(DiscoveryError::InvalidName { name: name.to_string() });
    }
    // values go into URLs: nothing that could change a URL's path, query or host
    for (k, v) in labels {
        let ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._~+-".contains(&b));
        if !ok(k) || !ok(v) || v.contains("..") {
            return Err(DiscoveryError::InvalidLabel { label: k.clone(), value: v.clone() });
        }
    }
    let labels = with_defaults(labels);
    let host = name.split('/').next().unwrap_or(name);
    let http = allow_http || super::hosts::is_loopback(host);
    let mut tried = Vec::new();
    for url in pages(name, http) {
        match get(url.clone()).await {
            Ok(body) => {
                if let Some(e) = endpoints_in(&body, name, &labels).into_iter().next() {
                    return Ok(e);
                }
                tried.push(format!("{url} (no matching ac-discovery template)"));
            }
            Err(e) => tried.push(e),
        }
    }
    Err(DiscoveryError::NotFound {
        name: name.to_string(),
        labels: labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","),
        tried: tried.join("; "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn templates_fill_from_meta_tags() {
        let html = r#"<html><head>
            <meta name="ac-discovery" content="example.com https://example.com/{name}-{version}-{os}-{arch}.{ext}">
            <META content='example.com/other https://o.example/{name}.{ext}' name='ac-discovery' />
            <meta name="ac-discovery" content="example.com https://x.example/{name}-{channel}.{ext}">
            <meta name="ac-discovery-pubkeys" content="example.com https://example.com/pubkeys.gpg">
        </head></html>"#;
        let l = with_defaults(&labels(&[("version", "1.0")]));
        let e = endpoints_in(html, "example.com/app", &l);
        let arch = &l["arch"];
        assert_eq!(
            e,
            [Endpoint {
                aci: format!("https://example.com/example.com/app-1.0-linux-{arch}.aci"),
                asc: format!("https://example.com/example.com/app-1.0-linux-{arch}.aci.asc"),
            }]
        );
        assert_eq!(endpoints_in(html, "example.com/other", &l).len(), 2);
        assert_eq!(meta_tags(html, "ac-discovery-pubkeys"), ["example.com https://example.com/pubkeys.gpg"]);
        let bad = labels(&[("version", "1.0/../../x")]);
        let err = futures::executor::block_on(discover("example.com/app", &bad, false, |_| async {
            Err::<String, _>("no".to_string())
        }));
        assert!(matches!(err, Err(DiscoveryError::InvalidLabel { .. })));
        assert_eq!(
            pages("example.com/a/b", false),
            [
                "https://example.com/a/b?ac-discovery=1",
                "https://example.com/a?ac-discovery=1",
                "https://example.com?ac-discovery=1"
            ]
        );
    }
}
