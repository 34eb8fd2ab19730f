//! Real networking tests (root): namespaces, Debian's CNI plugins from
//! `/usr/lib/cni`, a bridge, iptables. Every test uses its own network name,
//! bridge (`rkt` + random hex) and /24 (10.200-249.x.0), and an IPAM data dir
//! in a temp dir, so tests and other users of this machine do not collide;
//! guards undo the CNI ADD, the netns and the bridge even when a test fails.

use super::cni::{CniError, CniRequest, Network, NetworkConfig, PortMapping, Protocol};
use super::netns::{self, Netns};
use std::fs;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const CNI_BIN: &str = "/usr/lib/cni";

fn random_hex(n: usize) -> String {
    uuid::Uuid::new_v4().simple().to_string()[..n].to_string()
}

fn mounted(path: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let canon = fs::canonicalize(path.parent().expect("parent")).expect("canon").join(path.file_name().expect("name"));
    info.lines().any(|l| l.split(' ').nth(4) == Some(canon.to_str().expect("utf8")))
}

/// A private network for one test: bridge, /24, IPAM dir, conf and bin dirs.
struct TestNet {
    dir: tempfile::TempDir,
    name: String,
    bridge: String,
    /// The first three octets of the /24.
    net24: String,
}

impl TestNet {
    fn new() -> TestNet {
        let bytes = *uuid::Uuid::new_v4().as_bytes();
        let hex = random_hex(6);
        TestNet {
            dir: tempfile::tempdir().expect("tempdir"),
            name: format!("rktlet-test-{hex}"),
            bridge: format!("rkt{hex}"),
            net24: format!("10.{}.{}", 200 + bytes[0] % 50, bytes[1]),
        }
    }

    fn ipam_dir(&self) -> PathBuf {
        self.dir.path().join("ipam")
    }

    /// bridge (masquerading) + host-local (+ `extra` plugin objects) as a 1.0.0 conflist.
    fn conflist(&self, extra: &str) -> String {
        self.conflist_masq(extra, true)
    }

    fn conflist_masq(&self, extra: &str, masq: bool) -> String {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":[
              {{"type":"bridge","bridge":"{bridge}","isGateway":true,"ipMasq":{masq},
                "ipam":{{"type":"host-local","dataDir":"{ipam}","ranges":[[{{"subnet":"{net}.0/24"}}]],
                         "routes":[{{"dst":"0.0.0.0/0"}}]}}}}{extra}]}}"#,
            name = self.name,
            bridge = self.bridge,
            ipam = self.ipam_dir().display(),
            net = self.net24,
        )
    }

    fn network(&self, conflist: &str, bin_dirs: Vec<PathBuf>) -> Network {
        let path = self.dir.path().join("10-test.conflist");
        fs::write(&path, conflist).expect("write conflist");
        let config = NetworkConfig::parse(&path, conflist.as_bytes().to_vec()).expect("parse conflist");
        Network::new(config, bin_dirs)
    }

    /// The IPs host-local has handed out for this network.
    fn allocated(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(self.ipam_dir().join(&self.name)) else { return Vec::new() };
        entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| n.parse::<IpAddr>().is_ok()).collect()
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        // The bridge plugin never deletes its bridge.
        let _ = Command::new("ip").args(["link", "del", &self.bridge]).stderr(std::process::Stdio::null()).status();
    }
}

/// A netns with a CNI request for it; DELs and removes the netns on drop.
struct TestPod {
    netns: Netns,
    req: CniRequest,
    net: Network,
    added: bool,
}

impl TestPod {
    fn new(net: &Network, cache: &Path) -> TestPod {
        let id = format!("rktlet-test-{}", random_hex(16));
        let netns = Netns::create(&format!("rktlet-test-{}", random_hex(12))).expect("create netns");
        let mut req = CniRequest::new(&id, netns.path(), &cache.join(&id));
        req.pod_name = "web".into();
        req.pod_namespace = "default".into();
        req.pod_uid = id.clone();
        TestPod { netns, req, net: net.clone(), added: false }
    }

    async fn add(&mut self) -> Result<super::cni::CniResult, CniError> {
        self.added = true;
        self.net.add(&self.req).await
    }

