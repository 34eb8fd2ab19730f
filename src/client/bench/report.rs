//! Benchmark results: percentiles per operation and endpoint, and their
//! renderings (Markdown table, JSON, SVG bar chart, and the README's short
//! performance section, which is rendered from `docs/bench.json` only).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A generated section of the README: the lines `<!-- STEM:begin -->` and
/// `<!-- STEM:end -->` around what `docs/STEM.json` renders to. `bench`
/// is the cgroupfs host's run, `bench-node` the systemd node's
/// (`NODE=container ./scripts/bench.sh`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Section {
    stem: String,
}

impl Section {
    /// The section of a bench json, by its file stem (`bench` for none).
    pub(crate) fn of(bench_json: &Path) -> Section {
        let stem = bench_json.file_stem().and_then(|s| s.to_str()).unwrap_or("bench");
        Section { stem: stem.to_string() }
    }

    /// The host run's section (`docs/bench.json`).
    #[cfg(test)]
    pub(crate) fn host() -> Section {
        Section { stem: "bench".into() }
    }

    pub(crate) fn begin(&self) -> String {
        format!("<!-- {}:begin -->", self.stem)
    }

    pub(crate) fn end(&self) -> String {
        format!("<!-- {}:end -->", self.stem)
    }

    /// The command that measures this section's figures.
    fn command(&self) -> &'static str {
        if self.stem == "bench-node" { "NODE=container ./scripts/bench.sh" } else { "./scripts/bench.sh" }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RenderError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a bench report: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error("{path} has no section between a line `{begin}` and a later line `{end}`")]
    Markers { path: PathBuf, begin: String, end: String },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Percentiles of one operation on one endpoint, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stats {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub n: usize,
}

impl Stats {
    /// Nearest-rank percentiles; `None` without samples.
    pub(crate) fn of(samples: &[Duration]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let rank = |p: f64| ms[((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
        Some(Stats { p50: rank(0.50), p90: rank(0.90), p99: rank(0.99), n: ms.len() })
    }
}

/// Memory of an endpoint's daemon and of the pods it runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Memory {
    /// Daemon RSS in MiB by number of running pods.
    pub daemon_rss_mib: BTreeMap<usize, f64>,
    /// Mean proportional set size of one pod's processes, MiB.
    pub pod_pss_mib: Option<f64>,
    /// Mean number of processes per pod.
    pub pod_processes: Option<f64>,
}

/// One density run on one endpoint (`density`): pods with one container
/// each, started and removed `concurrency` at a time, measured at rest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Density {
    pub pods: usize,
    pub concurrency: usize,
    /// RunPodSandbox + CreateContainer + StartContainer of one pod.
    pub start: Option<Stats>,
    /// Pods started over the time until the last one ran.
    pub pods_per_s: f64,
    /// StopPodSandbox + RemovePodSandbox of one pod.
    pub stop_remove: Option<Stats>,
    /// Until every pod was removed.
    pub teardown_s: f64,
    /// The node's memory per pod that no reclaim gives back, MiB: the
    /// growth of anonymous memory and of the kernel's (`kernel_kib_per_pod`).
    pub node_mib_per_pod: Option<f64>,
    /// The node's anonymous memory (AnonPages) per pod, MiB: the processes'
    /// private memory, without the page cache their PSS also counts.
    #[serde(default)]
    pub anon_mib_per_pod: Option<f64>,
    /// Kernel memory per pod by kind (/proc/meminfo deltas), KiB.
    pub kernel_kib_per_pod: BTreeMap<String, f64>,
    /// PSS per pod of the processes the pods brought, by command name, MiB.
    pub pss_mib_per_pod: BTreeMap<String, f64>,
    /// The daemon's RSS with every pod running, MiB.
    pub daemon_rss_mib: Option<f64>,
    /// What the node still held after the teardown that it did not before.
    pub left_behind: Vec<String>,
}

/// Everything one run measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Report {
    /// Endpoint names in column order; the first is the baseline of the ratios.
    pub endpoints: Vec<String>,
    /// Operation names in row order.
    pub operations: Vec<String>,
    /// operation -> endpoint -> stats.
    pub results: BTreeMap<String, BTreeMap<String, Stats>>,
    pub memory: BTreeMap<String, Memory>,
    /// endpoint -> its density runs, by pod count.
    #[serde(default)]
    pub density: BTreeMap<String, Vec<Density>>,
    /// Facts about the run (machine, image, rounds).
    pub context: BTreeMap<String, String>,
}

