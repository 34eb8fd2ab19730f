//! Content digests (`sha256:` / `sha512:` as registries name blobs) and the
//! readers that check them while bytes stream through, plus rkt's CAS key.

use sha2::{Digest as _, Sha256, Sha512};
use std::fmt;
use std::io::{self, Read};
use std::str::FromStr;

/// A registry content digest, e.g. `sha256:<64 hex>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    /// The hash function.
    pub algorithm: Algorithm,
    /// Lower-case hex.
    pub hex: String,
}

/// A digest's hash function, as its prefix names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// SHA-256: `sha256:` and 64 hex characters.
    Sha256,
    /// SHA-512: `sha512:` and 128 hex characters.
    Sha512,
}

impl Algorithm {
    /// The prefix: `sha256` or `sha512`.
    fn as_str(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }

    fn hex_len(self) -> usize {
        match self {
            Algorithm::Sha256 => 64,
            Algorithm::Sha512 => 128,
        }
    }
}

/// A string that is not a digest (it holds the string).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid digest {0:?}: expected sha256:<64 hex> or sha512:<128 hex>")]
pub struct InvalidDigest(pub String);

impl FromStr for Digest {
    type Err = InvalidDigest;
    fn from_str(s: &str) -> Result<Self, InvalidDigest> {
        let bad = || InvalidDigest(s.to_string());
        let (algo, hex) = s.split_once(':').ok_or_else(bad)?;
        let algorithm = match algo {
            "sha256" => Algorithm::Sha256,
            "sha512" => Algorithm::Sha512,
            _ => return Err(bad()),
        };
        if hex.len() != algorithm.hex_len() || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(bad());
        }
        Ok(Digest { algorithm, hex: hex.to_string() })
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm.as_str(), self.hex)
    }
}

impl Digest {
    /// The digest of `bytes` with `algorithm`.
    pub fn of(algorithm: Algorithm, bytes: &[u8]) -> Digest {
        let mut h = Hasher::new(algorithm);
        h.update(bytes);
        h.finish()
    }

    /// `sha256-<hex>`: usable as a file name (key-lock files).
    pub fn file_name(&self) -> String {
        format!("{}-{}", self.algorithm.as_str(), self.hex)
    }
}

/// A running hash of either algorithm.
#[derive(Clone)]
pub enum Hasher {
    /// A SHA-256 hash in progress.
    Sha256(Sha256),
    /// A SHA-512 hash in progress.
    Sha512(Sha512),
}

impl Hasher {
    /// A hash of `algorithm` over no bytes yet.
    pub fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::Sha256 => Hasher::Sha256(Sha256::new()),
            Algorithm::Sha512 => Hasher::Sha512(Sha512::new()),
        }
    }

    /// Hashes `bytes` in.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Sha512(h) => h.update(bytes),
        }
    }

    /// The digest of the bytes hashed.
    pub fn finish(self) -> Digest {
        let (algorithm, bytes) = match self {
            Hasher::Sha256(h) => (Algorithm::Sha256, h.finalize().to_vec()),
            Hasher::Sha512(h) => (Algorithm::Sha512, h.finalize().to_vec()),
        };
        Digest { algorithm, hex: to_hex(&bytes) }
    }
}

/// Lower-case hex of `bytes`.
fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// rkt's CAS key of a SHA-512 digest: `sha512-` + its first 64 hex characters.
pub fn cas_key(sha512: &Digest) -> String {
    format!("sha512-{}", &sha512.hex[..64.min(sha512.hex.len())])
}

/// rkt's CAS key of some bytes.
pub fn cas_key_of(bytes: &[u8]) -> String {
    cas_key(&Digest::of(Algorithm::Sha512, bytes))
}

