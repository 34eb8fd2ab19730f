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
//!
//! A prefix is an appc AC identifier (lowercase letters and digits, with
//! single `-._~/` separators between them, e.g. `example.com/app`), so it is
//! never empty and every path component is a plain name: there is no prefix
//! that covers every name (that is what `root.d` is for). As in rkt, only key
//! files inside `prefix.d/<prefix>/` and directly inside `root.d/` count; a
//! key file lying directly in `prefix.d/` (or deeper in `root.d/`) trusts
//! nothing and is only warned about.

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey, SignedPublicSubKey};
use pgp::packet::{PublicKey, Signature, SignatureType};
use pgp::types::{KeyDetails, Tag, Timestamp};
use rkt::schema::is_ac_identifier;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("not an OpenPGP public key: {0}")]
    BadKey(String),
    #[error("not an OpenPGP signature: {0}")]
    BadSignature(String),
    #[error(
        "invalid name prefix {0:?}: an appc image name prefix such as example.com/app (lowercase letters and \
         digits with single -._~/ between them); use --root to trust a key for every name"
    )]
    BadPrefix(String),
    #[error("no trusted key for {name} verifies its signature ({keys} keys tried)")]
    Untrusted { name: String, keys: usize },
    #[error("key {fingerprint} cannot be trusted: {reason}")]
    UnusableKey { fingerprint: String, reason: String },
    #[error("the signature on {name} is by trusted key {fingerprint}, which cannot sign: {reason}")]
    CannotSign { name: String, fingerprint: String, reason: String },
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
pub(crate) const SYSTEM_CONFIG: &str = "/usr/lib/rkt";

fn fingerprint_of(key: &SignedPublicKey) -> String {
    format!("{:x}", key.primary_key.fingerprint())
}

/// Parses an armored or binary public key.
pub(crate) fn parse_key(bytes: &[u8]) -> Result<SignedPublicKey, TrustError> {
    SignedPublicKey::from_reader_single(bytes).map(|(k, _)| k).map_err(|e| TrustError::BadKey(e.to_string()))
}

/// When a key made at `created` stops being valid under `sig` (its newest
/// self- or binding signature), if it has by `now`.
fn expired(created: Timestamp, sig: &Signature, now: SystemTime) -> Option<String> {
    let valid_for = std::time::Duration::from(sig.key_expiration_time()?);
    let until = SystemTime::from(created) + valid_for;
    (!valid_for.is_zero() && until <= now).then(|| format!("expired at {}", crate::base::time::rfc3339_nano(until)))
}

/// Why `key`'s primary key may not sign at `now`, if it may not: it has no
/// self-signature that verifies (a user id certification or direct key
/// signature by itself), a revocation by itself verifies, or its newest
/// self-signature says it has expired.
fn primary_problem(key: &SignedPublicKey, now: SystemTime) -> Option<String> {
    let primary = &key.primary_key;
    if key.details.revocation_signatures.iter().any(|s| s.verify_key(primary).is_ok()) {
        return Some("it is revoked".into());
    }
    let certified = key.details.users.iter().flat_map(|u| {
        u.signatures.iter().filter(|s| {
            matches!(
                s.typ(),
                Some(
                    SignatureType::CertGeneric
                        | SignatureType::CertPersona
                        | SignatureType::CertCasual
                        | SignatureType::CertPositive
                )
            ) && s.verify_certification(primary, Tag::UserId, &u.id).is_ok()
        })
    });
    let direct = key.details.direct_signatures.iter().filter(|s| s.verify_key(primary).is_ok());
    let Some(newest) = certified.chain(direct).max_by_key(|s| s.created().map(Timestamp::as_secs)) else {
        return Some("none of its self-signatures verifies (altered, or not made by the key itself)".into());
    };
    expired(primary.created_at(), newest, now).map(|when| format!("it {when}"))
}