impl Report {
    pub(crate) fn add(&mut self, endpoint: &str, operation: &str, samples: &[Duration]) {
        let Some(stats) = Stats::of(samples) else { return };
        if !self.operations.iter().any(|o| o == operation) {
            self.operations.push(operation.to_string());
        }
        self.results.entry(operation.to_string()).or_default().insert(endpoint.to_string(), stats);
    }

    fn get(&self, operation: &str, endpoint: &str) -> Option<&Stats> {
        self.results.get(operation).and_then(|m| m.get(endpoint))
    }

    /// p50 of `endpoint` over p50 of the baseline.
    pub(crate) fn ratio(&self, operation: &str, endpoint: &str) -> Option<f64> {
        let base = self.get(operation, self.endpoints.first()?)?;
        let other = self.get(operation, endpoint)?;
        (base.p50 > 0.0).then(|| other.p50 / base.p50)
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads a report written by [`Report::to_json`] (`bench.json`).
    pub(crate) fn read(path: &Path) -> Result<Report, RenderError> {
        let text = std::fs::read_to_string(path).map_err(|source| RenderError::Read { path: path.into(), source })?;
        serde_json::from_str(&text).map_err(|source| RenderError::Parse { path: path.into(), source })
    }

    /// The README's performance section: the p50 of each operation per
    /// endpoint (list calls at the largest pod count only), the ratios to
    /// the first endpoint, the sample counts, the memory at the smallest and
    /// largest pod count, and the run's facts. Every figure comes from the
    /// report; the full table is `to_markdown`'s (docs/bench.md).
    pub(crate) fn to_readme_section(&self, section: &Section) -> String {
        let mut out = String::new();
        let base = self.endpoints.first().cloned().unwrap_or_default();
        let (stem, command) = (&section.stem, section.command());
        let _ = writeln!(
            out,
            "Generated from [docs/{stem}.json](docs/{stem}.json) by `{command}` \
             (`rktlet bench --render-only docs/{stem}.json --readme README.md` renders it again \
             without measuring); a hand edit fails the tests. p50 per CRI call in ms; ratios are \
             p50 over {base}'s; n is the samples per endpoint. p90, p99 and every pod count: \
             [docs/{stem}.md](docs/{stem}.md).\n"
        );
        let _ = write!(out, "| operation |");
        for e in &self.endpoints {
            let _ = write!(out, " {e} |");
        }
        for e in self.endpoints.iter().skip(1) {
            let _ = write!(out, " {e} / {base} |");
        }
        out.push_str(" n |\n");
        out.push_str(&"|---".repeat(self.endpoints.len() * 2 + 1));
        out.push_str("|\n");
        let largest = self.operations.iter().filter_map(|op| list_size(op)).max();
        for op in self.operations.iter().filter(|op| list_size(op).is_none_or(|n| Some(n) == largest)) {
            let _ = write!(out, "| {op} |");
            let mut counts = Vec::new();
            for e in &self.endpoints {
                match self.get(op, e) {
                    Some(s) => {
                        let _ = write!(out, " {} |", fmt_ms(s.p50));
                        counts.push(s.n.to_string());
                    }
                    None => {
                        out.push_str(" n/a |");
                        counts.push("-".into());
                    }
                }
            }
            for e in self.endpoints.iter().skip(1) {
                match self.ratio(op, e) {
                    Some(r) => {
                        let _ = write!(out, " {r:.1}x |");
                    }
                    None => out.push_str(" |"),
                }
            }
            let present: Vec<&String> = counts.iter().filter(|c| *c != "-").collect();
            let n = if present.windows(2).all(|w| w[0] == w[1]) {
                present.first().map(|c| c.to_string()).unwrap_or_default()
            } else {
                counts.join(" / ")
            };
            let _ = writeln!(out, " {n} |");
        }
        if !self.memory.is_empty() {
            self.memory_head(&mut out, "memory (MiB)");
            let counts: std::collections::BTreeSet<usize> =
                self.memory.values().flat_map(|m| m.daemon_rss_mib.keys().copied()).collect();
            let ends: std::collections::BTreeSet<usize> =
                counts.first().into_iter().chain(counts.last()).copied().collect();
            for n in ends {
                self.memory_row(&mut out, &format!("daemon RSS, {n} pods"), &|m| m.daemon_rss_mib.get(&n).copied());
            }
            self.memory_row(&mut out, "one pod's processes, PSS", &|m| m.pod_pss_mib);
            self.memory_row(&mut out, "processes per pod (count)", &|m| m.pod_processes);
        }
        self.density_tables(&mut out, false);
        if !self.context.is_empty() {
            out.push('\n');
            for (k, v) in &self.context {
                let _ = writeln!(out, "- {k}: {v}");
            }
        }
        out
    }

    /// A row of a memory table: `label`, then what `pick` reads of each
    /// endpoint's memory (`n/a` where there is nothing).
    fn memory_row(&self, out: &mut String, label: &str, pick: &dyn Fn(&Memory) -> Option<f64>) {
        let _ = write!(out, "| {label} |");
        for e in &self.endpoints {
            match self.memory.get(e).and_then(pick) {
                Some(v) => {
                    let _ = write!(out, " {v:.1} |");
                }
                None => out.push_str(" n/a |"),
            }
        }
        out.push('\n');
    }

    /// A table per density pod count, a column per endpoint that ran it;
    /// ratios to the first such endpoint in the later columns. `full` adds
    /// the breakdowns (by process, kernel memory) and what was left behind.
    fn density_tables(&self, out: &mut String, full: bool) {
        let names: Vec<&String> = self.endpoints.iter().filter(|e| self.density.contains_key(*e)).collect();
        let counts: std::collections::BTreeSet<usize> =
            self.density.values().flat_map(|runs| runs.iter().map(|r| r.pods)).collect();
        for n in counts {
            let runs: Vec<Option<&Density>> =
                names.iter().map(|e| self.density.get(*e).and_then(|r| r.iter().find(|r| r.pods == n))).collect();
            let at_once = runs.iter().flatten().map(|r| r.concurrency).next().unwrap_or(1);
            let _ = write!(out, "\n| {n} pods, {at_once} started at once |");
            for e in &names {
                let _ = write!(out, " {e} |");
            }
            out.push('\n');
            out.push_str(&"|---".repeat(1 + names.len()));
            out.push_str("|\n");
            // a row of one figure per endpoint, with its ratio to the first
            let figure = |out: &mut String, label: &str, pick: &dyn Fn(&Density) -> Option<f64>, unit: &str| {
                let _ = write!(out, "| {label} |");
                let base = runs.first().copied().flatten().and_then(pick);
                for (i, run) in runs.iter().enumerate() {
                    match (run.and_then(pick), base) {
                        (Some(v), Some(b)) if i > 0 && b > 0.0 => {
                            let _ = write!(out, " {v:.1}{unit} ({:.2}x) |", v / b);
                        }
                        (Some(v), _) => {
                            let _ = write!(out, " {v:.1}{unit} |");
                        }
                        (None, _) => out.push_str(" n/a |"),
                    }
                }
                out.push('\n');
            };
            let stats = |out: &mut String, label: &str, pick: &dyn Fn(&Density) -> Option<Stats>| {
                let _ = write!(out, "| {label} |");
                for run in &runs {
                    match run.and_then(pick) {
                        Some(s) => {
                            let _ = write!(out, " {} / {} ({}) |", fmt_ms(s.p50), fmt_ms(s.p99), s.n);
                        }
                        None => out.push_str(" n/a |"),
                    }
                }
                out.push('\n');
            };
            stats(out, "pod + container start, p50 / p99 ms (samples)", &|r| r.start);
            figure(out, "start: p99 over p50", &|r| r.start.map(|s| s.p99 / s.p50.max(1e-9)), "");
            figure(out, "pods per second until all ran", &|r| Some(r.pods_per_s), "");
            figure(out, "node memory per idle pod (MiB): anonymous + kernel", &|r| r.node_mib_per_pod, "");
            figure(out, "processes per pod, PSS (MiB)", &|r| Some(r.pss_mib_per_pod.values().sum()), "");
            figure(out, "anonymous memory per pod (MiB)", &|r| r.anon_mib_per_pod, "");
            figure(
                out,
                "kernel memory per pod (MiB)",
                &|r| Some(r.kernel_kib_per_pod.values().sum::<f64>() / 1024.0),
                "",
            );
            figure(out, "daemon RSS (MiB)", &|r| r.daemon_rss_mib, "");
            stats(out, "pod stop + remove, p50 / p99 ms (samples)", &|r| r.stop_remove);
            figure(out, "all stopped and removed (s)", &|r| Some(r.teardown_s), "");
            let listed = |out: &mut String, label: &str, pick: &dyn Fn(&Density) -> String| {
                let _ = write!(out, "| {label} |");
                for run in &runs {
                    let _ = write!(out, " {} |", run.map(pick).unwrap_or_else(|| "n/a".into()));
                }
                out.push('\n');
            };
            listed(out, "left behind", &|r| {
                if r.left_behind.is_empty() { "nothing".into() } else { r.left_behind.join(", ") }
            });
            if full {
                listed(out, "PSS per pod by process (MiB)", &|r| breakdown(&r.pss_mib_per_pod, 0.05));
                listed(out, "kernel memory per pod (KiB)", &|r| breakdown(&r.kernel_kib_per_pod, 1.0));
            }
        }
    }

    /// The head of a memory table: `title`, then a column per endpoint.
    fn memory_head(&self, out: &mut String, title: &str) {
        let _ = write!(out, "\n| {title} |");
        for e in &self.endpoints {
            let _ = write!(out, " {e} |");
        }
        out.push('\n');
        out.push_str(&"|---".repeat(1 + self.endpoints.len()));
        out.push_str("|\n");
    }

    pub(crate) fn to_markdown(&self) -> String {
        let mut out = String::new();
        let base = self.endpoints.first().cloned().unwrap_or_default();
        let _ = write!(out, "| operation |");
        for e in &self.endpoints {
            let _ = write!(out, " {e} p50 / p90 / p99 (ms) |");
        }
        for e in self.endpoints.iter().skip(1) {
            let _ = write!(out, " {e} / {base} (p50) |");
        }
        out.push('\n');
        out.push_str(&"|---".repeat(1 + self.endpoints.len() * 2 - 1));
        out.push_str("|\n");
        for op in &self.operations {
            let _ = write!(out, "| {op} |");
            for e in &self.endpoints {
                match self.get(op, e) {
                    Some(s) => {
                        let _ = write!(out, " **{}** / {} / {} |", fmt_ms(s.p50), fmt_ms(s.p90), fmt_ms(s.p99));
                    }
                    None => out.push_str(" n/a |"),
                }
            }
            for e in self.endpoints.iter().skip(1) {
                match self.ratio(op, e) {
                    Some(r) => {
                        let _ = write!(out, " {r:.1}x |");
                    }
                    None => out.push_str(" |"),
                }
            }
            out.push('\n');
        }
        if !self.memory.is_empty() {
            self.memory_head(&mut out, "memory");
            let counts: std::collections::BTreeSet<usize> =
                self.memory.values().flat_map(|m| m.daemon_rss_mib.keys().copied()).collect();
            for n in counts {
                let label = format!("daemon RSS, {n} pods (MiB)");
                self.memory_row(&mut out, &label, &|m| m.daemon_rss_mib.get(&n).copied());
            }
            self.memory_row(&mut out, "per-pod processes, PSS (MiB)", &|m| m.pod_pss_mib);
            self.memory_row(&mut out, "per-pod process count", &|m| m.pod_processes);
        }
        self.density_tables(&mut out, true);
        if !self.context.is_empty() {
            out.push('\n');
            for (k, v) in &self.context {
                let _ = writeln!(out, "- {k}: {v}");
            }
        }
        out
    }

    /// A horizontal grouped bar chart of the p50s, one group per operation,
    /// on a logarithmic millisecond axis (the designs differ by orders of
    /// magnitude).
    pub(crate) fn to_svg(&self) -> String {
        const COLORS: [&str; 4] = ["#2b7bba", "#d95f02", "#7570b3", "#1b9e77"];
        let (label_w, plot_w, bar_h, gap, top) = (230.0, 560.0, 13.0, 12.0, 50.0);
        let values: Vec<f64> = self.results.values().flat_map(|m| m.values().map(|s| s.p50)).collect();
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min).max(0.001);
        let hi = values.iter().copied().fold(0.0, f64::max).max(lo * 10.0);
        let (lo_dec, hi_dec) = (lo.log10().floor(), hi.log10().ceil());
        let x = |v: f64| label_w + (v.max(lo).log10() - lo_dec) / (hi_dec - lo_dec) * plot_w;
        let group_h = bar_h * self.endpoints.len() as f64 + gap;
        let height = top + group_h * self.operations.len() as f64 + 40.0;
        let width = label_w + plot_w + 90.0;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{label_w}" y="16" font-size="13" font-weight="bold">CRI call latency, p50 (ms, log scale; shorter is faster)</text>"#
        );
        for (i, e) in self.endpoints.iter().enumerate() {
            let lx = label_w + i as f64 * 150.0;
            let _ = writeln!(
                s,
                r#"<rect x="{lx}" y="26" width="10" height="10" fill="{}"/><text x="{}" y="35">{}</text>"#,
                COLORS[i % COLORS.len()],
                lx + 14.0,
                xml(e)
            );
        }
        let mut d = lo_dec;
        while d <= hi_dec {
            let v = 10f64.powf(d);
            let gx = x(v);
            let _ = writeln!(
                s,
                r##"<line x1="{gx:.1}" y1="{top}" x2="{gx:.1}" y2="{:.1}" stroke="#ccc"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                height - 30.0,
                height - 16.0,
                fmt_ms(v)
            );
            d += 1.0;
        }
        for (g, op) in self.operations.iter().enumerate() {
            let gy = top + g as f64 * group_h;
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                label_w - 6.0,
                gy + bar_h * self.endpoints.len() as f64 / 2.0 + 4.0,
                xml(op)
            );
            for (i, e) in self.endpoints.iter().enumerate() {
                let Some(st) = self.get(op, e) else { continue };
                let y = gy + i as f64 * bar_h;
                let w = (x(st.p50) - label_w).max(1.0);
                let _ = writeln!(
                    s,
                    r#"<rect x="{label_w}" y="{y:.1}" width="{w:.1}" height="{:.1}" fill="{}"><title>{} {}: {} ms</title></rect><text x="{:.1}" y="{:.1}" font-size="9">{}</text>"#,
                    bar_h - 2.0,
                    COLORS[i % COLORS.len()],
                    xml(e),
                    xml(op),
                    fmt_ms(st.p50),
                    label_w + w + 3.0,
                    y + bar_h - 4.0,
                    fmt_ms(st.p50)
                );
            }
        }
        s.push_str("</svg>\n");
        s
    }
}

