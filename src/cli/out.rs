//! How rkt 1.30 prints `list`, `status`, `app list` and `app status`, as
//! pure functions of an already-read view, so a script written for rkt reads
//! rktlet's output unchanged. The rules carried over from rkt (its Go code is
//! the reference; the behaviour is restated here):
//!
//! - tables go through Go's `text/tabwriter` with minimum width 0, tab width
//!   8, padding 1 and tabs as the padding character ([`tabwrite`]);
//! - absolute times use the layout `2006-01-02 15:04:05.999 -0700 MST`
//!   (milliseconds, trailing zeros and a bare dot dropped, the local zone)
//!   and app times Go's `Time.String()` (the same with nanoseconds); times a
//!   pod has not reached print as Go's zero time ([`GoTime`]);
//! - relative times are go-humanize's (`3 minutes ago`, [`humanize_ago`]);
//! - networks print as `NAME:ip4=IP` joined by `, `;
//! - every message ends in exactly one newline (Go's `log.Logger`), so a
//!   `Printf("mounts=")` is a line of its own;
//! - JSON is Go's `encoding/json`: struct fields in order, map keys sorted,
//!   `<`, `>`, `&`, U+2028 and U+2029 escaped; `json-pretty` indents by a tab.

use rkt::api_v1::{AppInfo, PodInfo};
use rkt::net_info::NetInfo;
use rkt::pod::PodState;

/// The output formats rkt's `--format` takes (rktlet also takes `table`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Tabbed,
    Json,
    JsonPretty,
}

impl Format {
    /// Parses `--format`: empty (rkt's default), `table`/`tabbed`, `json`, `json-pretty`.
    pub(crate) fn parse(s: &str) -> Result<Format, String> {
        match s {
            "" | "table" | "tabbed" => Ok(Format::Tabbed),
            "json" => Ok(Format::Json),
            "json-pretty" => Ok(Format::JsonPretty),
            other => Err(format!("Invalid format option: {other} (use json, json-pretty or table)")),
        }
    }
}

/// An instant with the zone it is shown in, as Go's `time.Time` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GoTime {
    /// Seconds since the epoch.
    pub secs: i64,
    pub nanos: u32,
    /// Seconds east of UTC.
    pub offset: i32,
    /// The zone's abbreviation (`UTC`, `CET`); empty when it has none.
    pub zone: String,
}

/// Go's zero `time.Time`, as rkt prints a time the pod has not reached.
pub(crate) const GO_ZERO_TIME: &str = "0001-01-01 00:00:00 +0000 UTC";

impl GoTime {
    /// `unix_ns` in the local zone (the `TZ` variable or `/etc/localtime`, as Go reads them).
    pub(crate) fn local(unix_ns: i64) -> GoTime {
        let secs = unix_ns.div_euclid(1_000_000_000);
        let nanos = unix_ns.rem_euclid(1_000_000_000) as u32;
        let (offset, zone) = local_zone(secs);
        GoTime { secs, nanos, offset, zone }
    }

    /// Go's layout `2006-01-02 15:04:05.<frac> -0700 MST` with `frac_digits`
    /// nines: the fraction truncated, its trailing zeros (and a bare dot) dropped.
    pub(crate) fn format(&self, frac_digits: u32) -> String {
        let local = self.secs + i64::from(self.offset);
        let (y, m, d) = civil_from_days(local.div_euclid(86_400));
        let sod = local.rem_euclid(86_400);
        let mut out = format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", sod / 3600, sod / 60 % 60, sod % 60);
        let frac = self.nanos / 10u32.pow(9 - frac_digits.min(9));
        let digits = format!("{frac:0width$}", width = frac_digits as usize);
        let digits = digits.trim_end_matches('0');
        if !digits.is_empty() {
            out.push('.');
            out.push_str(digits);
        }
        let sign = if self.offset < 0 { '-' } else { '+' };
        let off = self.offset.unsigned_abs();
        let numeric = format!("{sign}{:02}{:02}", off / 3600, off / 60 % 60);
        out.push(' ');
        out.push_str(&numeric);
        out.push(' ');
        // Go prints the numeric offset again when the zone has no abbreviation
        out.push_str(if self.zone.is_empty() { &numeric } else { &self.zone });
        out
    }

    /// rkt's `defaultTimeLayout` (`list --full`, `status`).
    pub(crate) fn rkt_layout(&self) -> String {
        self.format(3)
    }