/// Why `sub` may not sign for `primary` at `now`, if it may not: no binding
/// signature by the primary key over it verifies, the newest binding does not
/// allow signing or lacks a valid back-signature by the subkey, a revocation
/// by the primary key verifies, or the binding says it has expired.
fn subkey_problem(primary: &PublicKey, sub: &SignedPublicSubKey, now: SystemTime) -> Option<String> {
    let by_primary = |s: &&Signature| s.verify_subkey_binding(primary, &sub.key).is_ok();
    let of_type = |t: SignatureType| sub.signatures.iter().filter(move |s| s.typ() == Some(t));
    if of_type(SignatureType::SubkeyRevocation).any(|s| by_primary(&s)) {
        return Some("it is revoked".into());
    }
    let Some(binding) =
        of_type(SignatureType::SubkeyBinding).filter(by_primary).max_by_key(|s| s.created().map(Timestamp::as_secs))
    else {
        return Some("it is not bound to the primary key (no binding signature by the primary key verifies)".into());
    };
    if !binding.key_flags().sign() {
        return Some("it is bound to the primary key, but not for signing".into());
    }
    let back_signed =
        binding.embedded_signature().is_some_and(|b| b.verify_primary_key_binding(&sub.key, primary).is_ok());
    if !back_signed {
        return Some("it has no valid back-signature to the primary key".into());
    }
    expired(sub.key.created_at(), binding, now).map(|when| format!("it {when}"))
}

