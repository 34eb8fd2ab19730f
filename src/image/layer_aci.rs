//! The layers' ACIs written in the background: a pull stores a docker
//! layer's compressed download in `cas/rktlet-layers/<key>`
//! ([`rkt::layer_aci::pending`]) and its key; this writes the ACI
//! ([`rkt::layer_aci::convert`]) from it, checks it against the key and
//! stores it as the layer's blob. The rendition itself is the rkt crate's
//! (`rkt::layer_aci`); what stays here is the store's side: the key's lock,
//! a pull work directory, the crash point and the thread.

use super::{ImageError, io_ctx};
use rkt::cas::Cas;
use rkt::layer_aci::{HashOut, PENDING_DIR, convert, decompressed, pending};
use std::fs;
use std::io::{self, Write};

/// Writes the ACI of every layer still waiting as its compressed download
/// (`cas/rktlet-layers/`); returns how many. Each is made in `cas/tmp`
/// (a pull work directory), checked against its key, synced, and renamed
/// to `cas/blob/...`; then the download is removed. A layer whose ACI
/// does not come out with its key keeps its download (and is logged).
pub fn convert_pending(cas: &Cas) -> usize {
    let mut n = 0;
    let dir = cas.root().join(PENDING_DIR);
    let mut keys: Vec<String> = fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|k| rkt::digest::is_cas_key(k))
        .collect();
    keys.sort();
    for key in keys {
        match convert_one(cas, &key) {
            Ok(true) => n += 1,
            Ok(false) => {}
            Err(e) => tracing::warn!(layer = %key, error = %e, "cannot write a layer's ACI (renders use its download)"),
        }
    }
    if n > 0 {
        // rkt's database lists a layer once its blob is there
        if let Err(e) = cas.update_index(|_| ()) {
            tracing::warn!(error = %e, "rkt's image database not updated");
        }
    }
    n
}

/// [`convert_pending`] for one layer; false when there was nothing to do.
pub(crate) fn convert_one(cas: &Cas, key: &str) -> Result<bool, ImageError> {
    let src = pending(cas, key);
    let _lock = cas.lock_image(key).map_err(io_ctx(format!("locking {key}")))?;
    if !src.exists() {
        return Ok(false);
    }
    let blob = cas.blob(key);
    if blob.exists() {
        fs::remove_file(&src).map_err(io_ctx(format!("removing {}", src.display())))?;
        return Ok(true);
    }
    // stored by a pull that never committed: left as a blob of such a pull is
    // (`image verify` notes it; a pull of the layer uses it)
    if !cas.read_index().map(|i| i.aci(key).is_some()).unwrap_or(false) {
        return Ok(false);
    }
    let manifest_path = cas.image_manifest(key);
    let manifest = fs::read(&manifest_path).map_err(io_ctx(format!("reading {}", manifest_path.display())))?;
    let work = super::workdir::WorkDir::new(cas)?;
    let tmp = work.path().join("aci");
    let file = fs::File::create(&tmp).map_err(io_ctx(format!("creating {}", tmp.display())))?;
    let input = fs::File::open(&src).map_err(io_ctx(format!("opening {}", src.display())))?;
    let out = Tee { file: io::BufWriter::with_capacity(256 * 1024, file), hash: HashOut::new() };
    let out = convert(decompressed(input).map_err(io_ctx(format!("reading {}", src.display())))?, &manifest, out)
        .map_err(io_ctx(format!("converting {}", src.display())))?;
    let Tee { file, hash } = out;
    let (got, _) = hash.key();
    if got != key {
        return Err(ImageError::Verify { what: format!("layer {key}"), detail: format!("its ACI has key {got}") });
    }
    let file = file.into_inner().map_err(|e| io_ctx(format!("writing {}", tmp.display()))(e.into_error()))?;
    file.sync_all().map_err(io_ctx(format!("syncing {}", tmp.display())))?;
    drop(file);
    let parent = blob.parent().unwrap_or(&blob).to_path_buf();
    fs::create_dir_all(&parent).map_err(io_ctx(format!("creating {}", parent.display())))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644));
    }
    // a crash here leaves the ACI in the work dir (removed at the next
    // start, which writes it again) and the download in place
    crate::base::fault::point("layer-aci-before-rename");
    fs::rename(&tmp, &blob).map_err(io_ctx(format!("storing {}", blob.display())))?;
    rkt::fs::sync_dir(&parent).map_err(io_ctx("syncing the blob store"))?;
    // the layer was removed meanwhile: its blob goes too
    let indexed = cas.read_index().map(|i| i.aci(key).is_some()).unwrap_or(true);
    if !indexed {
        let _ = fs::remove_file(&blob);
    }
    match fs::remove_file(&src) {
        // a removal of the image took the download meanwhile (it does not wait for this lock)
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_ctx(format!("removing {}", src.display()))(e)),
        _ => Ok(true),
    }
}

struct Tee {
    file: io::BufWriter<fs::File>,
    hash: HashOut,
}

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write_all(buf)?;
        self.hash.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Converts the waiting layers on a thread of its own (at nice 10, as the
/// tree sync), after the pull that stored them; `tree::finish_settling`
/// waits for it too.
pub(crate) fn convert_later(cas: &Cas) {
    if std::env::var_os(rkt::tree::SYNC_LATER_ENV).is_some() {
        return;
    }
    let cas = cas.clone();
    rkt::tree::background("layer-aci", move || {
        convert_pending(&cas);
    });
}
