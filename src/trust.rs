//! rkt's trust store of OpenPGP keys and the check of detached signatures
//! against it (rkt.md §4.1-4.3).
//!
//! Layout, under a local configuration directory (`--local-config`, rkt's
//! `/etc/rkt`) and a system one (`/usr/lib/rkt`):
//! `trustedkeys/root.d/<fingerprint>` for keys trusted for every image name,
//! `trustedkeys/prefix.d/<name prefix>/<fingerprint>` for keys trusted for
//! names under a prefix (`example.com/app` covers `example.com/app` and
//! `example.com/app/worker`, not `example.com/apps`). Files are the armored
//! keys, named by their lowercase hex fingerprint; an empty local file masks
//! a system key of the same name.

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::types::KeyDetails;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("not an OpenPGP public key: {0}")]
    BadKey(String),
    #[error("not an OpenPGP signature: {0}")]
    BadSignature(String),
    #[error("invalid name prefix {0:?}: a relative path without . or ..")]
    BadPrefix(String),
    #[error("no trusted key for {name} verifies its signature ({keys} keys tried)")]
    Untrusted { name: String, keys: usize },
    #[error("key {0} is not in the local trust store")]
    UnknownKey(String),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> TrustError {
    let context = context.into();
    move |source| TrustError::Io { context, source }
}

/// One trusted key as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TrustedKey {
    /// `None` for a root key (every name).
    pub prefix: Option<String>,
    pub fingerprint: String,
    pub path: PathBuf,
}

/// The local and system key directories.
#[derive(Debug, Clone)]
pub struct TrustStore {
    local: PathBuf,
    system: PathBuf,
}

/// rkt's system configuration directory.
pub const SYSTEM_CONFIG: &str = "/usr/lib/rkt";

fn fingerprint_of(key: &SignedPublicKey) -> String {
    format!("{:x}", key.primary_key.fingerprint())
}

/// Parses an armored or binary public key.
pub fn parse_key(bytes: &[u8]) -> Result<SignedPublicKey, TrustError> {
    SignedPublicKey::from_reader_single(bytes).map(|(k, _)| k).map_err(|e| TrustError::BadKey(e.to_string()))
}

/// `example.com/app` as a relative path of normal components.
fn prefix_path(prefix: &str) -> Result<PathBuf, TrustError> {
    let p = Path::new(prefix.trim_end_matches('/'));
    if prefix.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(TrustError::BadPrefix(prefix.to_string()));
    }
    Ok(p.to_path_buf())
}

impl TrustStore {
    pub fn new(local: impl Into<PathBuf>, system: impl Into<PathBuf>) -> Self {
        TrustStore { local: local.into(), system: system.into() }
    }

    fn dir(base: &Path, prefix: Option<&Path>) -> PathBuf {
        match prefix {
            None => base.join("trustedkeys/root.d"),
            Some(p) => base.join("trustedkeys/prefix.d").join(p),
        }
    }

    /// Trusts `key` (armored or binary) for names under `prefix`, or for
    /// every name; returns where it is stored.
    pub fn add(&self, prefix: Option<&str>, key: &[u8]) -> Result<TrustedKey, TrustError> {
        let parsed = parse_key(key)?;
        let fingerprint = fingerprint_of(&parsed);
        let prefix_dir = prefix.map(prefix_path).transpose()?;
        let dir = Self::dir(&self.local, prefix_dir.as_deref());
        fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let armored = parsed
            .to_armored_string(Default::default())
            .map_err(|e| TrustError::BadKey(format!("cannot armor it again: {e}")))?;
        let path = dir.join(&fingerprint);
        crate::fsutil::write_atomic(&path, armored.as_bytes(), 0o644)
            .map_err(io_err(format!("writing {}", path.display())))?;
        Ok(TrustedKey { prefix: prefix.map(str::to_string), fingerprint, path })
    }

