//! What every tar entry of a layer goes through, whichever way the layer is
//! unpacked or rewritten: its path made root-relative (`..` refused), the
//! errors that refuse it, and a reader that completes a cut-short last block.

use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

/// Why a layer (or an ACI) could not be unpacked or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// An entry that would land outside the root, or is otherwise refused.
    #[error("refusing layer: entry {entry:?} {reason}")]
    Unsafe {
        /// The entry's path as the tar names it.
        entry: String,
        /// Why it is refused.
        reason: String,
    },
    /// The tar stream itself is broken or cut short.
    #[error("reading the layer tar: {0}")]
    Tar(io::Error),
    /// A file system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error of the call.
        source: io::Error,
    },
}

pub(super) fn unsafe_entry(entry: &Path, reason: impl Into<String>) -> ExtractError {
    ExtractError::Unsafe { entry: entry.display().to_string(), reason: reason.into() }
}

/// Normalizes an entry path to root-relative components; `..` is refused.
pub(crate) fn clean(path: &Path) -> Result<PathBuf, ExtractError> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir => return Err(unsafe_entry(path, "contains '..'")),
            Component::Prefix(_) => return Err(unsafe_entry(path, "has a path prefix")),
        }
    }
    Ok(out)
}

/// A tar stream whose last block may be cut short: some writers (umoci
/// among them) end a layer right after the last file's data, without its
/// padding to 512 bytes or the two zero blocks that end an archive. Go's
/// archive/tar, containerd and Docker read such layers; the tar crate fails
/// on the missing padding ("unexpected EOF during skip"). At the end of the
/// stream this reader adds the zeros that complete the last block, no more:
/// a stream cut inside an entry's data still fails (and a layer's digest is
/// checked before it is unpacked).
pub(super) struct PadLastBlock<R> {
    inner: R,
    read: u64,
    pad: usize,
    ended: bool,
}

impl<R> PadLastBlock<R> {
    pub(super) fn new(inner: R) -> Self {
        PadLastBlock { inner, read: 0, pad: 0, ended: false }
    }
}

impl<R: Read> Read for PadLastBlock<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.ended {
            let n = self.inner.read(buf)?;
            if n > 0 || buf.is_empty() {
                self.read += n as u64;
                return Ok(n);
            }
            self.ended = true;
            self.pad = ((512 - self.read % 512) % 512) as usize;
        }
        let n = self.pad.min(buf.len());
        buf[..n].fill(0);
        self.pad -= n;
        Ok(n)
    }
}
