//! The signature policy for registry pulls: which images need a signature,
//! from which keys. The file has the shape of containers-policy.json(5), as
//! CRI-O and podman read it, for the `docker` transport:
//!
//! ```json
//! {
//!   "default": [{"type": "insecureAcceptAnything"}],
//!   "transports": {"docker": {
//!     "registry.example.com/team": [{"type": "signedBy", "keyPath": "/etc/rktlet/keys/team.pub"}],
//!     "registry.example.com/team/legacy": [{"type": "insecureAcceptAnything"}],
//!     "untrusted.example.com": [{"type": "reject"}]
//!   }}
//! }
//! ```
//!
//! The most specific scope wins: `host/repo:tag` or `host/repo@digest`, then
//! the repository, its parent namespaces, the host, `*.domain` wildcards
//! (longest first), then `default`. Every requirement of the chosen list must
//! hold. `signedBy` (also spelled `sigstoreSigned`) takes `keyPath`,
//! `keyPaths` or `keyData` (base64 of the PEM): PEM public keys, ECDSA P-256
//! or Ed25519. A signature is cosign's "simple signing" form: the manifest
//! tagged `sha256-<hex of the image digest>.sig` in the image's repository,
//! each layer a JSON payload naming the image digest, its signature (base64)
//! in the layer's `dev.cosignproject.cosign/signature` annotation. The
//! payload must name the digest the reference resolved to (the index for a
//! multi-arch image) and the same repository.
//!
//! No file means `insecureAcceptAnything` everywhere: a node without a policy
//! pulls as it always did. A file named explicitly (`signature_policy` in
//! registries.toml) must exist.

use base64::Engine;
use rkt::digest::Digest;
use rkt::reference::Reference;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layer media type of a cosign simple-signing payload.
pub(crate) const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation that carries the payload's signature, base64.
pub(crate) const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// `critical.type` of a cosign payload.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// Largest signature payload read.
pub(crate) const MAX_PAYLOAD_BYTES: u64 = 64 << 10;

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read signature policy {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid signature policy {path}: {detail}")]
    Invalid { path: PathBuf, detail: String },
}

/// One requirement, as written in the file.
/// Fields this reader does not implement (`signedIdentity`, `fulcio`,
/// `rekorPublicKey...`) are refused rather than ignored.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
enum RawRequirement {
    #[serde(rename = "insecureAcceptAnything")]
    Accept {},
    #[serde(rename = "reject")]
    Reject {},
    #[serde(rename = "signedBy", alias = "sigstoreSigned", rename_all = "camelCase")]
    SignedBy {
        #[serde(default)]
        key_type: Option<String>,
        #[serde(default)]
        key_path: Option<PathBuf>,
        #[serde(default)]
        key_paths: Vec<PathBuf>,
        #[serde(default)]
        key_data: Option<String>,
    },
}

#[derive(Debug, Deserialize)]
struct RawPolicy {
    #[serde(default)]
    default: Option<Vec<RawRequirement>>,
    /// Only `docker` is read; the others (atomic, oci, docker-daemon...) never
    /// reach a registry pull here and may use what this reader does not know.
    #[serde(default)]
    transports: BTreeMap<String, serde_json::Value>,
}

/// A public key that may sign images.
#[derive(Clone)]
pub(crate) enum PublicKey {
    P256(p256::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PublicKey::P256(_) => "PublicKey::P256",
            PublicKey::Ed25519(_) => "PublicKey::Ed25519",
        })
    }
}

impl PublicKey {
    /// An SPKI PEM (`-----BEGIN PUBLIC KEY-----`) of a P-256 or Ed25519 key.
    pub(crate) fn from_pem(pem: &str) -> Result<PublicKey, String> {
        use p256::pkcs8::DecodePublicKey;
        if let Ok(k) = p256::ecdsa::VerifyingKey::from_public_key_pem(pem) {
            return Ok(PublicKey::P256(k));
        }
        ed25519_dalek::VerifyingKey::from_public_key_pem(pem)
            .map(PublicKey::Ed25519)
            .map_err(|_| "not a PEM public key of type ECDSA P-256 or Ed25519".to_string())
    }