/// The pod or container count of a list operation (`ListPodSandbox (50 pods)`).
fn list_size(op: &str) -> Option<usize> {
    let inner = op.strip_suffix(')')?.rsplit_once('(')?.1;
    inner.split_once(' ')?.0.parse().ok()
}

/// The text between `section`'s begin and end lines.
#[cfg(test)]
pub(crate) fn readme_section<'a>(doc: &'a str, section: &Section) -> Option<&'a str> {
    let (start, end) = section_bounds(doc, section)?;
    Some(&doc[start..end])
}

/// Byte range of the section's body: after the begin line, up to the end line.
fn section_bounds(doc: &str, section: &Section) -> Option<(usize, usize)> {
    let (begin, end) = (section.begin(), section.end());
    let mut offset = 0;
    let mut start = None;
    for line in doc.split_inclusive('\n') {
        let text = line.trim_end_matches('\n');
        match start {
            None if text == begin => start = Some(offset + line.len()),
            Some(s) if text == end => return Some((s, offset)),
            _ => {}
        }
        offset += line.len();
    }
    None
}

/// Renders the README section of `bench_json` ([`Section::of`]); with
/// `readme`, replaces that section in the file (nothing is written when its
/// markers are missing) and returns `None`, else returns the section.
pub(crate) fn render_readme(bench_json: &Path, readme: Option<&Path>) -> Result<Option<String>, RenderError> {
    let which = Section::of(bench_json);
    let section = Report::read(bench_json)?.to_readme_section(&which);
    let Some(path) = readme else { return Ok(Some(section)) };
    let doc = std::fs::read_to_string(path).map_err(|source| RenderError::Read { path: path.into(), source })?;
    let (start, end) = section_bounds(&doc, &which).ok_or_else(|| RenderError::Markers {
        path: path.into(),
        begin: which.begin(),
        end: which.end(),
    })?;
    let new = format!("{}{section}{}", &doc[..start], &doc[end..]);
    if new != doc {
        std::fs::write(path, new).map_err(|source| RenderError::Write { path: path.into(), source })?;
    }
    Ok(None)
}