    /// Go's `Time.String()` of a `time.Unix(0, ns)` (`app status`).
    pub(crate) fn go_string(&self) -> String {
        self.format(9)
    }
}

/// Year, month, day of a day count since 1970-01-01 (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The local zone's offset and abbreviation at `secs`, from the C library.
fn local_zone(secs: i64) -> (i32, String) {
    let t: libc::time_t = secs;
    // SAFETY: `tm` is plain data that localtime_r fills; both pointers are valid for the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: as above; localtime_r is the thread-safe variant.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return (0, "UTC".into());
    }
    let zone = if tm.tm_zone.is_null() {
        String::new()
    } else {
        // SAFETY: tm_zone points at a NUL-terminated name owned by the C library's zone data.
        unsafe { std::ffi::CStr::from_ptr(tm.tm_zone) }.to_string_lossy().into_owned()
    };
    (tm.tm_gmtoff as i32, zone)
}

/// go-humanize's `Time`: how long before `now_secs` `then_secs` was
/// (`now`, `1 second ago`, `5 minutes ago`, `1 year ago`, `a long while ago`;
/// `... from now` for the future). Months are 30 days, years 12 months.
pub(crate) fn humanize_ago(then_secs: i64, now_secs: i64) -> String {
    const MINUTE: i64 = 60;
    const HOUR: i64 = 60 * MINUTE;
    const DAY: i64 = 24 * HOUR;
    const WEEK: i64 = 7 * DAY;
    const MONTH: i64 = 30 * DAY;
    const YEAR: i64 = 12 * MONTH;
    const LONG_TIME: i64 = 37 * YEAR;
    let (diff, label) =
        if then_secs > now_secs { (then_secs - now_secs, "from now") } else { (now_secs - then_secs, "ago") };
    // (upper bound, text with {n} for the count, divisor)
    let magnitudes: [(i64, &str, i64); 17] = [
        (1, "now", 1),
        (2, "1 second", 1),
        (MINUTE, "{n} seconds", 1),
        (2 * MINUTE, "1 minute", 1),
        (HOUR, "{n} minutes", MINUTE),
        (2 * HOUR, "1 hour", 1),
        (DAY, "{n} hours", HOUR),
        (2 * DAY, "1 day", 1),
        (WEEK, "{n} days", DAY),
        (2 * WEEK, "1 week", 1),
        (MONTH, "{n} weeks", WEEK),
        (2 * MONTH, "1 month", 1),
        (YEAR, "{n} months", MONTH),
        (18 * MONTH, "1 year", 1),
        (2 * YEAR, "2 years", 1),
        (LONG_TIME, "{n} years", YEAR),
        (i64::MAX, "a long while", 1),
    ];
    let (_, text, div) = magnitudes.iter().find(|(bound, _, _)| *bound > diff).copied().unwrap_or(magnitudes[16]);
    if text == "now" {
        return text.into();
    }
    format!("{} {label}", text.replace("{n}", &(diff / div).to_string()))
}

/// Go's `text/tabwriter` as rkt sets it up (min width 0, tab width 8,
/// padding 1, padding by tabs, no flags) over rows of cells: every cell
/// but a row's last is padded with tabs to its column's width (the widest
/// cell plus one, rounded up to a multiple of 8). Rows must have equal length.
pub(crate) fn tabwrite(rows: &[Vec<String>]) -> String {
    const TAB_WIDTH: usize = 8;
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns.saturating_sub(1))
        .map(|c| {
            let widest = rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0);
            (widest + 1).div_ceil(TAB_WIDTH) * TAB_WIDTH
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        for (c, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if let Some(width) = widths.get(c).filter(|_| c + 1 < row.len()) {
                let tabs = (width - cell.chars().count()).div_ceil(TAB_WIDTH);
                out.extend(std::iter::repeat_n('\t', tabs));
            }
        }
        out.push('\n');
    }
    out
}

/// rkt's networks column and `networks=` value: `NAME:ip4=IP` joined by `, `
/// (`<nil>` for a network without an address, as Go prints a nil IP).
pub(crate) fn fmt_nets(nets: &[NetInfo]) -> String {
    let one = |n: &NetInfo| format!("{}:ip4={}", n.net_name, n.ip.map_or("<nil>".to_string(), |ip| ip.to_string()));
    nets.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// One app row of `rkt list`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ListApp {
    pub name: String,
    /// The image manifest's name, `:version` appended when it has that
    /// label; `Err` when the app's image manifest cannot be read.
    pub image_name: Result<String, String>,
    /// `sha512-...`.
    pub image_id: String,
}