/// Whether `s` is a full CAS key (`sha512-` + 64 hex).
pub fn is_cas_key(s: &str) -> bool {
    s.len() == 71
        && s.starts_with("sha512-")
        && s[7..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What a verifying reader found wrong.
#[derive(Debug, thiserror::Error)]
pub enum Mismatch {
    /// The bytes read have another digest.
    #[error("digest mismatch: expected {expected}, got {actual}")]
    Digest {
        /// The digest asked for.
        expected: Digest,
        /// The digest of the bytes read.
        actual: Digest,
    },
    /// The bytes read are more or fewer than expected, or over the limit.
    #[error("size mismatch: expected {expected} bytes, got {actual} or more")]
    Size {
        /// The size asked for, or the limit.
        expected: u64,
        /// The bytes read when it was found.
        actual: u64,
    },
}

/// Hashes and counts what is read through it. `check` compares with the
/// expected digest and size once the stream has ended.
pub struct HashingReader<R> {
    inner: R,
    hasher: Hasher,
    /// false: only counts (and limits); the digest is that of nothing.
    hashing: bool,
    count: u64,
    limit: Option<u64>,
}

impl<R: Read> HashingReader<R> {
    /// `limit`: fail with a size mismatch as soon as more than this many bytes arrive.
    pub fn new(inner: R, algorithm: Algorithm, limit: Option<u64>) -> Self {
        HashingReader { inner, hasher: Hasher::new(algorithm), hashing: true, count: 0, limit }
    }

    /// A reader that counts and limits what it passes on, without hashing it.
    pub fn counting(inner: R, limit: Option<u64>) -> Self {
        HashingReader { inner, hasher: Hasher::new(Algorithm::Sha512), hashing: false, count: 0, limit }
    }

    /// The bytes read through it so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Reads to the end (so trailing bytes the consumer ignored are hashed too) and returns the digest.
    pub fn finish(mut self) -> io::Result<(Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((self.hasher.finish(), self.count))
    }

    /// Like [`finish`](Self::finish), and checks digest and size.
    pub fn verify(self, expected: &Digest, size: Option<u64>) -> io::Result<()> {
        let (actual, count) = self.finish()?;
        if let Some(size) = size
            && size != count
        {
            return Err(io::Error::new(io::ErrorKind::InvalidData, Mismatch::Size { expected: size, actual: count }));
        }
        if &actual != expected {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                Mismatch::Digest { expected: expected.clone(), actual },
            ));
        }
        Ok(())
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.hashing {
            self.hasher.update(&buf[..n]);
        }
        self.count += n as u64;
        if let Some(limit) = self.limit
            && self.count > limit
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                Mismatch::Size { expected: limit, actual: self.count },
            ));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_and_print() {
        let d: Digest = format!("sha256:{}", "a".repeat(64)).parse().expect("parse");
        assert_eq!(d.algorithm, Algorithm::Sha256);
        assert_eq!(d.to_string(), format!("sha256:{}", "a".repeat(64)));
        assert!("sha256:abc".parse::<Digest>().is_err());
        assert!(format!("md5:{}", "a".repeat(32)).parse::<Digest>().is_err());
        assert!(format!("sha256:{}", "A".repeat(64)).parse::<Digest>().is_err());
        assert!(format!("sha512:{}", "0".repeat(128)).parse::<Digest>().is_ok());
    }

    #[test]
    fn cas_keys_are_rkt_shaped() {
        let k = cas_key_of(b"");
        assert_eq!(k, "sha512-cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce");
        assert!(is_cas_key(&k));
        assert!(!is_cas_key("sha512-00"));
    }

    #[test]
    fn hashing_reader_checks_digest_size_and_limit() {
        let data = b"hello world".to_vec();
        let good = Digest::of(Algorithm::Sha256, &data);
        assert!(HashingReader::new(&data[..], Algorithm::Sha256, None).verify(&good, Some(11)).is_ok());
        let err = HashingReader::new(&data[..], Algorithm::Sha256, None).verify(&good, Some(12)).expect_err("size");
        assert!(err.to_string().contains("size mismatch"), "{err}");
        let other = Digest::of(Algorithm::Sha256, b"x");
        let err = HashingReader::new(&data[..], Algorithm::Sha256, None).verify(&other, None).expect_err("digest");
        assert!(err.to_string().contains("digest mismatch"), "{err}");
        let mut r = HashingReader::new(&data[..], Algorithm::Sha256, Some(4));
        assert!(io::copy(&mut r, &mut io::sink()).is_err());
    }
}