/// `name figure, ...`, largest first, those under `floor` left out.
fn breakdown(parts: &BTreeMap<String, f64>, floor: f64) -> String {
    let mut parts: Vec<(&String, f64)> = parts.iter().map(|(k, v)| (k, *v)).filter(|(_, v)| *v >= floor).collect();
    parts.sort_by(|a, b| b.1.total_cmp(&a.1));
    parts.iter().map(|(k, v)| format!("{k} {v:.1}")).collect::<Vec<_>>().join(", ")
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Milliseconds with three significant digits.
pub(crate) fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    #[test]
    fn nearest_rank_percentiles() {
        let s = Stats::of(&ms(&(1..=100).collect::<Vec<_>>())).expect("stats");
        assert_eq!((s.p50, s.p90, s.p99, s.n), (50.0, 90.0, 99.0, 100));
        let one = Stats::of(&ms(&[7])).expect("stats");
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert!(Stats::of(&[]).is_none());
    }

    #[test]
    fn table_has_a_row_per_operation_and_ratios() {
        let mut r = Report { endpoints: vec!["in-process".into(), "exec-mode".into()], ..Default::default() };
        r.add("in-process", "StartContainer", &ms(&[10, 10, 12]));
        r.add("exec-mode", "StartContainer", &ms(&[40, 40, 50]));
        r.add("exec-mode", "ExecSync", &ms(&[30]));
        assert_eq!(r.ratio("StartContainer", "exec-mode"), Some(4.0));
        let md = r.to_markdown();
        assert!(md.contains("| StartContainer | **10.0** / 12.0 / 12.0 | **40.0** / 50.0 / 50.0 | 4.0x |"), "{md}");
        assert!(md.contains("| ExecSync | n/a | **30.0** / 30.0 / 30.0 | |"), "{md}");
        let svg = r.to_svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<title>").count(), 3);
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).expect("json");
        assert_eq!(json["results"]["StartContainer"]["exec-mode"]["p50"], 40.0);
    }

    #[test]
    fn density_tables_give_ratios_breakdowns_and_leaks() {
        let mut r =
            Report { endpoints: vec!["in-process".into(), "pool".into(), "containerd".into()], ..Default::default() };
        let run = |mib: f64, pods_per_s: f64, left: Vec<String>| Density {
            pods: 20,
            concurrency: 4,
            start: Stats::of(&ms(&[100, 200, 300, 400])),
            pods_per_s,
            node_mib_per_pod: Some(mib),
            pss_mib_per_pod: [("systemd".to_string(), 2.0), ("sleep".to_string(), 0.01)].into(),
            kernel_kib_per_pod: [("page tables".to_string(), 120.0), ("shmem/tmpfs".to_string(), -4.0)].into(),
            left_behind: left,
            ..Default::default()
        };
        r.density.insert("in-process".into(), vec![run(2.0, 10.0, vec![])]);
        r.density.insert("containerd".into(), vec![run(3.0, 5.0, vec!["1 mounts".into()])]);
        let md = r.to_markdown();
        // no column for an endpoint without a density run
        assert!(md.contains("| 20 pods, 4 started at once | in-process | containerd |"), "{md}");
        assert!(md.contains("| node memory per idle pod (MiB): anonymous + kernel | 2.0 | 3.0 (1.50x) |"), "{md}");
        assert!(md.contains("| pods per second until all ran | 10.0 | 5.0 (0.50x) |"), "{md}");
        assert!(md.contains("| pod + container start, p50 / p99 ms (samples) | 200 / 400 (4) |"), "{md}");
        assert!(md.contains("| left behind | nothing | 1 mounts |"), "{md}");
        // breakdowns: largest first, what is below the floor (or negative) left out
        assert!(md.contains("| PSS per pod by process (MiB) | systemd 2.0 |"), "{md}");
        assert!(md.contains("| kernel memory per pod (KiB) | page tables 120.0 |"), "{md}");
        let readme = r.to_readme_section(&Section::host());
        assert!(readme.contains("| left behind | nothing | 1 mounts |") && !readme.contains("by process"), "{readme}");
        let back: Report = serde_json::from_str(&r.to_json()).expect("json");
        assert_eq!(back.density, r.density);
        // a report written before density runs existed still reads
        let old: Report =
            serde_json::from_str(r#"{"endpoints":[],"operations":[],"results":{},"memory":{},"context":{}}"#)
                .expect("old json");
        assert!(old.density.is_empty());
    }

    #[test]
    fn readme_section_keeps_the_largest_list_size_and_counts() {
        let mut r = Report { endpoints: vec!["a".into(), "b".into()], ..Default::default() };
        r.add("a", "Version", &ms(&[1; 10]));
        r.add("b", "Version", &ms(&[2; 10]));
        r.add("a", "ListPodSandbox (10 pods)", &ms(&[3]));
        r.add("a", "ListPodSandbox (100 pods)", &ms(&[4, 4]));
        r.add("b", "ListPodSandbox (100 pods)", &ms(&[8]));
        let md = r.to_readme_section(&Section::host());
        assert!(md.contains("| Version | 1.00 | 2.00 | 2.0x | 10 |"), "{md}");
        assert!(md.contains("| ListPodSandbox (100 pods) | 4.00 | 8.00 | 2.0x | 2 / 1 |"), "{md}");
        assert!(!md.contains("(10 pods)"), "{md}");
    }

    #[test]
    fn readme_section_is_replaced_between_its_markers_only() {
        let host = Section::host();
        let (begin, end) = (host.begin(), host.end());
        let doc = format!("intro\n{begin}\nold\n{end}\nrest\n");
        assert_eq!(readme_section(&doc, &host), Some("old\n"));
        assert_eq!(readme_section("no markers\n", &host), None);
        assert_eq!(readme_section(&format!("{end}\n{begin}\n"), &host), None);
        let dir = tempfile::tempdir().expect("tempdir");
        let json = dir.path().join("bench.json");
        let mut r = Report { endpoints: vec!["a".into()], ..Default::default() };
        r.add("a", "Version", &ms(&[1]));
        std::fs::write(&json, r.to_json()).expect("write json");
        let readme = dir.path().join("README.md");
        std::fs::write(&readme, &doc).expect("write readme");
        assert_eq!(render_readme(&json, Some(&readme)).expect("render"), None);
        let new = std::fs::read_to_string(&readme).expect("read readme");
        assert!(new.starts_with(&format!("intro\n{begin}\nGenerated from ")), "{new}");
        assert!(new.ends_with(&format!("\n{end}\nrest\n")), "{new}");
        assert_eq!(readme_section(&new, &host), Some(r.to_readme_section(&host).as_str()));
        std::fs::write(&readme, "no markers\n").expect("write readme");
        assert!(matches!(render_readme(&json, Some(&readme)), Err(RenderError::Markers { .. })));
        assert_eq!(std::fs::read_to_string(&readme).expect("read readme"), "no markers\n");
    }

    /// README.md's performance sections are exactly what `docs/bench.json`
    /// (the cgroupfs host) and `docs/bench-node.json` (the systemd node)
    /// render to: a figure edited by hand there fails here.
    #[test]
    fn readme_performance_sections_are_generated_from_docs_bench_json() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
        for stem in ["bench", "bench-node"] {
            let json = root.join(format!("docs/{stem}.json"));
            let which = Section::of(&json);
            let report = Report::read(&json).unwrap_or_else(|e| panic!("{e}"));
            let section = readme_section(&readme, &which)
                .unwrap_or_else(|| panic!("README.md has no {} ... {} lines", which.begin(), which.end()));
            assert_eq!(
                section,
                report.to_readme_section(&which),
                "README.md's {stem} section differs from docs/{stem}.json's rendering: \
                 run `rktlet bench --render-only docs/{stem}.json --readme README.md`"
            );
        }
    }
}
