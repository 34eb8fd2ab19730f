//! Single-use, expiring tokens for streaming URLs: Exec, Attach and
//! PortForward answer with `http://<streaming address>/<kind>/<token>`, and
//! the first connection to it takes the request out of this cache.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a URL can be used (kubelet connects at once; containerd uses 1 minute).
pub(crate) const TOKEN_TTL: Duration = Duration::from_secs(60);
/// Pending requests kept at most; beyond that the oldest go.
const MAX_PENDING: usize = 4096;

/// What a streaming URL was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamRequest {
    Exec { container_id: String, cmd: Vec<String>, tty: bool, stdin: bool, stdout: bool, stderr: bool },
    Attach { container_id: String, tty: bool, stdin: bool, stdout: bool, stderr: bool },
    PortForward { pod_id: String, ports: Vec<u16> },
}

impl StreamRequest {
    /// The URL path segment of its kind.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            StreamRequest::Exec { .. } => "exec",
            StreamRequest::Attach { .. } => "attach",
            StreamRequest::PortForward { .. } => "portforward",
        }
    }
}

/// The pending requests by token.
#[derive(Debug, Default)]
pub struct Tokens {
    pending: Mutex<HashMap<String, (Instant, StreamRequest)>>,
}

impl Tokens {
    /// Stores `req` under a new random token (URL-safe, 128 bits).
    pub(crate) fn insert(&self, req: StreamRequest) -> String {
        use base64::Engine;
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes());
        if let Ok(mut map) = self.pending.lock() {
            let now = Instant::now();
            map.retain(|_, (at, _)| now.duration_since(*at) < TOKEN_TTL);
            if map.len() >= MAX_PENDING
                && let Some(oldest) = map.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
            map.insert(token.clone(), (now, req));
        }
        token
    }

    /// Takes the request of `token` if it exists, has not expired and is of `kind`.
    pub(crate) fn take(&self, token: &str, kind: &str) -> Option<StreamRequest> {
        let mut map = self.pending.lock().ok()?;
        let (at, req) = map.remove(token)?;
        (at.elapsed() < TOKEN_TTL && req.kind() == kind).then_some(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pf() -> StreamRequest {
        StreamRequest::PortForward { pod_id: "p".into(), ports: vec![80] }
    }

    #[test]
    fn a_token_works_once_and_only_for_its_kind() {
        let t = Tokens::default();
        let a = t.insert(pf());
        let b = t.insert(pf());
        assert_ne!(a, b);
        assert!(a.len() >= 22 && a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{a}");
        assert_eq!(t.take(&a, "portforward"), Some(pf()));
        assert_eq!(t.take(&a, "portforward"), None, "single use");
        assert_eq!(t.take(&b, "exec"), None, "wrong kind");
        assert_eq!(t.take(&b, "portforward"), None, "a wrong-kind try uses it up too");
        assert_eq!(t.take("nope", "exec"), None);
    }

    #[test]
    fn expired_tokens_are_refused() {
        let t = Tokens::default();
        let a = t.insert(pf());
        if let Ok(mut m) = t.pending.lock()
            && let Some(e) = m.get_mut(&a)
        {
            e.0 = Instant::now() - TOKEN_TTL - Duration::from_secs(1);
        }
        assert_eq!(t.take(&a, "portforward"), None);
    }
}
