//! The distribution v2 client: one pooled HTTP client per store, one
//! [`Session`] per pull (a repository on a registry, its endpoints in order,
//! its credentials and the authorization it obtained).

use super::auth::{Challenge, Credentials, parse_challenge};
use super::hosts::{Endpoint, RegistryConfig};
use super::oci;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use rkt::digest::{Digest, Hasher};
use rkt::reference::Reference;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{registry}: authentication required or credentials rejected: {message}")]
    Unauthorized { registry: String, message: String },
    #[error("{registry}: access denied to {repo}")]
    Denied { registry: String, repo: String },
    #[error("{what} not found on {registry}")]
    NotFound { registry: String, what: String },
    #[error("{url}: {}", with_causes(source))]
    Http { url: String, source: reqwest::Error },
    #[error("{url}: unexpected HTTP status {status}")]
    Status { url: String, status: StatusCode },
    #[error("{0}")]
    Invalid(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(reqwest::Error),
}

/// An error with its causes (reqwest's own message, "error sending request",
/// leaves out what went wrong: refused, not resolved, TLS), each once.
pub(crate) fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// The shared HTTP clients (connection pools) and the registry host config.
#[derive(Debug)]
pub(crate) struct RegistryClient {
    verified: reqwest::Client,
    unverified: reqwest::Client,
    pub config: RegistryConfig,
}

impl RegistryClient {
    pub(crate) fn new(config: RegistryConfig) -> Result<Self, RegistryError> {
        let stall = config.stall_timeout();
        let build = |skip_verify: bool| {
            reqwest::Client::builder()
                .user_agent(concat!("rktlet/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(Duration::from_secs(30))
                // per read: a registry that stops sending fails the pull, a slow one does not
                .read_timeout(stall)
                .pool_idle_timeout(Duration::from_secs(90))
                .danger_accept_invalid_certs(skip_verify)
                .build()
                .map_err(RegistryError::Client)
        };
        Ok(RegistryClient { verified: build(false)?, unverified: build(true)?, config })
    }

    /// A session for `reference`'s repository with optional credentials.
    pub(crate) fn session(&self, reference: &Reference, creds: Credentials) -> Session<'_> {
        let endpoints = self.config.endpoints(&reference.domain);
        let preset = (!creds.registry_token.is_empty()).then(|| format!("Bearer {}", creds.registry_token));
        Session {
            client: self,
            registry: reference.domain.clone(),
            repo: reference.path.clone(),
            auth: Mutex::new(vec![preset; endpoints.len()]),
            endpoints,
            creds,
        }
    }
}

/// Requests to one repository, trying each endpoint in order.
pub(crate) struct Session<'a> {
    client: &'a RegistryClient,
    registry: String,
    repo: String,
    endpoints: Vec<Endpoint>,
    creds: Credentials,
    /// The `Authorization` value obtained per endpoint.
    auth: Mutex<Vec<Option<String>>>,
}

#[derive(serde::Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: String,
    #[serde(default)]
    access_token: String,
}

