//! Each expected text below is worked out by hand from the rkt 1.30 rule
//! named beside it (rkt's Go source: `rkt/list.go`, `rkt/status.go`,
//! `rkt/app_list.go`, `rkt/app_status.go`, `api/v1/json.go`, Go's
//! `text/tabwriter` and `time` layouts, go-humanize's `times.go`).

use super::*;
use rkt::api_v1::MountInfo;
use std::collections::BTreeMap;

const T0: i64 = 1_800_000_000; // 2027-01-15 08:00:00 UTC

fn utc(secs: i64, nanos: u32) -> GoTime {
    GoTime { secs, nanos, offset: 0, zone: "UTC".into() }
}

fn net(name: &str, ip: Option<&str>) -> NetInfo {
    NetInfo {
        net_name: name.into(),
        net_conf: format!("/etc/cni/net.d/{name}.conf"),
        plugin_path: "/opt/cni/bin/bridge".into(),
        if_name: "eth0".into(),
        ip: ip.map(|s| s.parse().unwrap()),
        args: String::new(),
        mask: ip.map(|_| "255.255.0.0".parse().unwrap()),
    }
}

fn view(state: PodState) -> PodView {
    PodView {
        uuid: "5f0b2c3a-1d2e-4f50-8a9b-0c1d2e3f4a5b".into(),
        state,
        created: Some(utc(T0, 123_456_789)),
        started: Some(utc(T0 + 1, 500_000_000)),
        networks: vec![net("default", Some("10.1.0.2"))],
        pid: Some(4242),
        apps: Some(vec![ListApp {
            name: "0-web".into(),
            image_name: Ok("example.com/web:1.0".into()),
            image_id: "sha512-0123456789abcdef0123".into(),
        }]),
        exit_codes: vec![],
    }
}

#[test]
fn times_use_gos_layouts() {
    // defaultTimeLayout "2006-01-02 15:04:05.999 -0700 MST": milliseconds, truncated, trailing zeros cut
    assert_eq!(utc(T0, 123_456_789).rkt_layout(), "2027-01-15 08:00:00.123 +0000 UTC");
    assert_eq!(utc(T0, 120_000_000).rkt_layout(), "2027-01-15 08:00:00.12 +0000 UTC");
    assert_eq!(utc(T0, 999_999).rkt_layout(), "2027-01-15 08:00:00 +0000 UTC");
    assert_eq!(utc(T0, 0).rkt_layout(), "2027-01-15 08:00:00 +0000 UTC");
    // Time.String(): "2006-01-02 15:04:05.999999999 -0700 MST"
    assert_eq!(utc(T0, 123_456_789).go_string(), "2027-01-15 08:00:00.123456789 +0000 UTC");
    assert_eq!(utc(T0, 999_999).go_string(), "2027-01-15 08:00:00.000999999 +0000 UTC");
    // the wall clock and offset of the zone; a zone without a name repeats the offset
    let ist = GoTime { secs: T0, nanos: 0, offset: 5 * 3600 + 1800, zone: "IST".into() };
    assert_eq!(ist.rkt_layout(), "2027-01-15 13:30:00 +0530 IST");
    let west = GoTime { secs: T0, nanos: 0, offset: -(4 * 3600 + 1800), zone: String::new() };
    assert_eq!(west.rkt_layout(), "2027-01-15 03:30:00 -0430 -0430");
    assert_eq!(utc(-1, 0).rkt_layout(), "1969-12-31 23:59:59 +0000 UTC");
    assert_eq!(utc(951_782_400, 0).rkt_layout(), "2000-02-29 00:00:00 +0000 UTC");
}

#[test]
fn relative_times_are_go_humanizes() {
    // go-humanize's magnitudes: months of 30 days, years of 12 months, 18 months round to 2 years
    let ago = |secs: i64| humanize_ago(T0 - secs, T0);
    const DAY: i64 = 86_400;
    assert_eq!(ago(0), "now");
    assert_eq!(ago(1), "1 second ago");
    assert_eq!(ago(59), "59 seconds ago");
    assert_eq!(ago(60), "1 minute ago");
    assert_eq!(ago(119), "1 minute ago");
    assert_eq!(ago(239), "3 minutes ago");
    assert_eq!(ago(3600), "1 hour ago");
    assert_eq!(ago(23 * 3600), "23 hours ago");
    assert_eq!(ago(DAY), "1 day ago");
    assert_eq!(ago(6 * DAY), "6 days ago");
    assert_eq!(ago(7 * DAY), "1 week ago");
    assert_eq!(ago(29 * DAY), "4 weeks ago");
    assert_eq!(ago(30 * DAY), "1 month ago");
    assert_eq!(ago(359 * DAY), "11 months ago");
    assert_eq!(ago(360 * DAY), "1 year ago");
    assert_eq!(ago(540 * DAY), "2 years ago");
    assert_eq!(ago(3 * 360 * DAY), "3 years ago");
    assert_eq!(ago(37 * 360 * DAY), "a long while ago");
    assert_eq!(humanize_ago(T0 + 5, T0), "5 seconds from now");
}

