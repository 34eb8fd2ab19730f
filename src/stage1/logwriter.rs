//! The log writer program (the `logwriter` crate's, built static by
//! build.rs) as the sandbox process execs it for a pod: a copy in the data
//! directory, `logwriter/logwriter-<digest>`, written by the daemon before
//! it starts a pod.

use rkt::pod::DataDir;
use std::io;
use std::path::PathBuf;

/// The program, built static (glibc linked in) by build.rs.
const BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/logwriter"));

/// `logwriter-<hash>`: this build's copy's name, computed by build.rs (the
/// sandbox process, which looks for it at every pod start, need not hash
/// the program).
const NAME: &str = env!("RKTLET_LOGWRITER_NAME");

/// Where this build's copy is, written or not.
pub(crate) fn installed(data: &DataDir) -> PathBuf {
    data.root().join("logwriter").join(NAME)
}

/// Writes the host copy of the program, once per data directory and build
/// (other builds' copies go; a writer running one keeps it).
pub(crate) fn host_copy(data: &DataDir) -> io::Result<PathBuf> {
    super::embedded::host_copy(data, "logwriter", NAME, BINARY)
}
