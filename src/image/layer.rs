//! One layer through the pipeline: compressed bytes (from the registry or a
//! stored download) are hashed and size-checked, copied to a file,
//! decompressed and unpacked, and the layer's ACI rendition (`rkt::layer_aci`)
//! is hashed on the way (its rkt key), all while they stream. A stored
//! ACI blob is hashed as it is (its key) and its rootfs unpacked; so is a
//! layer blob of an older release (the layer's plain or compressed tar,
//! keyed by the uncompressed tar). Runs on a blocking thread; layers run
//! concurrently.

use super::ImageError;
use bytes::Bytes;
use rkt::digest::{Algorithm, Digest, HashingReader, Mismatch, cas_key};
use rkt::extract::{Unpacked, Unpacker};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    Zstd,
    None,
    /// Tell from the first bytes (stored blobs).
    Detect,
}

impl Compression {
    /// From a layer media type; `None` for types rktlet cannot unpack.
    pub(crate) fn from_media_type(mt: &str) -> Option<Compression> {
        if mt.ends_with("+gzip") || mt.ends_with(".tar.gzip") || mt.ends_with("tar.gzip") {
            Some(Compression::Gzip)
        } else if mt.ends_with("+zstd") {
            Some(Compression::Zstd)
        } else if mt.ends_with(".tar") || mt.ends_with("layer.v1.tar") {
            Some(Compression::None)
        } else {
            None
        }
    }
}

/// Where a layer's compressed bytes come from and what they must match.
pub struct LayerJob {
    pub index: usize,
    pub source: Box<dyn Read + Send>,
    /// Registry digest and size (downloads).
    pub expected_digest: Option<(Digest, u64)>,
    /// rkt key the layer must have (stored layers).
    pub expected_key: Option<String>,
    /// The layer is a docker tar: its ACI rendition is made with this
    /// manifest, and the rendition's key is the layer's. `None`: a stored
    /// blob, keyed by its (uncompressed) bytes.
    pub aci_manifest: Option<Vec<u8>>,
    /// The docker tar comes from an older release's blob, whose key (of
    /// the uncompressed tar) it must still have.
    pub legacy_key: Option<String>,
    pub compression: Compression,
    /// Copy of the compressed bytes (downloads), fsynced.
    pub blob_out: Option<PathBuf>,
    /// The tree's rootfs (bottom layer) or this layer's staging directory.
    pub dest: PathBuf,
    pub staged: bool,
    /// The most uncompressed bytes accepted (`max_layer_bytes`).
    pub max_bytes: u64,
}

pub struct LayerDone {
    pub index: usize,
    pub key: String,
    pub compressed_size: u64,
    /// The size of the layer's ACI (what rkt records for it).
    pub aci_size: u64,
    pub unpacked: Unpacked,
}

/// Reads chunks sent by the async download task.
pub(crate) struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl ChannelReader {
    pub(crate) fn new(rx: tokio::sync::mpsc::Receiver<io::Result<Bytes>>) -> Self {
        ChannelReader { rx, current: Bytes::new() }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        let _ = self.current.split_to(n);
        Ok(n)
    }
}

/// Copies what is read through it to a file, starting writeback every few
/// MiB so the final fsync mostly waits for I/O already under way.
struct Tee<'a, R> {
    inner: &'a mut R,
    out: Option<File>,
    unsynced: usize,
}

impl<R: Read> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(f) = &mut self.out {
            f.write_all(&buf[..n])?;
            self.unsynced += n;
            if self.unsynced >= 4 << 20 {
                self.unsynced = 0;
                rkt::extract::start_writeback(f);
            }
        }
        Ok(n)
    }
}

fn mismatch_in(e: &io::Error) -> Option<String> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<Mismatch>()).map(ToString::to_string)
}

