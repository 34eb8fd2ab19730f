//! scripts/install.sh staged into a DESTDIR (as a package build would): the
//! binary, the unit pointing at it, the tmpfiles snippet, a default config
//! the daemon accepts, and the default CNI network; a second run keeps an
//! edited config.

mod common;

use std::path::Path;
use std::process::Command;

fn install(dest: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/install.sh"))
        .env("DESTDIR", dest)
        .env("PREFIX", "/usr")
        .env("RKTLET_BIN", common::BIN)
        .output()
        .expect("run install.sh");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn install_stages_binary_unit_config_and_network() {
    let t = tempfile::tempdir().expect("tempdir");
    let dest = t.path();
    install(dest);
    let bin = dest.join("usr/bin/rktlet");
    let version = Command::new(&bin).arg("--version").output().expect("installed binary runs");
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("rktlet "));
    let unit = std::fs::read_to_string(dest.join("etc/systemd/system/rktlet.service")).expect("unit");
    assert!(unit.contains("ExecStart=/usr/bin/rktlet serve --config /etc/rktlet/config.toml"), "{unit}");
    assert!(unit.contains("KillMode=process") && unit.contains("WantedBy=multi-user.target"), "{unit}");
    let tmpfiles = std::fs::read_to_string(dest.join("usr/lib/tmpfiles.d/rktlet.conf")).expect("tmpfiles");
    assert!(tmpfiles.contains("d /run/rktlet") && tmpfiles.contains("d /var/lib/rktlet/data"), "{tmpfiles}");
    let config = dest.join("etc/rktlet/config.toml");
    let file = rktlet::config::FileConfig::load(&config).expect("the installed config parses");
    let resolved = rktlet::config::Config::resolve(file, Default::default()).expect("resolves");
    assert_eq!(resolved, rktlet::config::Config::default());
    let net = rktlet::net::cni::default_network(&dest.join("etc/cni/net.d")).expect("default network installed");
    assert_eq!(net.name, "rktlet");

    // an operator's edit survives a reinstall
    std::fs::write(&config, "pod_pool_size = 0\n").expect("edit");
    install(dest);
    assert_eq!(std::fs::read_to_string(&config).expect("config"), "pod_pool_size = 0\n");
}
