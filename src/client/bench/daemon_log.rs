//! What an endpoint's own daemon says about its calls, where the bench is
//! given its log (`--daemon-log NAME=PATH`: rktlet's JSON log lines, with
//! `rktlet::stage1::teardown` at debug). Today: each StopPodSandbox's CNI
//! DEL, so that the report can say how far a stop is above that floor (the
//! kernel's veth deletion and the plugins' execs, which no runtime avoids).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

/// The message of the teardown's record of a stopped pod.
const STOPPED: &str = "pod sandbox stopped";

/// The log's length now: where the records of the calls made next begin.
pub(super) fn mark(log: &Path) -> u64 {
    std::fs::metadata(log).map_or(0, |m| m.len())
}

/// Each pod's CNI DEL as its first stop recorded it (`network_micros`: from
/// the stop's start until its network was released, so the opening of the
/// pod, about 0.1 ms, counts as the DEL's), from the records
/// written after `from`. Lines that are not JSON, or another record, are
/// passed over.
pub(super) fn cni_deletes_since(log: &Path, from: u64) -> std::io::Result<BTreeMap<String, Duration>> {
    let mut file = std::fs::File::open(log)?;
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    // (the daemon's children write to the same stderr: a stray byte costs its line only)
    Ok(cni_deletes(&String::from_utf8_lossy(&bytes)))
}

fn cni_deletes(text: &str) -> BTreeMap<String, Duration> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Ok(record) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let fields = &record["fields"];
        if fields["message"] != STOPPED {
            continue;
        }
        if let (Some(pod), Some(micros)) = (fields["pod"].as_str(), fields["network_micros"].as_u64()) {
            // the first: a RemovePodSandbox stops the pod again, its network released already
            out.entry(pod.to_string()).or_insert(Duration::from_micros(micros));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stops_cni_deletes_by_pod_from_a_mark_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("daemon.log");
        let line = |pod: &str, net: u64| {
            format!(
                r#"{{"timestamp":"t","level":"DEBUG","fields":{{"message":"pod sandbox stopped","pod":"{pod}","stop_micros":900,"network_micros":{net},"total_micros":30000}},"target":"rktlet::stage1::teardown"}}"#
            )
        };
        std::fs::write(&log, format!("{}\n", line("old", 1))).expect("write");
        let from = mark(&log);
        let more = format!(
            "{}\nnot json\n{}\n{}\n",
            line("a", 25_000),
            r#"{"fields":{"message":"pod sandbox removed","pod":"b","network_micros":5}}"#,
            line("b", 27_500) // a RemovePodSandbox stops its pod again, after the network went
        ) + &line("a", 130)
            + "\n";
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| std::io::Write::write_all(&mut f, more.as_bytes()))
            .expect("append");
        let got = cni_deletes_since(&log, from).expect("read");
        let want: BTreeMap<String, Duration> =
            [("a".to_string(), Duration::from_micros(25_000)), ("b".to_string(), Duration::from_micros(27_500))].into();
        assert_eq!(got, want);
        assert_eq!(mark(&dir.path().join("absent")), 0);
    }
}