/// `example.com/app` (a trailing `/` allowed) as a relative path of plain
/// components: an AC identifier, so neither empty nor `/`, `.` or `..`.
fn prefix_path(prefix: &str) -> Result<PathBuf, TrustError> {
    let trimmed = prefix.trim_end_matches('/');
    if !is_ac_identifier(trimmed) {
        return Err(TrustError::BadPrefix(prefix.to_string()));
    }
    Ok(PathBuf::from(trimmed))
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
        let prefix_dir = prefix.map(prefix_path).transpose()?;
        let parsed = parse_key(key)?;
        let fingerprint = fingerprint_of(&parsed);
        let now = SystemTime::now();
        if let Some(reason) = primary_problem(&parsed, now) {
            return Err(TrustError::UnusableKey { fingerprint, reason });
        }
        for sub in &parsed.public_subkeys {
            if let Some(reason) = subkey_problem(&parsed.primary_key, sub, now) {
                let subkey = format!("{:x}", sub.key.fingerprint());
                tracing::warn!(key = fingerprint, subkey, reason, "subkey will not be accepted for signatures");
            }
        }
        let dir = Self::dir(&self.local, prefix_dir.as_deref());
        fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let armored = parsed
            .to_armored_string(Default::default())
            .map_err(|e| TrustError::BadKey(format!("cannot armor it again: {e}")))?;
        let path = dir.join(&fingerprint);
        rkt::fs::write_atomic(&path, armored.as_bytes(), 0o644)
            .map_err(io_err(format!("writing {}", path.display())))?;
        let prefix = prefix_dir.map(|p| p.display().to_string());
        Ok(TrustedKey { prefix, fingerprint, path })
    }

    /// Every key, local ones first; masked system keys are left out.
    pub(crate) fn list(&self) -> Vec<TrustedKey> {
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
                    let Some(dir) = rel.parent() else { continue };
                    let prefix = match dir.strip_prefix("prefix.d") {
                        // prefix.d/<prefix>/<fingerprint>, the prefix an AC identifier
                        Ok(p) if p.to_str().is_some_and(is_ac_identifier) => Some(p.display().to_string()),
                        Ok(_) => {
                            tracing::warn!(path = %path.display(), "key file outside a prefix.d/<prefix>/ directory trusts nothing");
                            continue;
                        }
                        Err(_) if dir == Path::new("root.d") => None,
                        Err(_) => {
                            tracing::warn!(path = %path.display(), "key file outside root.d/ and prefix.d/<prefix>/ trusts nothing");
                            continue;
                        }
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
    pub(crate) fn remove(&self, fingerprint: &str) -> Result<Vec<TrustedKey>, TrustError> {
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
    pub(crate) fn keys_for(&self, name: &str) -> Vec<TrustedKey> {
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
    /// Only the primary key and subkeys bound to it for signing count, and
    /// neither once revoked or expired.
    pub fn verify(&self, name: &str, data: &[u8], signature: &[u8]) -> Result<String, TrustError> {
        let sig = DetachedSignature::from_reader_single(signature)
            .map(|(s, _)| s)
            .map_err(|e| TrustError::BadSignature(e.to_string()))?;
        let keys = self.keys_for(name);
        let now = SystemTime::now();
        // a signature by a trusted key that may not sign, for the error
        let mut refused = None;
        for k in &keys {
            let Ok(bytes) = fs::read(&k.path) else { continue };
            let Ok(key) = parse_key(&bytes) else {
                tracing::warn!(path = %k.path.display(), "unreadable key in the trust store");
                continue;
            };
            let primary_problem = primary_problem(&key, now);
            let mut problems = Vec::new();
            if sig.verify(&key.primary_key, data).is_ok() {
                problems.push(primary_problem.clone());
            }
            for sub in key.public_subkeys.iter().filter(|s| sig.verify(&s.key, data).is_ok()) {
                let problem = primary_problem.clone().or_else(|| {
                    subkey_problem(&key.primary_key, sub, now)
                        .map(|p| format!("its subkey {:x}: {p}", sub.key.fingerprint()))
                });
                problems.push(problem);
            }
            for problem in problems {
                let Some(reason) = problem else { return Ok(k.fingerprint.clone()) };
                tracing::warn!(key = k.fingerprint, reason, "signature by a trusted key that may not sign");
                refused = Some((k.fingerprint.clone(), reason));
            }
        }
        match refused {
            Some((fingerprint, reason)) => Err(TrustError::CannotSign { name: name.to_string(), fingerprint, reason }),
            None => Err(TrustError::Untrusted { name: name.to_string(), keys: keys.len() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_ac_identifiers() {
        assert_eq!(prefix_path("example.com/app/").expect("ok"), PathBuf::from("example.com/app"));
        assert_eq!(prefix_path("127.0.0.1/x_y~z-1").expect("ok"), PathBuf::from("127.0.0.1/x_y~z-1"));
        // nothing that would cover every name, escape the directory or name no image
        for bad in ["", "/", "//", "/etc", "a/../b", "./a", "a//b", "Example.com", "a b", "-a", "a/.", "é.com"] {
            let err = prefix_path(bad).expect_err(bad);
            assert!(err.to_string().contains("invalid name prefix"), "{err}");
        }
        assert!(Path::new("example.com/app/worker").starts_with("example.com/app"));
        assert!(!Path::new("example.com/apps").starts_with("example.com/app"));
    }

    #[test]
    fn empty_and_root_prefixes_are_refused() {
        let t = tempfile::tempdir().expect("tmp");
        let store = TrustStore::new(t.path().join("local"), t.path().join("system"));
        for bad in ["", "/", "///"] {
            assert!(matches!(store.add(Some(bad), b"any key"), Err(TrustError::BadPrefix(_))), "{bad:?}");
        }
        assert!(!t.path().join("local").exists(), "nothing was written");
    }

    #[test]
    fn only_key_files_in_prefix_and_root_directories_count() {
        let t = tempfile::tempdir().expect("tmp");
        let keys = t.path().join("local/trustedkeys");
        let put = |rel: &str| {
            let path = keys.join(rel);
            fs::create_dir_all(path.parent().expect("parent")).expect("dir");
            fs::write(&path, b"a key").expect("key file");
        };
        put("prefix.d/stray");
        put("root.d/nested/deep");
        put("loose");
        put("prefix.d/Not.An.Identifier/upper");
        assert_eq!(TrustStore::new(t.path().join("local"), t.path().join("system")).list(), vec![]);
        put("prefix.d/example.com/app/scoped");
        put("root.d/everywhere");
        let store = TrustStore::new(t.path().join("local"), t.path().join("system"));
        let mut listed: Vec<(Option<String>, String)> =
            store.list().into_iter().map(|k| (k.prefix, k.fingerprint)).collect();
        listed.sort();
        assert_eq!(
            listed,
            vec![(None, "everywhere".to_string()), (Some("example.com/app".to_string()), "scoped".to_string())]
        );
        let names = |name: &str| -> Vec<String> { store.keys_for(name).into_iter().map(|k| k.fingerprint).collect() };
        assert_eq!(names("example.org/other"), vec!["everywhere".to_string()]);
        assert_eq!(names("example.com/app/worker").len(), 2);
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
