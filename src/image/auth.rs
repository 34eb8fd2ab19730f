//! Registry credentials: where they come from (CRI `AuthConfig`, a docker
//! `config.json`) and the challenge a registry answers with (`WWW-Authenticate`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What the caller gave to authenticate with one registry.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
    /// An OAuth2 refresh token exchanged at the token realm (docker's `identitytoken`).
    pub identity_token: String,
    /// A bearer token sent to the registry as is.
    pub registry_token: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never log secrets
        f.debug_struct("Credentials").field("username", &self.username).finish_non_exhaustive()
    }
}

impl Credentials {
    pub fn basic(username: impl Into<String>, password: impl Into<String>) -> Self {
        Credentials { username: username.into(), password: password.into(), ..Default::default() }
    }

    /// From CRI's `AuthConfig` fields; `auth` is base64 `user:password` and
    /// fills the username and password when those are empty.
    pub fn from_cri(username: &str, password: &str, auth: &str, identity_token: &str, registry_token: &str) -> Self {
        let mut c = Credentials {
            username: username.to_string(),
            password: password.to_string(),
            identity_token: identity_token.to_string(),
            registry_token: registry_token.to_string(),
        };
        if c.username.is_empty()
            && let Some((u, p)) = decode_auth(auth)
        {
            c.username = u;
            c.password = p;
        }
        c
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.username.is_empty() && self.identity_token.is_empty() && self.registry_token.is_empty()
    }

    pub(crate) fn has_basic(&self) -> bool {
        !self.username.is_empty()
    }

    /// `Basic <base64 user:password>`.
    pub fn basic_header(&self) -> String {
        format!("Basic {}", B64.encode(format!("{}:{}", self.username, self.password)))
    }
}

fn decode_auth(auth: &str) -> Option<(String, String)> {
    let bytes = B64.decode(auth.trim()).ok()?;
    let s = String::from_utf8(bytes).ok()?;
    let (u, p) = s.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

/// A parsed `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    Bearer { realm: String, service: Option<String>, scope: Option<String> },
}

/// Parses `Bearer realm="...",service="...",scope="..."` or `Basic realm="..."`.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let params = parse_params(rest);
    Some(Challenge::Bearer {
        realm: params.get("realm")?.clone(),
        service: params.get("service").cloned(),
        scope: params.get("scope").cloned(),
    })
}

/// `k="v", k2=v2` (quoted values may contain commas).
fn parse_params(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=')).collect();
        if key.is_empty() || chars.next().is_none() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            value = std::iter::from_fn(|| chars.next_if(|c| *c != ',')).collect::<String>().trim().to_string();
        }
        out.insert(key.trim().to_ascii_lowercase(), value);
    }
    out
}

/// Docker's `config.json` (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`):
/// the `auths` section only. Credential helpers are not supported.
#[derive(Debug, Clone, Default)]
pub(crate) struct DockerConfig {
    auths: BTreeMap<String, Credentials>,
}

#[derive(serde::Deserialize)]
struct DockerConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
}

#[derive(serde::Deserialize, Default)]
struct DockerAuth {
    #[serde(default)]
    auth: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    identitytoken: String,
    #[serde(default)]
    registrytoken: String,
}

impl DockerConfig {
    pub(crate) fn default_path() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
            return Some(PathBuf::from(dir).join("config.json"));
        }
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
    }

    /// Reads `path`; a missing file is an empty config.
    pub(crate) fn load(path: &Path) -> Result<Self, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let file: DockerConfigFile =
            serde_json::from_str(&text).map_err(|e| format!("invalid docker config {}: {e}", path.display()))?;
        let auths = file
            .auths
            .into_iter()
            .map(|(k, a)| {
                (
                    normalize_auth_key(&k),
                    Credentials::from_cri(&a.username, &a.password, &a.auth, &a.identitytoken, &a.registrytoken),
                )
            })
            .collect();
        Ok(DockerConfig { auths })
    }

    /// Credentials for a registry domain (`docker.io` also matches docker's
    /// historical `https://index.docker.io/v1/` key).
    pub(crate) fn for_domain(&self, domain: &str) -> Option<Credentials> {
        self.auths.get(domain).cloned()
    }
}

fn normalize_auth_key(k: &str) -> String {
    let host = k.trim_start_matches("https://").trim_start_matches("http://");
    let host = host.split('/').next().unwrap_or(host);
    match host {
        "index.docker.io" | "registry-1.docker.io" => rkt::reference::DEFAULT_DOMAIN.to_string(),
        h => h.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges() {
        assert_eq!(
            parse_challenge(
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
                scope: Some("repository:a/b:pull,push".into()),
            })
        );
        assert_eq!(parse_challenge(r#"Basic realm="regx-basic""#), Some(Challenge::Basic));
        assert_eq!(
            parse_challenge("Bearer realm=http://x/token"),
            Some(Challenge::Bearer { realm: "http://x/token".into(), service: None, scope: None })
        );
        assert_eq!(parse_challenge("Negotiate"), None);
    }

    #[test]
    fn cri_auth_field_decodes() {
        let c = Credentials::from_cri("", "", &B64.encode("u:p:w"), "", "");
        assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "p:w"));
        assert!(!format!("{c:?}").contains("p:w"));
        assert!(Credentials::default().is_empty());
    }

    #[test]
    fn docker_config_json() {
        let t = tempfile::tempdir().expect("tempdir");
        let p = t.path().join("config.json");
        std::fs::write(&p, format!(r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{}"}},"localhost:5001":{{"identitytoken":"tok"}}}}}}"#, B64.encode("a:b"))).expect("write");
        let c = DockerConfig::load(&p).expect("load");
        assert_eq!(c.for_domain("docker.io").map(|c| c.username), Some("a".into()));
        assert_eq!(c.for_domain("localhost:5001").map(|c| c.identity_token), Some("tok".into()));
        assert!(DockerConfig::load(&t.path().join("none")).expect("missing ok").for_domain("x").is_none());
    }
}
