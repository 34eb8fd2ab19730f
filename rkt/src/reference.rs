//! Docker image references: parsing and normalization the way docker's
//! `ParseNormalizedNamed` does it (`busybox` is `docker.io/library/busybox:latest`).

use crate::digest::Digest;
use std::fmt;
use std::str::FromStr;

/// The registry a name without a domain lives on.
pub const DEFAULT_DOMAIN: &str = "docker.io";
/// The tag of a reference that names neither a tag nor a digest.
const DEFAULT_TAG: &str = "latest";

/// A normalized reference: domain, repository path, and a tag and/or digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `docker.io`, `registry.k8s.io`, `localhost:5000`, `[::1]:5000`.
    pub domain: String,
    /// Repository path, e.g. `library/busybox`.
    pub path: String,
    /// The tag; `latest` when the reference names neither a tag nor a digest.
    pub tag: Option<String>,
    /// The digest after `@`, if any.
    pub digest: Option<Digest>,
}

/// Why a string is not an image reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// The string is empty (or only `docker://`).
    #[error("empty image reference")]
    Empty,
    /// The string is not a valid reference.
    #[error("invalid image reference {reference:?}: {reason}")]
    Invalid {
        /// The string as given.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
}

fn invalid(reference: &str, reason: impl Into<String>) -> ReferenceError {
    ReferenceError::Invalid { reference: reference.to_string(), reason: reason.into() }
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    if b.is_empty() || !is_alnum(b[0]) || !is_alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !is_alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
            return false;
        }
    }
    true
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[\w][\w.-]{0,127}`
fn valid_tag(t: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let b = t.as_bytes();
    !b.is_empty() && b.len() <= 128 && word(b[0]) && b.iter().all(|&x| word(x) || x == b'.' || x == b'-')
}

fn valid_domain(d: &str) -> bool {
    let (host, port) = if let Some(rest) = d.strip_prefix('[') {
        match rest.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => return false,
        }
    } else {
        match d.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (d, None),
        }
    };
    let host_ok = !host.is_empty()
        && host.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b':')
        });
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok
}

impl FromStr for Reference {
    type Err = ReferenceError;

    fn from_str(input: &str) -> Result<Self, ReferenceError> {
        // only `docker://`: a bare `docker:` prefix is also a registry host named
        // docker with a port (`docker:5000/x`), so it cannot be told apart (fuzzing found it)
        let s = input.strip_prefix("docker://").unwrap_or(input);
        if s.is_empty() {
            return Err(ReferenceError::Empty);
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => (r, Some(d.parse::<Digest>().map_err(|e| invalid(input, e.to_string()))?)),
            None => (s, None),
        };
        // a tag is after the last ':' that follows the last '/'
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(c) = s.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid(input, format!("{c:?} is not allowed in an image reference")));
        }
        if tag == Some("") {
            return Err(invalid(input, "a ':' with no tag after it"));
        }
        if let Some(t) = tag
            && !valid_tag(t)
        {
            return Err(invalid(
                input,
                format!(
                    "invalid tag {t:?} (letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-')"
                ),
            ));
        }
        if name.is_empty() {
            return Err(invalid(input, "missing repository name"));
        }
        let (domain, path) = match name.split_once('/') {
            Some((first, remainder))
                if first.contains('.') || first.contains(':') || first == "localhost" || first.starts_with('[') =>
            {
                (first.to_string(), remainder.to_string())
            }
            _ => (DEFAULT_DOMAIN.to_string(), name.to_string()),
        };
        let domain = if domain == "index.docker.io" { DEFAULT_DOMAIN.to_string() } else { domain };
        if !valid_domain(&domain) {
            return Err(invalid(input, format!("invalid registry host {domain:?}")));
        }
        if path.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(invalid(input, "repository name must be lowercase"));
        }
        if path.split('/').any(str::is_empty) {
            return Err(invalid(input, "an empty repository path component ('//', or '/' at an end)"));
        }
        if let Some(bad) = path.split('/').find(|c| !valid_component(c)) {
            return Err(invalid(input, format!("invalid repository path component {bad:?}")));
        }
        let path = if domain == DEFAULT_DOMAIN && !path.contains('/') { format!("library/{path}") } else { path };
        if domain.len() + 1 + path.len() > 255 {
            return Err(invalid(input, "repository name longer than 255 characters"));
        }
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_string()),
            (None, Some(_)) => None,
            (None, None) => Some(DEFAULT_TAG.to_string()),
        };
        Ok(Reference { domain, path, tag, digest })
    }
}