/// Runs one layer through the pipeline.
pub fn run(job: LayerJob) -> Result<LayerDone, ImageError> {
    let what = match &job.expected_digest {
        Some((d, _)) => format!("layer {d}"),
        None => format!("layer {}", job.expected_key.as_deref().unwrap_or("?")),
    };
    let algorithm = job.expected_digest.as_ref().map_or(Algorithm::Sha256, |(d, _)| d.algorithm);
    let limit = job.expected_digest.as_ref().map(|(_, s)| *s);
    let mut compressed = HashingReader::new(job.source, algorithm, limit);
    let out = match &job.blob_out {
        Some(p) => Some(File::create(p).map_err(super::io_ctx(format!("creating {}", p.display())))?),
        None => None,
    };
    let mut tee = Tee { inner: &mut compressed, out, unsynced: 0 };
    let result = (|| -> Result<(Unpacked, Digest, u64), ImageError> {
        let mut buffered = BufReader::with_capacity(256 * 1024, &mut tee);
        let mut stored_aci = false;
        let compression = match job.compression {
            Compression::Detect => {
                let head = buffered.fill_buf().map_err(|e| super::io_ctx(format!("reading {what}"))(e))?;
                stored_aci = job.aci_manifest.is_none() && rkt::layer_aci::is_aci(head);
                if head.starts_with(&[0x1f, 0x8b]) {
                    Compression::Gzip
                } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
                    Compression::Zstd
                } else {
                    Compression::None
                }
            }
            c => c,
        };
        let decoder: Box<dyn Read + '_> = match compression {
            Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
            Compression::Zstd => Box::new(
                zstd::Decoder::with_buffer(buffered)
                    .map_err(|e| super::io_ctx(format!("starting zstd for {what}"))(e))?,
            ),
            _ => Box::new(buffered),
        };
        // a docker tar's key is its rendition's (hashed by the unpacker);
        // a stored blob's, its own bytes'
        let mut plain = match (&job.aci_manifest, &job.legacy_key) {
            (Some(_), None) => HashingReader::counting(decoder, Some(job.max_bytes)),
            _ => HashingReader::new(decoder, Algorithm::Sha512, Some(job.max_bytes)),
        };
        let mut unpacker = Unpacker::new(&job.dest, job.staged);
        if let Some(m) = &job.aci_manifest {
            unpacker = unpacker.with_aci(m)?;
        } else if stored_aci {
            unpacker = unpacker.from_aci();
        }
        let unpacked = match unpacker.unpack(&mut plain) {
            Err(_) if plain.count() > job.max_bytes => {
                return Err(ImageError::Unsupported(format!(
                    "{what} is larger than {} bytes uncompressed (max_layer_bytes in the registry config)",
                    job.max_bytes
                )));
            }
            r => r?,
        };
        let (sha512, count) = plain.finish().map_err(|e| super::io_ctx(format!("decompressing {what}"))(e))?;
        Ok((unpacked, sha512, count))
    })();
    // drain what the decoder left so the digest covers every byte, and prefer
    // a digest mismatch over the decoding error it probably caused
    let drained = io::copy(&mut tee, &mut io::sink());
    let file = tee.out.take();
    let check = match drained {
        Err(e) => Err(e),
        Ok(_) => match &job.expected_digest {
            Some((d, size)) => compressed.verify(d, Some(*size)),
            None => compressed.finish().map(|_| ()),
        },
    };
    if let Err(e) = check {
        return Err(match mismatch_in(&e) {
            Some(m) => ImageError::Verify { what, detail: m },
            None => result.err().unwrap_or_else(|| super::io_ctx(format!("downloading {what}"))(e)),
        });
    }
    let (unpacked, sha512, count) = result?;
    if let Some(legacy) = &job.legacy_key
        && &cas_key(&sha512) != legacy
    {
        return Err(ImageError::Verify { what, detail: format!("stored layer tar has key {}", cas_key(&sha512)) });
    }
    let (key, aci_size) = match &unpacked.aci {
        Some((key, size)) => (key.clone(), *size),
        None => (cas_key(&sha512), count),
    };
    if let Some(expected) = &job.expected_key
        && &key != expected
    {
        return Err(ImageError::Verify { what, detail: format!("stored blob has key {key}") });
    }
    let compressed_size = match (file, &job.blob_out) {
        (Some(f), Some(p)) => {
            f.sync_all().map_err(super::io_ctx(format!("syncing {}", p.display())))?;
            f.metadata().map(|m| m.len()).unwrap_or(0)
        }
        _ => limit.unwrap_or(0),
    };
    Ok(LayerDone { index: job.index, key, compressed_size, aci_size, unpacked })
}