#[test]
fn tables_pad_as_gos_tabwriter() {
    // minwidth 0, tabwidth 8, padding 1, padchar '\t': a column is (widest + 1)
    // rounded up to 8, each cell padded with as many tabs as reach it
    let rows = vec![
        vec!["a".to_string(), "12345678".into(), "last".into()],
        vec!["1234567".to_string(), "".into(), "x".into()],
    ];
    // column 0: widest 7 -> 8; column 1: widest 8 -> 9 -> 16, so "12345678" takes one tab, "" two
    assert_eq!(tabwrite(&rows), "a\t12345678\tlast\n1234567\t\t\tx\n");
    assert_eq!(tabwrite(&[]), "");
}

#[test]
fn list_prints_rkts_short_table() {
    // rkt list: UUID APP IMAGE NAME STATE CREATED STARTED NETWORKS; 8-character
    // UUIDs, humanized times, the pod's columns on its first app's row only
    let mut pod = view(PodState::Running);
    pod.apps.as_mut().unwrap().push(ListApp {
        name: "1-sidecar".into(),
        image_name: Ok("example.com/side".into()),
        image_id: "sha512-ffff".into(),
    });
    let now = T0 + 180;
    let (out, errors) = list_table(&[pod], false, false, now);
    assert_eq!(
        out,
        "UUID\t\tAPP\t\tIMAGE NAME\t\tSTATE\tCREATED\t\tSTARTED\t\tNETWORKS\n\
         5f0b2c3a\t0-web\t\texample.com/web:1.0\trunning\t3 minutes ago\t2 minutes ago\tdefault:ip4=10.1.0.2\n\
         \t\t1-sidecar\texample.com/side\t\t\t\t\t\t\n"
    );
    assert!(errors.is_empty());
}

#[test]
fn list_full_has_whole_uuids_image_ids_and_absolute_times() {
    // --full adds IMAGE ID (the id's first 19 characters) and prints defaultTimeLayout
    let mut pod = view(PodState::Exited);
    pod.networks.clear();
    let (out, _) = list_table(&[pod], true, false, T0);
    assert_eq!(
        out,
        "UUID\t\t\t\t\tAPP\tIMAGE NAME\t\tIMAGE ID\t\tSTATE\tCREATED\t\t\t\t\tSTARTED\t\t\t\tNETWORKS\n\
         5f0b2c3a-1d2e-4f50-8a9b-0c1d2e3f4a5b\t0-web\texample.com/web:1.0\tsha512-0123456789ab\texited\t\
         2027-01-15 08:00:00.123 +0000 UTC\t2027-01-15 08:00:01.5 +0000 UTC\t\n"
    );
}

#[test]
fn list_rows_for_pods_without_apps_or_image_manifests() {
    // a pod without a manifest is one row of "-"; an unreadable image manifest
    // shows "--" and is reported after the table
    let mut preparing = view(PodState::Preparing);
    preparing.uuid = "00000000-0000-4000-8000-000000000000".into();
    preparing.created = None;
    preparing.started = None;
    preparing.networks.clear();
    preparing.apps = None;
    let mut broken = view(PodState::Prepared);
    broken.started = None;
    broken.networks.clear();
    broken.apps.as_mut().unwrap()[0].image_name = Err("no manifest".into());
    // CREATED is 16 wide (+1, rounded to 24): "10 seconds ago" takes two tabs
    let (out, errors) = list_table(&[preparing, broken], false, true, T0 + 10);
    assert_eq!(
        out,
        "00000000\t-\t-\tpreparing\ta long while ago\t\t\n\
         5f0b2c3a\t0-web\t--\tprepared\t10 seconds ago\t\t\t\n"
    );
    assert_eq!(errors.len(), 1);
    assert!(errors[0].contains("5f0b2c3a-1d2e-4f50-8a9b-0c1d2e3f4a5b") && errors[0].contains("no manifest"));
    // the logger still ends an empty table's line
    assert_eq!(list_table(&[], false, true, T0).0, "\n");
}