    /// Every key, local ones first; masked system keys are left out.
    pub fn list(&self) -> Vec<TrustedKey> {
        let mut out: Vec<TrustedKey> = Vec::new();
        for base in [&self.local, &self.system] {
            let root = base.join("trustedkeys");
            let mut stack = vec![root.clone()];
            while let Some(dir) = stack.pop() {
                for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
                    let path = e.path();
                    if path.is_dir() {
                        stack.push(path);
                        continue;
                    }
                    let Ok(rel) = path.strip_prefix(&root) else { continue };
                    let fingerprint = e.file_name().to_string_lossy().into_owned();
                    let prefix = match rel.parent().map(|p| p.strip_prefix("prefix.d")) {
                        Some(Ok(p)) => Some(p.display().to_string()),
                        _ if rel.starts_with("root.d") => None,
                        _ => continue,
                    };
                    // an empty local file masks the system key it names
                    let masked = out.iter().any(|k| k.fingerprint == fingerprint && k.prefix == prefix);
                    if !masked {
                        out.push(TrustedKey { prefix, fingerprint, path });
                    }
                }
            }
        }
        out.retain(|k| fs::metadata(&k.path).is_ok_and(|m| m.len() > 0));
        out
    }

    /// Removes a local key wherever it is trusted; returns what went.
    pub fn remove(&self, fingerprint: &str) -> Result<Vec<TrustedKey>, TrustError> {
        let fingerprint = fingerprint.to_ascii_lowercase();
        let gone: Vec<TrustedKey> = self
            .list()
            .into_iter()
            .filter(|k| k.fingerprint == fingerprint && k.path.starts_with(&self.local))
            .collect();
        if gone.is_empty() {
            return Err(TrustError::UnknownKey(fingerprint));
        }
        for k in &gone {
            fs::remove_file(&k.path).map_err(io_err(format!("removing {}", k.path.display())))?;
        }
        Ok(gone)
    }

    /// The keys trusted for image `name`: root keys and those of every
    /// prefix of its path.
    pub fn keys_for(&self, name: &str) -> Vec<TrustedKey> {
        let name = Path::new(name);
        self.list()
            .into_iter()
            .filter(|k| match &k.prefix {
                None => true,
                Some(p) => name.starts_with(p),
            })
            .collect()
    }

    /// Checks a detached signature (armored or binary) over `data` with the
    /// keys trusted for `name`; the fingerprint of the key that made it.
    pub fn verify(&self, name: &str, data: &[u8], signature: &[u8]) -> Result<String, TrustError> {
        let sig = DetachedSignature::from_reader_single(signature)
            .map(|(s, _)| s)
            .map_err(|e| TrustError::BadSignature(e.to_string()))?;
        let keys = self.keys_for(name);
        for k in &keys {
            let Ok(bytes) = fs::read(&k.path) else { continue };
            let Ok(key) = parse_key(&bytes) else {
                tracing::warn!(path = %k.path.display(), "unreadable key in the trust store");
                continue;
            };
            let by_primary = sig.verify(&key.primary_key, data).is_ok();
            let by_subkey = || key.public_subkeys.iter().any(|s| sig.verify(&s.key, data).is_ok());
            if by_primary || by_subkey() {
                return Ok(k.fingerprint.clone());
            }
        }
        Err(TrustError::Untrusted { name: name.to_string(), keys: keys.len() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_relative_paths() {
        assert_eq!(prefix_path("example.com/app/").expect("ok"), PathBuf::from("example.com/app"));
        for bad in ["", "/etc", "a/../b", "./a"] {
            assert!(prefix_path(bad).is_err(), "{bad:?}");
        }
        assert!(Path::new("example.com/app/worker").starts_with("example.com/app"));
        assert!(!Path::new("example.com/apps").starts_with("example.com/app"));
    }

    #[test]
    fn garbage_is_neither_key_nor_signature() {
        let t = tempfile::tempdir().expect("tmp");
        let store = TrustStore::new(t.path().join("local"), t.path().join("system"));
        assert!(matches!(store.add(None, b"not a key"), Err(TrustError::BadKey(_))));
        assert!(matches!(store.verify("a", b"data", b"not a signature"), Err(TrustError::BadSignature(_))));
        assert!(store.list().is_empty());
    }
}