    /// Whether `signature` signs `payload`: ECDSA with SHA-256 (DER or
    /// 64-byte r||s), or Ed25519 (64 bytes).
    pub(crate) fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        match self {
            PublicKey::P256(k) => {
                use p256::ecdsa::signature::Verifier;
                let sig = p256::ecdsa::Signature::from_der(signature)
                    .or_else(|_| p256::ecdsa::Signature::from_slice(signature));
                sig.is_ok_and(|s| k.verify(payload, &s).is_ok())
            }
            PublicKey::Ed25519(k) => {
                ed25519_dalek::Signature::from_slice(signature).is_ok_and(|s| k.verify_strict(payload, &s).is_ok())
            }
        }
    }
}

/// What a scope asks of an image.
#[derive(Debug, Clone)]
pub(crate) enum Requirement {
    Accept,
    Reject,
    SignedBy(Vec<PublicKey>),
}

/// A parsed policy; keys are read when the policy is loaded.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    default: Vec<Requirement>,
    scopes: BTreeMap<String, Vec<Requirement>>,
}

impl Default for Policy {
    /// Accept anything: today's behaviour without a policy file.
    fn default() -> Self {
        Policy { default: vec![Requirement::Accept], scopes: BTreeMap::new() }
    }
}

/// The scope a pull fell under and what it requires.
#[derive(Debug)]
pub(crate) struct Decision<'a> {
    pub scope: String,
    pub requirements: &'a [Requirement],
}

impl Decision<'_> {
    /// The keys every signature check needs (one list per `signedBy`), or the
    /// reason the image is refused outright.
    pub(crate) fn needs(&self) -> Result<Vec<&[PublicKey]>, String> {
        let mut out = Vec::new();
        for r in self.requirements {
            match r {
                Requirement::Accept => {}
                Requirement::Reject => return Err(format!("the policy rejects images of scope {:?}", self.scope)),
                Requirement::SignedBy(keys) => out.push(keys.as_slice()),
            }
        }
        Ok(out)
    }
}

impl Policy {
    /// Reads `path`; a missing file is the accept-anything default unless `required`.
    pub(crate) fn load(path: &Path, required: bool) -> Result<Policy, PolicyError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(Policy::default()),
            Err(source) => return Err(PolicyError::Read { path: path.to_path_buf(), source }),
        };
        Self::parse(&text, path.parent().unwrap_or(Path::new("/")))
            .map_err(|detail| PolicyError::Invalid { path: path.to_path_buf(), detail })
    }

    /// Parses a policy; relative key paths are taken from `base`.
    pub(crate) fn parse(text: &str, base: &Path) -> Result<Policy, String> {
        let raw: RawPolicy = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let default = raw.default.ok_or("\"default\" is required (for example [{\"type\": \"reject\"}])")?;
        let convert = |list: Vec<RawRequirement>, scope: &str| -> Result<Vec<Requirement>, String> {
            if list.is_empty() {
                return Err(format!("scope {scope:?} has no requirements"));
            }
            list.into_iter().map(|r| requirement(r, base).map_err(|e| format!("scope {scope:?}: {e}"))).collect()
        };
        let default = convert(default, "default")?;
        let mut scopes = BTreeMap::new();
        if let Some(docker) = raw.transports.get("docker") {
            let entries: BTreeMap<String, Vec<RawRequirement>> =
                serde_json::from_value(docker.clone()).map_err(|e| format!("transports.docker: {e}"))?;
            // containers-policy: the scope "" is the transport's default
            for (scope, list) in entries {
                let reqs = convert(list, if scope.is_empty() { "docker" } else { &scope })?;
                if scopes.insert(normalize_scope(&scope), reqs).is_some() {
                    return Err(format!("scope {scope:?} is given twice (host names are not case-sensitive)"));
                }
            }
        }
        Ok(Policy { default, scopes })
    }

    /// Whether any scope asks for more than "accept".
    #[cfg(test)]
    pub(crate) fn is_permissive(&self) -> bool {
        self.scopes.values().chain(std::iter::once(&self.default)).flatten().all(|r| matches!(r, Requirement::Accept))
    }

    /// The requirements for `reference`, from its most specific scope.
    pub(crate) fn decide(&self, reference: &Reference) -> Decision<'_> {
        for scope in candidate_scopes(reference) {
            if let Some(reqs) = self.scopes.get(&scope) {
                return Decision { scope, requirements: reqs };
            }
        }
        match self.scopes.get("") {
            Some(reqs) => Decision { scope: "docker".into(), requirements: reqs },
            None => Decision { scope: "default".into(), requirements: &self.default },
        }
    }
}