#[test]
fn status_prints_rkts_key_value_lines() {
    // running: state, created, started, networks, pid, exited=false, no app lines
    let mut pod = view(PodState::Running);
    pod.networks.push(net("second", Some("fd00::5")));
    assert_eq!(
        status_text(&pod),
        "state=running\n\
         created=2027-01-15 08:00:00.123 +0000 UTC\n\
         started=2027-01-15 08:00:01.5 +0000 UTC\n\
         networks=default:ip4=10.1.0.2, second:ip4=fd00::5\n\
         pid=4242\n\
         exited=false\n"
    );
    // exited: networks still, exited=true, each recorded exit as app-NAME=CODE
    let mut pod = view(PodState::Exited);
    pod.exit_codes = vec![("0-web".into(), 0), ("1-side".into(), 137)];
    assert_eq!(
        status_text(&pod),
        "state=exited\n\
         created=2027-01-15 08:00:00.123 +0000 UTC\n\
         started=2027-01-15 08:00:01.5 +0000 UTC\n\
         networks=default:ip4=10.1.0.2\n\
         pid=4242\n\
         exited=true\n\
         app-0-web=0\n\
         app-1-side=137\n"
    );
    // exited garbage: no networks line, still exited
    let mut pod = view(PodState::ExitedGarbage);
    pod.pid = None;
    assert_eq!(
        status_text(&pod),
        "state=exited garbage\n\
         created=2027-01-15 08:00:00.123 +0000 UTC\n\
         started=2027-01-15 08:00:01.5 +0000 UTC\n\
         exited=true\n"
    );
    // preparing: Go's zero time for created, nothing after it
    let mut pod = view(PodState::Preparing);
    pod.created = None;
    pod.started = None;
    assert_eq!(status_text(&pod), "state=preparing\ncreated=0001-01-01 00:00:00 +0000 UTC\n");
    // a network without an address prints Go's nil IP
    assert_eq!(fmt_nets(&[net("n", None)]), "n:ip4=<nil>");
}

fn app(state: &str) -> AppInfo {
    AppInfo {
        name: "0-web".into(),
        state: state.into(),
        created_at: T0 * 1_000_000_000 + 123_456_789,
        started_at: (T0 + 1) * 1_000_000_000,
        image_id: "sha512-abc".into(),
        ..Default::default()
    }
}

#[test]
fn app_list_prints_name_and_state() {
    // rkt app list: NAME STATE through the same tabwriter
    let mut side = app("exited");
    side.name = "1-sidecar-long-name".into();
    let apps = [app("running"), side];
    assert_eq!(app_list_table(&apps, false), "NAME\t\t\tSTATE\n0-web\t\t\trunning\n1-sidecar-long-name\texited\n");
    assert_eq!(app_list_table(&apps[..1], true), "0-web\trunning\n");
    assert_eq!(app_list_table(&[], true), "\n");
}

#[test]
fn app_status_prints_rkts_lines_then_rktlets() {
    // running: name, state, image_id, the times reached (Time.String()), no exit_code
    assert_eq!(
        app_status_text(&app("running"), |ns| utc(ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000) as u32)),
        "name=0-web\nstate=running\nimage_id=sha512-abc\n\
         created_at=2027-01-15 08:00:00.123456789 +0000 UTC\n\
         started_at=2027-01-15 08:00:01 +0000 UTC\n"
    );
    // exited: finished_at and exit_code; each list is "key=" then the list
    // then an empty line (three log messages); rktlet's reason after
    let mut a = app("exited");
    a.finished_at = (T0 + 2) * 1_000_000_000;
    a.exit_code = 2;
    a.reason = "Error".into();
    a.mounts = vec![
        MountInfo {
            name: "v0".into(),
            container_path: "/data".into(),
            host_path: "/srv/data".into(),
            read_only: true,
            ..Default::default()
        },
        MountInfo { name: "v1".into(), container_path: "/x".into(), host_path: "/tmp/x".into(), ..Default::default() },
    ];
    a.user_annotations = BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())]);
    a.user_labels = BTreeMap::from([("app".into(), "web".into())]);
    assert_eq!(
        app_status_text(&a, |ns| utc(ns / 1_000_000_000, (ns % 1_000_000_000) as u32)),
        "name=0-web\nstate=exited\nimage_id=sha512-abc\n\
         created_at=2027-01-15 08:00:00.123456789 +0000 UTC\n\
         started_at=2027-01-15 08:00:01 +0000 UTC\n\
         finished_at=2027-01-15 08:00:02 +0000 UTC\n\
         exit_code=2\n\
         mounts=\n/srv/data:/data:(read_only:true),/tmp/x:/x:(read_only:false)\n\n\
         user_annotations=\na:1,b:2\n\n\
         user_labels=\napp:web\n\n\
         reason=Error\n"
    );
}

