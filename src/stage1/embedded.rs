//! Programs the daemon carries inside its binary (appexec, the log
//! writer: static, built by build.rs) and writes into the data directory to
//! be exec'd or bound into pods.

use rkt::pod::DataDir;
use sha2::Digest;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// `<prefix>-<digest>`: the name of this build's copy of `binary`.
pub(crate) fn name(prefix: &str, binary: &[u8]) -> String {
    let digest = sha2::Sha256::digest(binary);
    format!("{prefix}-{}", digest[..8].iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The host copy of `binary` at `<data>/<subdir>/<name>`, named by its
/// digest: written (complete and synced before it gets its name) once per
/// data directory and build of the daemon; a copy that differs from the
/// embedded program is replaced, and other builds' copies in `subdir` go
/// (pods and processes using them keep theirs).
pub(crate) fn host_copy(data: &DataDir, subdir: &str, name: &str, binary: &'static [u8]) -> io::Result<PathBuf> {
    let dir = data.root().join(subdir);
    let path = dir.join(name);
    // checked once per daemon and program: every pod boot uses them
    static CHECKED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    if checked.contains(&path) && path.exists() {
        return Ok(path);
    }
    if std::fs::read(&path).is_ok_and(|bytes| bytes == binary) {
        checked.push(path.clone());
        crate::base::program_pages::release_bytes(binary);
        return Ok(path);
    }
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(".tmp-{}", uuid::Uuid::new_v4().simple()));
    let mut file = std::fs::OpenOptions::new().create_new(true).write(true).mode(0o555).open(&tmp)?;
    io::Write::write_all(&mut file, binary)?;
    file.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    checked.push(path.clone());
    // read once to be hashed, compared and written: its pages need not stay mapped
    crate::base::program_pages::release_bytes(binary);
    let prefix = name.rsplit_once('-').map_or(name, |(p, _)| p);
    for old in std::fs::read_dir(&dir)?.flatten() {
        let file = old.file_name().to_string_lossy().into_owned();
        if file.starts_with(&format!("{prefix}-")) && file != name {
            let _ = std::fs::remove_file(old.path());
        }
    }
    Ok(path)
}
