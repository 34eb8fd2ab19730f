//! Reading an ACI: an ACI file is a tar (gzip, bzip2, xz, zstd or plain) of
//! `manifest` (an appc image manifest) and `rootfs/`. Here: the plain tar of
//! its bytes, and its manifest. Fetching ACIs (files, URLs, discovery,
//! signatures) is the daemon's.

use crate::schema::ImageManifest;
use std::io::{self, Read};

/// The largest manifest accepted inside an ACI.
pub const MAX_MANIFEST: u64 = 1 << 20;

/// Why an ACI could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AciError {
    /// Not an ACI that is read: no manifest, an invalid or too large one,
    /// a tar larger than allowed.
    #[error("{0}")]
    Unsupported(String),
    /// Reading or decompressing failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being read.
        context: String,
        /// The error of the read.
        source: io::Error,
    },
}

fn io_ctx(context: impl Into<String>) -> impl FnOnce(io::Error) -> AciError {
    let context = context.into();
    move |source| AciError::Io { context, source }
}

/// A reader of the plain tar in an ACI file's bytes (gzip, zstd, bzip2 and
/// xz are undone).
pub fn decompressed(bytes: &[u8]) -> io::Result<Box<dyn Read + '_>> {
    Ok(if bytes.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(bytes))
    } else if bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(zstd::Decoder::new(bytes)?)
    } else if bytes.starts_with(b"BZh") {
        Box::new(bzip2::read::MultiBzDecoder::new(bytes))
    } else if bytes.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Box::new(liblzma::read::XzDecoder::new_multi_decoder(bytes))
    } else {
        Box::new(bytes)
    })
}

/// The plain tar of an ACI file's bytes, at most `limit` bytes of it.
pub fn plain_tar(bytes: &[u8], limit: u64) -> Result<Vec<u8>, AciError> {
    let mut out = Vec::new();
    decompressed(bytes)
        .and_then(|r| r.take(limit + 1).read_to_end(&mut out))
        .map_err(io_ctx("decompressing the ACI"))?;
    if out.len() as u64 > limit {
        return Err(AciError::Unsupported(format!("the ACI is larger than {limit} bytes uncompressed")));
    }
    Ok(out)
}

/// The `manifest` entry of an ACI's plain tar.
pub fn manifest_of(tar: impl Read) -> Result<ImageManifest, AciError> {
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries().map_err(io_ctx("reading the ACI"))? {
        let mut entry = entry.map_err(io_ctx("reading the ACI"))?;
        let path = entry.path().map_err(io_ctx("reading the ACI"))?.into_owned();
        if path
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .eq([std::path::Component::Normal("manifest".as_ref())])
        {
            if entry.size() > MAX_MANIFEST {
                return Err(AciError::Unsupported(format!("the ACI manifest is larger than {MAX_MANIFEST} bytes")));
            }
            let mut json = Vec::new();
            entry.read_to_end(&mut json).map_err(io_ctx("reading the ACI manifest"))?;
            let m: ImageManifest = serde_json::from_slice(&json)
                .map_err(|e| AciError::Unsupported(format!("invalid ACI manifest: {e}")))?;
            if m.ac_kind != "ImageManifest" || m.name.is_empty() {
                return Err(AciError::Unsupported(format!(
                    "not an image manifest (acKind {:?}, name {:?})",
                    m.ac_kind, m.name
                )));
            }
            return Ok(m);
        }
    }
    Err(AciError::Unsupported("the ACI has no manifest".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressions() {
        let mut b = tar::Builder::new(Vec::new());
        let m = serde_json::to_vec(&ImageManifest::new("example.com/c")).expect("json");
        let mut h = tar::Header::new_gnu();
        h.set_size(m.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "manifest", &m[..]).expect("append");
        let tar = b.into_inner().expect("tar");
        let mut bz = Vec::new();
        bzip2::read::BzEncoder::new(&tar[..], bzip2::Compression::fast()).read_to_end(&mut bz).expect("bzip2");
        let mut xz = Vec::new();
        liblzma::read::XzEncoder::new(&tar[..], 1).read_to_end(&mut xz).expect("xz");
        for packed in [&tar, &bz, &xz] {
            let plain = plain_tar(packed, 1 << 20).expect("decompress");
            assert_eq!(plain, tar);
            assert_eq!(manifest_of(&plain[..]).expect("manifest").name, "example.com/c");
            assert_eq!(manifest_of(decompressed(packed).expect("reader")).expect("streamed").name, "example.com/c");
            assert!(plain_tar(packed, 100).is_err(), "the size cap holds");
        }
    }
}