    async fn del(&mut self) {
        self.net.del(&self.req).await.expect("DEL");
        self.added = false;
    }
}

impl Drop for TestPod {
    fn drop(&mut self) {
        if self.added {
            let (net, req) = (self.net.clone(), self.req.clone());
            // Drop runs inside the test's runtime: DEL on a thread with its own.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                rt.block_on(net.del(&req))
            })
            .join();
        }
        let _ = self.netns.remove();
    }
}

/// No iptables rule of the host still names this container.
fn iptables_mentions(container_id: &str) -> bool {
    let out = Command::new("iptables-save").output().expect("iptables-save");
    String::from_utf8_lossy(&out.stdout).contains(container_id)
}

/// A TCP server in `netns` on `addr` answering "pod" until dropped.
struct PodServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PodServer {
    fn start(netns: &Netns, addr: SocketAddr) -> PodServer {
        // The socket belongs to the netns it was made in, whatever thread uses it later.
        let listener = netns.run(move || TcpListener::bind(addr)).expect("run").expect("bind in netns");
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.write_all(b"pod");
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        PodServer { stop, thread: Some(thread) }
    }
}

impl Drop for PodServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn fetch(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// The host's first non-loopback IPv4 address outside the test bridges.
fn host_ipv4() -> Ipv4Addr {
    nix::ifaddrs::getifaddrs()
        .expect("getifaddrs")
        .filter(|i| !i.interface_name.starts_with("rkt") && !i.interface_name.starts_with("lo"))
        .find_map(|i| i.address.and_then(|a| a.as_sockaddr_in().map(|s| s.ip())))
        .expect("a host IPv4 address")
}

#[test]
fn netns_create_enter_remove() {
    let name = format!("rktlet-test-{}", random_hex(12));
    let ns = Netns::create(&name).expect("create");
    let path = ns.path().to_path_buf();
    assert_eq!(path, Path::new(netns::NETNS_RUN_DIR).join(&name));
    assert!(mounted(&path), "{} is not mounted", path.display());
    assert!(netns::is_netns(&path));
    let host_ino = fs::metadata("/proc/self/ns/net").map(|m| std::os::unix::fs::MetadataExt::ino(&m)).expect("host");
    assert_ne!(ns.inode().expect("inode"), host_ino, "a new netns has its own inode");
    // The calling thread did not move: it still sees the host's namespace.
    assert_eq!(
        fs::metadata("/proc/thread-self/ns/net").map(|m| std::os::unix::fs::MetadataExt::ino(&m)).ok(),
        Some(host_ino)
    );
    assert!(matches!(Netns::create(&name), Err(netns::NetnsError::Sys { what: "create", .. })), "names are exclusive");

    let ifs = ns.interfaces().expect("interfaces");
    assert_eq!(ifs.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["lo"]);
    assert!(!ifs[0].up && ifs[0].addrs.is_empty());
    ns.set_link_up("lo").expect("lo up");
    let lo = ns.interfaces().expect("interfaces").remove(0);
    assert!(lo.up);
    assert!(lo.addrs.contains(&(IpAddr::V4(Ipv4Addr::LOCALHOST), 8)), "{lo:?}");
    assert!(ns.set_link_up("eth9").is_err());
    let opened = Netns::open(&path).expect("open");
    assert_eq!(opened.inode().expect("inode"), ns.inode().expect("inode"));

    ns.remove().expect("remove");
    assert!(!path.exists() && !mounted(&path));
    ns.remove().expect("remove is idempotent");
    assert!(matches!(Netns::open(&path), Err(netns::NetnsError::NotNetns(_))));
}

#[tokio::test]
async fn bridge_add_reach_hostport_del() {
    let tn = TestNet::new();
    let portmap = r#",{"type":"portmap","capabilities":{"portMappings":true},"snat":true}"#;
    let net = tn.network(&tn.conflist(portmap), vec![PathBuf::from("/opt/cni/bin"), PathBuf::from(CNI_BIN)]);
    let mut pod = TestPod::new(&net, tn.dir.path());
    let host_port = 20000 + u16::from_str_radix(&random_hex(4), 16).expect("hex") % 20000;
    pod.req.port_mappings =
        vec![PortMapping { host_port, container_port: 8080, protocol: Protocol::Tcp, host_ip: String::new() }];

    let result = pod.add().await.expect("ADD");
    let Some(IpAddr::V4(ip)) = result.pod_ip() else { panic!("no IPv4 pod IP in {:?}", result.raw) };
    assert!(ip.to_string().starts_with(&format!("{}.", tn.net24)), "{ip} not in {}.0/24", tn.net24);
    assert_eq!(tn.allocated(), [ip.to_string()]);
    assert!(Path::new("/sys/class/net").join(&tn.bridge).exists(), "bridge {} on the host", tn.bridge);
    let eth0 = pod.netns.interfaces().expect("interfaces").into_iter().find(|i| i.name == "eth0").expect("eth0");
    assert!(eth0.up && eth0.addrs.contains(&(IpAddr::V4(ip), 24)), "{eth0:?}");
    let cache = pod.req.cache_dir.join(format!("cni-{}-eth0.json", tn.name));
    assert!(cache.exists(), "ADD result cached in the cache dir");

    let server = PodServer::start(&pod.netns, SocketAddr::from((ip, 8080)));
    assert_eq!(fetch(SocketAddr::from((ip, 8080))).expect("pod IP reachable from the host"), "pod");
    // hostPort through the node's own (non-loopback) address: portmap's OUTPUT DNAT.
    let node = SocketAddr::from((host_ipv4(), host_port));
    assert_eq!(fetch(node).expect("hostPort on the node address"), "pod");
    // And on 127.0.0.1: portmap's `snat` (default true) sets route_localnet on the bridge.
    let local = SocketAddr::from((Ipv4Addr::LOCALHOST, host_port));
    assert_eq!(fetch(local).expect("hostPort on 127.0.0.1"), "pod");
    let after = pod.netns.interfaces().expect("interfaces").into_iter().find(|i| i.name == "eth0").expect("eth0");
    assert!(after.rx_bytes > eth0.rx_bytes && after.tx_packets > eth0.tx_packets, "counters move: {after:?}");
    drop(server);

    // DEL as after a daemon crash: only the pod id, netns and pod dir are known;
    // portmap gets its mappings and bridge its prevResult from the ADD cache.
    let bare = CniRequest::new(&pod.req.container_id, &pod.req.netns_path, &pod.req.cache_dir);
    net.del(&bare).await.expect("DEL");
    pod.added = false;
    assert!(tn.allocated().is_empty(), "DEL released the IP");
    assert!(!cache.exists());
    assert!(!iptables_mentions(&pod.req.container_id), "DEL removed the iptables rules");
    net.del(&pod.req).await.expect("second DEL");
    pod.netns.remove().expect("remove netns");
    net.del(&pod.req).await.expect("DEL after the netns is gone");
}

/// A netns removed before DEL (a reboot loses it): DEL still succeeds and
/// releases the IP. (bridge 1.1.1 finds its masquerade rules through the
/// pod's interface, so with the netns gone they would stay: rktlet DELs before
/// removing the netns, and after a reboot the rules are gone too. Hence no
/// ipMasq here, which keeps this test leak-free.)
#[tokio::test]
async fn del_with_the_netns_gone() {
    let tn = TestNet::new();
    let portmap = r#",{"type":"portmap","capabilities":{"portMappings":true}}"#;
    let net = tn.network(&tn.conflist_masq(portmap, false), vec![PathBuf::from(CNI_BIN)]);
    let mut pod = TestPod::new(&net, tn.dir.path());
    let host_port = 40000 + u16::from_str_radix(&random_hex(3), 16).expect("hex");
    pod.req.port_mappings =
        vec![PortMapping { host_port, container_port: 80, protocol: Protocol::Tcp, host_ip: String::new() }];
    pod.add().await.expect("ADD");
    assert_eq!(tn.allocated().len(), 1);
    assert!(iptables_mentions(&pod.req.container_id));
    pod.netns.remove().expect("remove netns");
    let bare = CniRequest::new(&pod.req.container_id, &pod.req.netns_path, &pod.req.cache_dir);
    net.del(&bare).await.expect("DEL with a gone netns");
    pod.added = false;
    assert!(tn.allocated().is_empty());
    assert!(!iptables_mentions(&pod.req.container_id), "portmap got its mappings from the cache");
    net.del(&bare).await.expect("DEL again");
}

#[tokio::test]
async fn concurrent_adds_get_distinct_ips() {
    let tn = TestNet::new();
    let net = tn.network(&tn.conflist(""), vec![PathBuf::from(CNI_BIN)]);
    let mut a = TestPod::new(&net, tn.dir.path());
    let mut b = TestPod::new(&net, tn.dir.path());
    let (ra, rb) = tokio::join!(a.add(), b.add());
    let (ipa, ipb) = (ra.expect("ADD a").pod_ip().expect("ip a"), rb.expect("ADD b").pod_ip().expect("ip b"));
    assert_ne!(ipa, ipb);
    let mut got = tn.allocated();
    got.sort();
    let mut want = vec![ipa.to_string(), ipb.to_string()];
    want.sort();
    assert_eq!(got, want);
    // Pod a reaches pod b across the bridge.
    let server = PodServer::start(&b.netns, SocketAddr::from((ipb, 8080)));
    let from_a = a.netns.run(|| fetch(SocketAddr::from((ipb, 8080)))).expect("run in a");
    assert_eq!(from_a.expect("a -> b"), "pod");
    drop(server);
    // CHECK with the cached result (portmap 1.1.1's CHECK fails on IPv4-only
    // pods, containernetworking/plugins#819, so this network has no portmap).
    a.net.check(&a.req).await.expect("CHECK");
    let (da, db) = tokio::join!(a.del(), b.del());
    let _ = (da, db);
    assert!(tn.allocated().is_empty());
}

/// A plugin script in `dir`.
fn fake_plugin(dir: &Path, name: &str, body: &str) {
    fs::create_dir_all(dir).expect("bin dir");
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write plugin");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[tokio::test]
async fn broken_plugins_give_clear_errors_and_a_failed_add_is_undone() {
    let tn = TestNet::new();
    let bin = tn.dir.path().join("bin");
    fake_plugin(
        &bin,
        "rktlet-broken",
        r#"cat >/dev/null; [ "$CNI_COMMAND" = DEL ] && exit 0
echo '{"cniVersion":"1.0.0","code":7,"msg":"invalid network config","details":"no bananas"}'; echo oops >&2; exit 1"#,
    );
    fake_plugin(&bin, "rktlet-slow", "exec sleep 30");
    fake_plugin(&bin, "rktlet-garbage", "cat >/dev/null; echo not-json");
    let bins = vec![bin.clone(), PathBuf::from(CNI_BIN)];

    // bridge succeeds, then the broken plugin fails: the error names it and
    // the bridge's IP is released by the undo.
    let net = tn.network(&tn.conflist(r#",{"type":"rktlet-broken"}"#), bins.clone());
    let mut pod = TestPod::new(&net, tn.dir.path());
    let err = pod.add().await.expect_err("broken plugin");
    let text = err.to_string();
    assert!(matches!(err, CniError::Plugin { code: Some(7), .. }), "{err:?}");
    for want in [tn.name.as_str(), "\"rktlet-broken\"", "ADD", "invalid network config: no bananas", "stderr: oops"] {
        assert!(text.contains(want), "{want:?} missing in: {text}");
    }
    assert!(tn.allocated().is_empty(), "the failed ADD was undone");
    assert!(!pod.req.cache_dir.join(format!("cni-{}-eth0.json", tn.name)).exists());
    pod.added = false;

    let mut slow =
        tn.network(&format!(r#"{{"cniVersion":"1.0.0","name":"{}","type":"rktlet-slow"}}"#, tn.name), bins.clone());
    slow.timeout = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let err = slow.add(&pod.req).await.expect_err("timeout");
    assert!(matches!(err, CniError::Timeout { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "the DEL undo times out too, then gives up");

    let garbage =
        tn.network(&format!(r#"{{"cniVersion":"1.0.0","name":"{}","type":"rktlet-garbage"}}"#, tn.name), bins.clone());
    let err = garbage.add(&pod.req).await.expect_err("garbage");
    assert!(err.to_string().contains("invalid result") && err.to_string().contains("not-json"), "{err}");

    let missing =
        tn.network(&format!(r#"{{"cniVersion":"1.0.0","name":"{}","type":"rktlet-nope"}}"#, tn.name), bins.clone());
    assert!(matches!(missing.add(&pod.req).await, Err(CniError::MissingPlugin { .. })));

    // A real plugin rejecting its config: the message names bridge and says why.
    let bad = tn.conflist("").replace(&format!("{}.0/24", tn.net24), "10.999.0.0/24");
    let err = tn.network(&bad, bins).add(&pod.req).await.expect_err("bad subnet");
    assert!(err.to_string().contains("\"bridge\" ADD failed") && err.to_string().contains("10.999"), "{err}");
}

/// A plugin's exit status is read before it is reaped (the zombie is reaped
/// a little later, off the pod's path): the status still decides, a plugin
/// killed by a signal says so, and no zombie stays behind.
#[tokio::test]
async fn plugins_are_judged_by_their_exit_and_reaped_after() {
    let tn = TestNet::new();
    let bin = tn.dir.path().join("bin");
    let pids = tn.dir.path().join("pids");
    fake_plugin(&bin, "rktlet-exit", &format!("cat >/dev/null; echo $$ >> {}; exit 3", pids.display()));
    fake_plugin(&bin, "rktlet-killed", &format!("cat >/dev/null; echo $$ >> {}; kill -KILL $$", pids.display()));
    fake_plugin(&bin, "rktlet-ok", &format!("cat >/dev/null; echo $$ >> {}; echo '{{}}'", pids.display()));
    let bins = vec![bin.clone(), PathBuf::from(CNI_BIN)];
    let single = |t: &str| format!(r#"{{"cniVersion":"1.0.0","name":"{}","type":"{t}"}}"#, tn.name);
    let pod = TestPod::new(&tn.network(&tn.conflist(""), bins.clone()), tn.dir.path());

    let err = tn.network(&single("rktlet-exit"), bins.clone()).add(&pod.req).await.expect_err("exit 3");
    assert!(err.to_string().contains("exit") && err.to_string().contains('3'), "{err}");
    let err = tn.network(&single("rktlet-killed"), bins.clone()).add(&pod.req).await.expect_err("killed");
    assert!(err.to_string().contains("signal: 9"), "{err}");
    tn.network(&single("rktlet-ok"), bins).add(&pod.req).await.expect("exit 0");

    let ran: Vec<i32> = fs::read_to_string(&pids).expect("pids").lines().filter_map(|l| l.parse().ok()).collect();
    // three ADDs, and the DELs that undid the failed ones
    assert!(ran.len() >= 3, "{ran:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let left = || ran.iter().copied().filter(|p| Path::new(&format!("/proc/{p}")).exists()).collect::<Vec<_>>();
    while !left().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(left().is_empty(), "plugins not reaped: {:?}", left());
}

#[tokio::test]
async fn loopback_plugin_brings_lo_up() {
    let tn = TestNet::new();
    let lo = Network::loopback(&[PathBuf::from(CNI_BIN)]);
    let mut pod = TestPod::new(&lo, tn.dir.path());
    pod.req.ifname = "lo".into();
    let r = pod.add().await.expect("loopback ADD");
    assert!(r.ips.iter().any(|i| i.address == IpAddr::V4(Ipv4Addr::LOCALHOST)), "{:?}", r.raw);
    assert!(pod.netns.interfaces().expect("interfaces")[0].up);
    pod.del().await;
}

/// The conflist the install script ships, on this test's bridge, subnet and IPAM dir.
#[tokio::test]
async fn shipped_default_conflist_works() {
    let tn = TestNet::new();
    let mut conf: serde_json::Value =
        serde_json::from_str(include_str!("../../contrib/cni/10-rktlet.conflist")).expect("contrib conflist");
    assert_eq!(conf["name"], "rktlet");
    conf["name"] = tn.name.clone().into();
    let bridge = &mut conf["plugins"][0];
    assert_eq!((bridge["type"].as_str(), bridge["bridge"].as_str()), (Some("bridge"), Some("rktlet0")));
    bridge["bridge"] = tn.bridge.clone().into();
    bridge["ipam"]["ranges"][0][0]["subnet"] = format!("{}.0/24", tn.net24).into();
    bridge["ipam"]["dataDir"] = tn.ipam_dir().display().to_string().into();
    assert_eq!(conf["plugins"][1]["capabilities"]["portMappings"], true);
    let net = tn.network(&conf.to_string(), vec![PathBuf::from(CNI_BIN)]);
    net.config.check_plugins(&net.bin_dirs).expect("plugins installed");
    let mut pod = TestPod::new(&net, tn.dir.path());
    pod.req.port_mappings = vec![PortMapping {
        host_port: 41000 + u16::from_str_radix(&random_hex(3), 16).expect("hex"),
        container_port: 80,
        protocol: Protocol::Udp,
        host_ip: "127.0.0.1".into(),
    }];
    let ip = pod.add().await.expect("ADD").pod_ip().expect("ip");
    assert!(ip.to_string().starts_with(&tn.net24));
    pod.del().await;
    assert!(!iptables_mentions(&pod.req.container_id));
}

#[test]
fn identity_free_prefix_stops_at_the_first_plugin_that_needs_the_pod() {
    let tn = TestNet::new();
    let portmap = r#",{"type":"portmap","capabilities":{"portMappings":true},"snat":true}"#;
    assert_eq!(tn.network(&tn.conflist(portmap), vec![CNI_BIN.into()]).identity_free_prefix(), 1);
    assert_eq!(tn.network(&tn.conflist(""), vec![CNI_BIN.into()]).identity_free_prefix(), 1);
    // an IPAM that records the pod's name, or a declared capability, stops the prefix at once
    let whereabouts = tn.conflist("").replace("host-local", "whereabouts");
    assert_eq!(tn.network(&whereabouts, vec![CNI_BIN.into()]).identity_free_prefix(), 0);
    let with_caps = tn.conflist("").replace(r#""type":"bridge","#, r#""type":"bridge","capabilities":{"mac":true},"#);
    assert_eq!(tn.network(&with_caps, vec![CNI_BIN.into()]).identity_free_prefix(), 0);
}

#[tokio::test]
async fn a_prefix_added_ahead_is_completed_with_the_pods_port_mappings() {
    let tn = TestNet::new();
    let portmap = r#",{"type":"portmap","capabilities":{"portMappings":true},"snat":true}"#;
    let net = tn.network(&tn.conflist(portmap), vec![CNI_BIN.into()]);
    let cache = tn.dir.path().join("cache");
    let mut pod = TestPod::new(&net, &cache);
    // ahead: no identity, no port mappings
    let mut ahead = pod.req.clone();
    (ahead.pod_name, ahead.pod_namespace, ahead.pod_uid) = (String::new(), String::new(), String::new());
    pod.added = true;
    net.add_prefix(&ahead, 1).await.expect("prefix ADD");
    assert_eq!(tn.allocated().len(), 1, "the bridge's IPAM ran ahead");
    let (from, prev) = net.prefix_done(&pod.req).expect("prefix recorded");
    assert_eq!(from, 1);
    // another config (same name) must not continue it
    let other = tn.network(&tn.conflist_masq(portmap, false), vec![CNI_BIN.into()]);
    assert!(other.prefix_done(&pod.req).is_none(), "a changed config does not reuse the prefix");

    let host_port = 21000 + (std::process::id() % 20000) as u16;
    pod.req.port_mappings =
        vec![PortMapping { host_port, container_port: 8080, protocol: Protocol::Tcp, host_ip: String::new() }];
    let result = net.add_from(&pod.req, from, Some(prev)).await.expect("rest of the chain");
    let ip = result.pod_ip().expect("pod IP");
    assert!(ip.to_string().starts_with(&tn.net24), "{ip}");
    assert!(net.prefix_done(&pod.req).is_none(), "the cache now holds the whole chain");
    let _server = PodServer::start(&pod.netns, SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8080));
    assert_eq!(fetch(SocketAddr::new(IpAddr::V4(host_ipv4()), host_port)).expect("hostPort"), "pod");
    pod.del().await;
    assert!(tn.allocated().is_empty());
    assert!(!iptables_mentions(&pod.req.container_id));
}