impl Session<'_> {
    fn http(&self, ep: &Endpoint) -> &reqwest::Client {
        if ep.skip_verify { &self.client.unverified } else { &self.client.verified }
    }

    fn cached_auth(&self, i: usize) -> Option<String> {
        self.auth.lock().ok().and_then(|a| a.get(i).cloned().flatten())
    }

    fn unauthorized(&self, message: impl Into<String>) -> RegistryError {
        RegistryError::Unauthorized { registry: self.registry.clone(), message: message.into() }
    }

    /// GET `/v2/<repo>/<path>`: mirrors first; a mirror's failure falls through to the next endpoint.
    async fn get(&self, path: &str, accept: Option<&str>, what: &str) -> Result<reqwest::Response, RegistryError> {
        let mut last = None;
        for (i, ep) in self.endpoints.iter().enumerate() {
            let url = format!("{}/v2/{}/{}", ep.base, self.repo, path);
            match self.get_from(i, ep, &url, accept, what).await {
                Ok(r) => return Ok(r),
                Err(e) if ep.mirror => {
                    tracing::warn!(mirror = %ep.base, error = %e, "registry mirror failed, trying the next endpoint");
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| RegistryError::Invalid(format!("no endpoint for {}", self.registry))))
    }

    async fn get_from(
        &self,
        i: usize,
        ep: &Endpoint,
        url: &str,
        accept: Option<&str>,
        what: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        let http_err = |source| RegistryError::Http { url: url.to_string(), source };
        let mut retried = false;
        loop {
            let mut req = self.http(ep).get(url);
            if let Some(a) = accept {
                req = req.header(ACCEPT, a);
            }
            if let Some(h) = self.cached_auth(i) {
                req = req.header(AUTHORIZATION, h);
            }
            let resp = req.send().await.map_err(http_err)?;
            let status = resp.status();
            if status == StatusCode::UNAUTHORIZED && !retried {
                retried = true;
                let challenge =
                    resp.headers().get(WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).and_then(parse_challenge);
                let header = self.authorize(ep, challenge).await?;
                if let Ok(mut a) = self.auth.lock() {
                    a[i] = Some(header);
                }
                continue;
            }
            return match status {
                s if s.is_success() => Ok(resp),
                StatusCode::UNAUTHORIZED => Err(self.unauthorized("the registry rejected the credentials")),
                StatusCode::FORBIDDEN => {
                    Err(RegistryError::Denied { registry: self.registry.clone(), repo: self.repo.clone() })
                }
                StatusCode::NOT_FOUND => {
                    Err(RegistryError::NotFound { registry: self.registry.clone(), what: what.to_string() })
                }
                status => Err(RegistryError::Status { url: url.to_string(), status }),
            };
        }
    }

    /// Answers a challenge: basic credentials, or a bearer token from the realm.
    async fn authorize(&self, ep: &Endpoint, challenge: Option<Challenge>) -> Result<String, RegistryError> {
        match challenge {
            None => Err(self.unauthorized("401 without a usable WWW-Authenticate challenge")),
            Some(Challenge::Basic) if self.creds.has_basic() => Ok(self.creds.basic_header()),
            Some(Challenge::Basic) => Err(self.unauthorized("the registry requires a username and password")),
            Some(Challenge::Bearer { realm, service, scope }) => {
                let scope = scope.unwrap_or_else(|| format!("repository:{}:pull", self.repo));
                let mut query = vec![("scope", scope.clone())];
                if let Some(s) = &service {
                    query.push(("service", s.clone()));
                }
                let req = if !self.creds.identity_token.is_empty() {
                    let mut form = vec![
                        ("grant_type", "refresh_token".to_string()),
                        ("refresh_token", self.creds.identity_token.clone()),
                        ("client_id", "rktlet".to_string()),
                        ("scope", scope),
                    ];
                    form.extend(service.map(|s| ("service", s)));
                    self.http(ep).post(&realm).form(&form)
                } else {
                    let req = self.http(ep).get(&realm).query(&query);
                    if self.creds.has_basic() {
                        req.basic_auth(&self.creds.username, Some(&self.creds.password))
                    } else {
                        req
                    }
                };
                let resp = req.send().await.map_err(|source| RegistryError::Http { url: realm.clone(), source })?;
                match resp.status() {
                    s if s.is_success() => {}
                    StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                        return Err(self.unauthorized(format!("token server {realm} rejected the credentials")));
                    }
                    status => return Err(RegistryError::Status { url: realm, status }),
                }
                let body = resp.bytes().await.map_err(|source| RegistryError::Http { url: realm.clone(), source })?;
                let t: TokenResponse = serde_json::from_slice(&body)
                    .map_err(|e| RegistryError::Invalid(format!("token server {realm} answered invalid JSON: {e}")))?;
                let token = if t.token.is_empty() { t.access_token } else { t.token };
                if token.is_empty() {
                    return Err(self.unauthorized(format!("token server {realm} returned no token")));
                }
                Ok(format!("Bearer {token}"))
            }
        }
    }

    /// Fetches a manifest or index by tag or digest. Returns the bytes, their
    /// media type and their sha256 digest; checked against `object` when it is a digest.
    pub(crate) async fn manifest(&self, object: &str) -> Result<(Bytes, String, Digest), RegistryError> {
        let what = format!("manifest {}:{object}", self.repo);
        let resp = self.get(&format!("manifests/{object}"), Some(oci::ACCEPT), &what).await?;
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or(v).trim().to_string())
            .unwrap_or_default();
        let body = read_limited(resp, oci::MAX_MANIFEST_BYTES, &what).await?;
        let expected: Option<Digest> = object.parse().ok();
        let algorithm = expected.as_ref().map_or(rkt::digest::Algorithm::Sha256, |d| d.algorithm);
        let mut h = Hasher::new(algorithm);
        h.update(&body);
        let actual = h.finish();
        if let Some(expected) = expected
            && expected != actual
        {
            return Err(RegistryError::Invalid(format!("{what}: digest mismatch: got {actual}")));
        }
        Ok((body, content_type, actual))
    }

    /// Fetches a small blob (an image config) whole, checking size and digest.
    pub(crate) async fn small_blob(&self, digest: &Digest, size: u64, limit: u64) -> Result<Bytes, RegistryError> {
        let what = format!("blob {digest}");
        if size > limit {
            return Err(RegistryError::Invalid(format!("{what} ({size} bytes) is larger than the {limit}-byte limit")));
        }
        let resp = self.get(&format!("blobs/{digest}"), None, &what).await?;
        let body = read_limited(resp, limit, &what).await?;
        let mut h = Hasher::new(digest.algorithm);
        h.update(&body);
        let actual = h.finish();
        if body.len() as u64 != size || &actual != digest {
            return Err(RegistryError::Invalid(format!(
                "{what}: content does not match its descriptor (got {actual}, {} bytes; expected {size} bytes)",
                body.len()
            )));
        }
        Ok(body)
    }

    /// Starts a blob download; the caller verifies what streams through.
    pub(crate) async fn blob_stream(
        &self,
        digest: &Digest,
    ) -> Result<impl Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static, RegistryError> {
        let resp = self.get(&format!("blobs/{digest}"), None, &format!("blob {digest}")).await?;
        Ok(resp.bytes_stream())
    }
}

/// Reads a whole body, failing once it exceeds `limit` bytes.
pub(crate) async fn read_limited(resp: reqwest::Response, limit: u64, what: &str) -> Result<Bytes, RegistryError> {
    if resp.content_length().is_some_and(|l| l > limit) {
        return Err(RegistryError::Invalid(format!("{what} is larger than the {limit}-byte limit")));
    }
    let url = resp.url().to_string();
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|source| RegistryError::Http { url: url.clone(), source })?;
        if body.len() as u64 + chunk.len() as u64 > limit {
            return Err(RegistryError::Invalid(format!("{what} is larger than the {limit}-byte limit")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_says_so() {
        // a port nothing listens on: bind one, learn it, close it
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let e = reqwest::get(format!("http://127.0.0.1:{port}/v2/")).await.expect_err("refused");
        let text = with_causes(&e);
        assert!(text.starts_with(&e.to_string()), "{text}");
        assert!(text.contains("Connection refused"), "the cause is kept: {text}");
    }
}