impl Reference {
    /// `domain/path`, e.g. `docker.io/library/busybox`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// What to ask the registry for: the digest if there is one, else the tag.
    pub fn object(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => DEFAULT_TAG.to_string(),
        }
    }

    /// `name:tag` when there is a tag.
    #[cfg(test)]
    pub(crate) fn tagged(&self) -> Option<String> {
        self.tag.as_ref().map(|t| format!("{}:{t}", self.name()))
    }

    /// `name@digest` for a given manifest digest.
    pub fn with_digest(&self, digest: &Digest) -> String {
        format!("{}@{digest}", self.name())
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> String {
        s.parse::<Reference>().map(|r| r.to_string()).unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn normalizes_like_docker() {
        let d = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(norm("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(norm("docker://busybox:1.36"), "docker.io/library/busybox:1.36");
        assert_eq!(norm("library/busybox"), "docker.io/library/busybox:latest");
        assert_eq!(norm("index.docker.io/foo/bar"), "docker.io/foo/bar:latest");
        assert_eq!(norm("localhost:5000/x"), "localhost:5000/x:latest");
        assert_eq!(norm("localhost/x:v1"), "localhost/x:v1");
        assert_eq!(norm("127.0.0.1:5000/a/b/c:t"), "127.0.0.1:5000/a/b/c:t");
        assert_eq!(norm("registry.k8s.io/pause:3.10"), "registry.k8s.io/pause:3.10");
        assert_eq!(norm("[::1]:5000/x"), "[::1]:5000/x:latest");
        assert_eq!(norm(&format!("busybox@{d}")), format!("docker.io/library/busybox@{d}"));
        assert_eq!(norm(&format!("busybox:1@{d}")), format!("docker.io/library/busybox:1@{d}"));
        assert_eq!(norm("my_repo/a__b/c-d/e.f"), "docker.io/my_repo/a__b/c-d/e.f:latest");
        // a registry host named docker, with a port (found by fuzzing: it once read as a scheme)
        assert_eq!(norm("docker:5/5"), "docker:5/5:latest");
        for s in ["docker:5/5", "docker://docker:5/5", "busybox"] {
            let r: Reference = s.parse().expect(s);
            assert_eq!(r.to_string().parse::<Reference>().as_ref(), Ok(&r), "{s} prints back to itself");
        }
    }

    #[test]
    fn invalid_references_are_clear() {
        assert_eq!("".parse::<Reference>(), Err(ReferenceError::Empty));
        for bad in
            ["Busybox", "busybox:", "busybox:-x", "a//b", "busybox@sha256:12", "-a", "a_", "host:port:x/y", ":tag"]
        {
            let e = bad.parse::<Reference>().expect_err(bad).to_string();
            assert!(e.contains("invalid image reference"), "{bad}: {e}");
        }
        assert!("Busybox".parse::<Reference>().expect_err("upper").to_string().contains("lowercase"));
        // each says what is wrong
        let why = |s: &str| s.parse::<Reference>().expect_err(s).to_string();
        assert!(why("Bad Image//ref::").contains("' ' is not allowed"), "{}", why("Bad Image//ref::"));
        assert!(why("busybox:").contains("no tag after it"), "{}", why("busybox:"));
        assert!(why("a//b").contains("empty repository path component"), "{}", why("a//b"));
    }

    #[test]
    fn parts() {
        let r: Reference = "localhost:5000/x".parse().expect("parse");
        assert_eq!(r.name(), "localhost:5000/x");
        assert_eq!(r.object(), "latest");
        assert_eq!(r.tagged().as_deref(), Some("localhost:5000/x:latest"));
    }
}