fn requirement(raw: RawRequirement, base: &Path) -> Result<Requirement, String> {
    Ok(match raw {
        RawRequirement::Accept {} => Requirement::Accept,
        RawRequirement::Reject {} => Requirement::Reject,
        RawRequirement::SignedBy { key_type, key_path, key_paths, key_data } => {
            if key_type.as_deref() == Some("GPGKeys") {
                return Err(
                    "GPG-signed registry images are not supported; use cosign keys (ECDSA P-256 or Ed25519)".into()
                );
            }
            let mut pems = Vec::new();
            for p in key_path.into_iter().chain(key_paths) {
                let p = base.join(p);
                let text = std::fs::read_to_string(&p).map_err(|e| format!("cannot read key {}: {e}", p.display()))?;
                pems.push((p.display().to_string(), text));
            }
            if let Some(data) = key_data {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data.trim())
                    .map_err(|e| format!("keyData is not base64: {e}"))?;
                pems.push(("keyData".into(), String::from_utf8_lossy(&bytes).into_owned()));
            }
            if pems.is_empty() {
                return Err("signedBy needs keyPath, keyPaths or keyData".into());
            }
            let keys = pems
                .iter()
                .map(|(name, pem)| PublicKey::from_pem(pem).map_err(|e| format!("{name}: {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            Requirement::SignedBy(keys)
        }
    })
}

/// A registry host as scopes are compared: lower case (DNS names are not
/// case-sensitive), without the HTTPS default port. Without this,
/// `Registry.Example.com:443/x` would miss the scope `registry.example.com/x`.
fn normalize_host(host: &str) -> String {
    let host = host.to_ascii_lowercase();
    host.strip_suffix(":443").map(str::to_string).unwrap_or(host)
}

/// A scope key with its host normalized (the path and tag are kept).
fn normalize_scope(scope: &str) -> String {
    match scope.split_once('/') {
        Some((host, rest)) => format!("{}/{rest}", normalize_host(host)),
        None => normalize_host(scope),
    }
}

/// Scopes that may name `reference`, most specific first.
fn candidate_scopes(reference: &Reference) -> Vec<String> {
    let domain = normalize_host(&reference.domain);
    let name = format!("{domain}/{}", reference.path);
    let mut out = Vec::new();
    if let Some(d) = &reference.digest {
        out.push(format!("{name}@{d}"));
    }
    if let Some(t) = &reference.tag {
        out.push(format!("{name}:{t}"));
    }
    let mut ns = name.as_str();
    loop {
        out.push(ns.to_string());
        match ns.rsplit_once('/') {
            Some((parent, _)) => ns = parent,
            None => break,
        }
    }
    // `*.example.com` covers `registry.example.com` and `a.b.example.com`
    let host = domain.split(':').next().unwrap_or(&domain);
    let mut rest = host;
    while let Some((_, parent)) = rest.split_once('.') {
        out.push(format!("*.{parent}"));
        rest = parent;
    }
    out
}

/// A cosign payload, the parts that are checked.
#[derive(Debug, Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Debug, Deserialize)]
struct Critical {
    identity: Identity,
    image: PayloadImage,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(Debug, Deserialize)]
struct PayloadImage {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// The cosign signature tag for an image digest: `sha256-<hex>.sig`.
pub(crate) fn signature_tag(digest: &Digest) -> String {
    digest.to_string().replacen(':', "-", 1) + ".sig"
}

/// Checks one signature: `signature_b64` over `payload`, by one of `keys`,
/// naming `digest` in repository `reference`.
pub(crate) fn check_signature(
    keys: &[PublicKey],
    payload: &[u8],
    signature_b64: &str,
    reference: &Reference,
    digest: &Digest,
) -> Result<(), String> {
    let sig = base64::engine::general_purpose::STANDARD
        .decode(signature_b64.trim())
        .map_err(|e| format!("signature is not base64: {e}"))?;
    if !keys.iter().any(|k| k.verifies(payload, &sig)) {
        return Err("not signed by a trusted key".into());
    }
    let p: Payload = serde_json::from_slice(payload).map_err(|e| format!("signed payload is not cosign's: {e}"))?;
    if p.critical.kind != PAYLOAD_TYPE {
        return Err(format!("signed payload has type {:?}", p.critical.kind));
    }
    if p.critical.image.docker_manifest_digest != digest.to_string() {
        return Err(format!("signature is for {}, not {digest}", p.critical.image.docker_manifest_digest));
    }
    let signed: Reference =
        p.critical.identity.docker_reference.parse().map_err(|e| format!("signed identity is invalid: {e}"))?;
    let (signed_host, host) = (normalize_host(&signed.domain), normalize_host(&reference.domain));
    let same_host = signed_host == host
        || [&signed_host, &host].iter().all(|d| d.as_str() == "docker.io" || d.as_str() == "index.docker.io");
    if !same_host || signed.path != reference.path {
        return Err(format!("signature names {}, not {}", signed.name(), reference.name()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> Reference {
        s.parse().expect("reference")
    }

    #[test]
    fn most_specific_scope_wins() {
        let p = Policy::parse(
            r#"{"default":[{"type":"reject"}],"transports":{"docker":{
                "reg.example.com/team":[{"type":"insecureAcceptAnything"}],
                "reg.example.com/team/app:v1":[{"type":"reject"}],
                "*.example.com":[{"type":"insecureAcceptAnything"}],
                "docker.io/library":[{"type":"insecureAcceptAnything"}]}}}"#,
            Path::new("/"),
        )
        .expect("policy");
        let scope = |s: &str| p.decide(&r(s)).scope;
        assert_eq!(scope("reg.example.com/team/app:v2"), "reg.example.com/team");
        assert_eq!(scope("reg.example.com/team/app:v1"), "reg.example.com/team/app:v1");
        assert_eq!(scope("reg.example.com/other"), "*.example.com");
        assert_eq!(scope("a.b.example.com/x"), "*.example.com");
        assert_eq!(scope("busybox"), "docker.io/library");
        assert_eq!(scope("quay.io/x"), "default");
        // the same registry written differently stays in its scope
        assert_eq!(scope("Reg.Example.COM:443/team/app"), "reg.example.com/team");
        assert!(p.decide(&r("quay.io/x")).needs().is_err());
        assert!(p.decide(&r("busybox")).needs().expect("accept").is_empty());
        assert!(!p.is_permissive());
        assert!(Policy::default().is_permissive());
    }

    #[test]
    fn bad_policies_are_refused() {
        for text in [
            r#"{}"#,
            r#"{"default":[]}"#,
            r#"{"default":[{"type":"signedBy"}]}"#,
            r#"{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"k"}]}"#,
            r#"{"default":[{"type":"signedBy","keyData":"bm90IGEga2V5"}]}"#,
            r#"{"default":[{"type":"maybe"}]}"#,
            r#"{"default":[{"type":"signedBy","keyPath":"/nonexistent/key.pub"}]}"#,
            r#"{"default":[{"type":"signedBy","keyData":"eA==","signedIdentity":{"type":"matchExact"}}]}"#,
            r#"{"default":[{"type":"reject","signedIdentity":{"type":"matchExact"}}]}"#,
            r#"{"default":[{"type":"reject"}],"transports":{"docker":{"A.com/x":[{"type":"reject"}],"a.com/x":[{"type":"reject"}]}}}"#,
        ] {
            assert!(Policy::parse(text, Path::new("/")).is_err(), "{text}");
        }
        // a file named explicitly must exist; the default one may be absent
        let missing = Path::new("/nonexistent/rktlet/policy.json");
        assert!(matches!(Policy::load(missing, true), Err(PolicyError::Read { .. })));
        assert!(Policy::load(missing, false).expect("default policy").is_permissive());
    }

    #[test]
    fn other_transports_and_key_types_are_tolerated() {
        let dir = std::env::temp_dir().join(format!("rktlet-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let key = dir.join("k.pem");
        let made = std::process::Command::new("openssl")
            .args(["genpkey", "-algorithm", "ed25519", "-out"])
            .arg(&key)
            .status()
            .expect("openssl");
        assert!(made.success());
        let public =
            std::process::Command::new("openssl").args(["pkey", "-pubout", "-in"]).arg(&key).output().expect("openssl");
        std::fs::write(dir.join("k.pub"), &public.stdout).expect("pub");
        let p = Policy::parse(
            r#"{"default":[{"type":"reject"}],"transports":{
                "docker-daemon":{"":[{"type":"sigstoreSigned","fulcio":{}}]},
                "docker":{"r.example/x":[{"type":"signedBy","keyType":"sigstore","keyPath":"k.pub"}]}}}"#,
            &dir,
        )
        .expect("policy");
        assert_eq!(p.decide(&r("r.example/x")).needs().expect("signed").len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn signature_tag_is_cosigns() {
        let d: Digest = format!("sha256:{}", "ab".repeat(32)).parse().expect("digest");
        assert_eq!(signature_tag(&d), format!("sha256-{}.sig", "ab".repeat(32)));
    }
}