/// What `rkt list` and `rkt status` read of a pod.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodView {
    pub uuid: String,
    pub state: PodState,
    /// `None` before the pod is prepared (rkt's zero time).
    pub created: Option<GoTime>,
    /// `None` until it ran.
    pub started: Option<GoTime>,
    pub networks: Vec<NetInfo>,
    /// From `pid`, else `ppid`.
    pub pid: Option<i32>,
    /// `None` where rkt does not expect a manifest (preparing, aborted prepare, deleting).
    pub apps: Option<Vec<ListApp>>,
    /// Recorded exit codes, in manifest order.
    pub exit_codes: Vec<(String, i32)>,
}

/// `rkt list`'s table: one row per app, the pod's columns on its first;
/// short form: 8-character UUIDs and relative times; `full`: whole UUIDs,
/// image ids (19 characters) and absolute times. Returns the table and the
/// problems rkt reports after it (on stderr).
pub(crate) fn list_table(pods: &[PodView], full: bool, no_legend: bool, now_secs: i64) -> (String, Vec<String>) {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut errors = Vec::new();
    if !no_legend {
        let head: &[&str] = if full {
            &["UUID", "APP", "IMAGE NAME", "IMAGE ID", "STATE", "CREATED", "STARTED", "NETWORKS"]
        } else {
            &["UUID", "APP", "IMAGE NAME", "STATE", "CREATED", "STARTED", "NETWORKS"]
        };
        rows.push(head.iter().map(|s| s.to_string()).collect());
    }
    let when = |t: &GoTime| if full { t.rkt_layout() } else { humanize_ago(t.secs, now_secs) };
    for pod in pods {
        let created = match &pod.created {
            Some(t) => when(t),
            // Go's zero time: year 1
            None if full => GO_ZERO_TIME.to_string(),
            None => "a long while ago".to_string(),
        };
        let mut first = [
            if full { pod.uuid.clone() } else { pod.uuid.chars().take(8).collect() },
            pod.state.as_str().to_string(),
            created,
            pod.started.as_ref().map(when).unwrap_or_default(),
            fmt_nets(&pod.networks),
        ];
        let apps = pod.apps.as_deref().unwrap_or_default();
        let placeholder = [ListApp { name: "-".into(), image_name: Ok("-".into()), image_id: "-".into() }];
        let apps = if apps.is_empty() { &placeholder[..] } else { apps };
        for app in apps {
            let [uuid, state, created, started, nets] = first.clone();
            let image_name = app.image_name.clone().unwrap_or_else(|e| {
                errors.push(format!("pod {} ImageManifest could not be loaded: {e}", pod.uuid));
                "--".into()
            });
            let mut row = vec![uuid, app.name.clone(), image_name];
            if full {
                row.push(app.image_id.chars().take(19).collect());
            }
            row.extend([state, created, started, nets]);
            rows.push(row);
            // the pod's columns only on its first row
            first = Default::default();
        }
    }
    (logged(tabwrite(&rows)), errors)
}

/// What rkt's logger prints for a message: an empty one still ends the line.
fn logged(text: String) -> String {
    if text.is_empty() { "\n".into() } else { text }
}

/// `rkt status`'s `key=value` lines: `state`, `created`, `started` once it
/// ran, `networks` while running or exited, and for a running or finished
/// pod `pid` (when known), `exited` and, once not running, `app-NAME=CODE`
/// for each app with a recorded exit.
pub(crate) fn status_text(pod: &PodView) -> String {
    let mut out = format!("state={}\n", pod.state);
    let created = pod.created.as_ref().map_or(GO_ZERO_TIME.to_string(), GoTime::rkt_layout);
    out.push_str(&format!("created={created}\n"));
    if let Some(started) = &pod.started {
        out.push_str(&format!("started={}\n", started.rkt_layout()));
    }
    if matches!(pod.state, PodState::Running | PodState::Exited) {
        out.push_str(&format!("networks={}\n", fmt_nets(&pod.networks)));
    }
    use PodState::*;
    if !matches!(pod.state, Running | Deleting | ExitedDeleting | Exited | ExitedGarbage) {
        return out;
    }
    if let Some(pid) = pod.pid {
        out.push_str(&format!("pid={pid}\n"));
    }
    out.push_str(&format!("exited={}\n", matches!(pod.state, Exited | ExitedGarbage)));
    if pod.state != Running {
        for (app, code) in &pod.exit_codes {
            out.push_str(&format!("app-{app}={code}\n"));
        }
    }
    out
}