#[test]
fn app_json_is_rkts_v1_app_then_rktlets_fields() {
    // v1.App: name, state, created_at, started_at, finished_at, exit_code (pointers:
    // absent when unset), image_id, mounts/user_annotations/user_labels (omitempty)
    let running = app("running");
    assert_eq!(
        go_json(&running, Format::Json).unwrap(),
        "{\"name\":\"0-web\",\"state\":\"running\",\"created_at\":1800000000123456789,\
         \"started_at\":1800000001000000000,\"image_id\":\"sha512-abc\"}\n"
    );
    let mut exited = app("exited");
    exited.exit_code = 0;
    exited.finished_at = 1;
    exited.reason = "Completed".into();
    exited.user_labels = BTreeMap::from([("k".into(), "<v&>".into())]);
    let text = go_json(&exited, Format::Json).unwrap();
    assert_eq!(
        text,
        "{\"name\":\"0-web\",\"state\":\"exited\",\"created_at\":1800000000123456789,\
         \"started_at\":1800000001000000000,\"finished_at\":1,\"exit_code\":0,\"image_id\":\"sha512-abc\",\
         \"user_labels\":{\"k\":\"\\u003cv\\u0026\\u003e\"},\"reason\":\"Completed\"}\n"
    );
    // what the exec design reads back is what was printed
    let back: AppInfo = serde_json::from_str(&text).unwrap();
    assert_eq!(back, exited);
}

#[test]
fn pod_json_is_rkts_v1_pod_then_rktlets_fields() {
    // v1.Pod: name, state, networks (netinfo's seven fields), app_names, apps,
    // created_at and started_at in seconds, user maps (all omitempty but name and state)
    let mut a = app("running");
    a.created_at = T0 * 1_000_000_000;
    let info = PodInfo {
        name: "5f0b2c3a-1d2e-4f50-8a9b-0c1d2e3f4a5b".into(),
        state: "running".into(),
        networks: vec![net("default", Some("10.1.0.2"))],
        app_names: vec!["0-web".into()],
        apps: vec![a],
        created_at: Some(T0 as u64),
        started_at: Some(T0 as u64 + 1),
        user_labels: BTreeMap::from([("io.kubernetes.pod.name".into(), "web".into())]),
        ready: true,
        pid: Some(4242),
        ..Default::default()
    };
    let text = go_json(&info, Format::Json).unwrap();
    assert_eq!(
        text,
        "{\"name\":\"5f0b2c3a-1d2e-4f50-8a9b-0c1d2e3f4a5b\",\"state\":\"running\",\
         \"networks\":[{\"netName\":\"default\",\"netConf\":\"/etc/cni/net.d/default.conf\",\
         \"pluginPath\":\"/opt/cni/bin/bridge\",\"ifName\":\"eth0\",\"ip\":\"10.1.0.2\",\"args\":\"\",\
         \"mask\":\"255.255.0.0\"}],\"app_names\":[\"0-web\"],\"apps\":[{\"name\":\"0-web\",\
         \"state\":\"running\",\"created_at\":1800000000000000000,\"started_at\":1800000001000000000,\
         \"image_id\":\"sha512-abc\"}],\"created_at\":1800000000,\"started_at\":1800000001,\
         \"user_labels\":{\"io.kubernetes.pod.name\":\"web\"},\"ready\":true,\"pid\":4242,\"annotations\":{}}\n"
    );
    assert_eq!(serde_json::from_str::<PodInfo>(&text).unwrap(), info);
    // a pod not started yet has no started_at, networks or apps
    let bare = PodInfo { name: "u".into(), state: "prepared".into(), created_at: Some(5), ..Default::default() };
    assert_eq!(
        go_json(&bare, Format::Json).unwrap(),
        "{\"name\":\"u\",\"state\":\"prepared\",\"created_at\":5,\"ready\":false,\"pid\":null,\"annotations\":{}}\n"
    );
    // MarshalIndent(v, "", "\t")
    assert_eq!(
        go_json(&bare, Format::JsonPretty).unwrap(),
        "{\n\t\"name\": \"u\",\n\t\"state\": \"prepared\",\n\t\"created_at\": 5,\n\t\"ready\": false,\n\
         \t\"pid\": null,\n\t\"annotations\": {}\n}\n"
    );
    // no pod: Go marshals the nil slice
    assert_eq!(list_json(&[], Format::Json).unwrap(), "null\n");
    assert_eq!(serde_json::from_str::<Option<Vec<PodInfo>>>("null").unwrap(), None);
}

#[test]
fn formats_are_rkts_and_table() {
    assert_eq!(Format::parse("").unwrap(), Format::Tabbed);
    assert_eq!(Format::parse("table").unwrap(), Format::Tabbed);
    assert_eq!(Format::parse("json").unwrap(), Format::Json);
    assert_eq!(Format::parse("json-pretty").unwrap(), Format::JsonPretty);
    assert!(Format::parse("yaml").is_err());
}