/// `rkt app list`'s table: NAME and STATE.
pub(crate) fn app_list_table(apps: &[AppInfo], no_legend: bool) -> String {
    let mut rows = Vec::new();
    if !no_legend {
        rows.push(vec!["NAME".to_string(), "STATE".to_string()]);
    }
    rows.extend(apps.iter().map(|a| vec![a.name.clone(), a.state.clone()]));
    logged(tabwrite(&rows))
}

/// `rkt app status`'s `key=value` lines (`zone` places the times); then
/// rktlet's own: `reason`, `message`, the usage of a running app.
pub(crate) fn app_status_text(app: &AppInfo, zone: impl Fn(i64) -> GoTime) -> String {
    let mut out = format!("name={}\nstate={}\nimage_id={}\n", app.name, app.state, app.image_id);
    for (key, ns) in [("created_at", app.created_at), ("started_at", app.started_at), ("finished_at", app.finished_at)]
    {
        if ns != 0 {
            out.push_str(&format!("{key}={}\n", zone(ns).go_string()));
        }
    }
    if app.state == "exited" {
        out.push_str(&format!("exit_code={}\n", app.exit_code));
    }
    // rkt prints the key, then the list, then an empty line, each its own message
    let mut list = |key: &str, items: Vec<String>| {
        if !items.is_empty() {
            out.push_str(&format!("{key}=\n{}\n\n", items.join(",")));
        }
    };
    let mounts = app.mounts.iter().map(|m| format!("{}:{}:(read_only:{})", m.host_path, m.container_path, m.read_only));
    list("mounts", mounts.collect());
    list("user_annotations", app.user_annotations.iter().map(|(k, v)| format!("{k}:{v}")).collect());
    list("user_labels", app.user_labels.iter().map(|(k, v)| format!("{k}:{v}")).collect());
    if !app.reason.is_empty() {
        out.push_str(&format!("reason={}\n", app.reason));
    }
    if !app.message.is_empty() {
        out.push_str(&format!("message={}\n", app.message.replace('\n', " ")));
    }
    if let Some(u) = &app.usage {
        let opt = |x: Option<u64>| x.map_or("-".to_string(), |n| n.to_string());
        for (key, v) in [
            ("cpu_total_ns", u.cpu_total_ns),
            ("memory_usage_bytes", u.memory_usage_bytes),
            ("memory_working_set_bytes", u.memory_working_set_bytes),
            ("memory_rss_bytes", u.memory_rss_bytes),
            ("writable_layer_bytes", u.writable_layer_bytes),
            ("writable_layer_inodes", u.writable_layer_inodes),
        ] {
            out.push_str(&format!("{key}={}\n", opt(v)));
        }
    }
    out
}

/// Go's `json.Marshal` (or `MarshalIndent` with a tab for `JsonPretty`) of
/// `v`, followed by the newline rkt's logger adds.
pub(crate) fn go_json<T: serde::Serialize>(v: &T, format: Format) -> Result<String, String> {
    let text = if format == Format::JsonPretty {
        let mut buf = Vec::new();
        let mut ser =
            serde_json::Serializer::with_formatter(&mut buf, serde_json::ser::PrettyFormatter::with_indent(b"\t"));
        v.serialize(&mut ser).map_err(|e| e.to_string())?;
        String::from_utf8(buf).map_err(|e| e.to_string())?
    } else {
        serde_json::to_string(v).map_err(|e| e.to_string())?
    };
    // these characters only occur inside strings, where Go writes them escaped
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('\n');
    Ok(out)
}

/// `rkt list --format=json`: Go's nil slice when there is no pod (`null`).
pub(crate) fn list_json(pods: &[PodInfo], format: Format) -> Result<String, String> {
    if pods.is_empty() { Ok("null\n".into()) } else { go_json(&pods, format) }
}

#[cfg(test)]
mod tests;
