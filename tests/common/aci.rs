//! ACIs and the GnuPG (Debian's `gpg`, an independent OpenPGP
//! implementation) keys and detached signatures that sign them.

use std::path::Path;
use std::process::Command;

/// A throw-away GnuPG home with one signing key per user id.
pub struct Gpg {
    home: tempfile::TempDir,
}

impl Gpg {
    pub fn new(uids: &[&str]) -> Gpg {
        Self::with_algorithm(uids, "ed25519")
    }

    /// Keys of `algorithm` (gpg's name: rkt 1.30's OpenPGP reads `rsa2048`, not `ed25519`).
    pub fn with_algorithm(uids: &[&str], algorithm: &str) -> Gpg {
        let home = tempfile::tempdir().expect("gnupg home");
        let g = Gpg { home };
        for uid in uids {
            g.run(&["--batch", "--passphrase", "", "--quick-gen-key", uid, algorithm, "sign", "never"]);
        }
        g
    }

    pub fn run(&self, args: &[&str]) -> Vec<u8> {
        let out = Command::new("gpg").env("GNUPGHOME", self.home.path()).args(args).output().expect("gpg");
        assert!(out.status.success(), "gpg {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    }

    pub fn fingerprint(&self, uid: &str) -> String {
        let out = String::from_utf8(self.run(&["--with-colons", "--fingerprint", uid])).expect("utf8");
        let fpr = out.lines().find_map(|l| l.strip_prefix("fpr:")).expect("fpr line");
        fpr.trim_matches(':').to_ascii_lowercase()
    }

    /// A signing subkey for `uid`'s key; gpg signs with it from then on.
    pub fn add_signing_subkey(&self, uid: &str) {
        let fpr = self.fingerprint(uid);
        self.run(&["--batch", "--passphrase", "", "--quick-add-key", &fpr, "ed25519", "sign", "never"]);
    }

    /// The fingerprint of `uid`'s (first) subkey.
    pub fn subkey_fingerprint(&self, uid: &str) -> String {
        let out = String::from_utf8(self.run(&["--with-colons", "--fingerprint", "--fingerprint", uid])).expect("utf8");
        let mut after_sub = out.lines().skip_while(|l| !l.starts_with("sub:"));
        let fpr = after_sub.find_map(|l| l.strip_prefix("fpr:")).expect("subkey fpr line");
        fpr.trim_matches(':').to_ascii_lowercase()
    }

    /// The (tag, byte offset) of every packet in binary OpenPGP data, as
    /// `gpg --list-packets` reports them.
    pub fn packets(&self, bytes: &[u8], scratch: &Path) -> Vec<(u32, usize)> {
        std::fs::write(scratch, bytes).expect("packets file");
        let out = String::from_utf8(self.run(&["--list-packets", "--verbose", scratch.to_str().expect("path")]))
            .expect("utf8");
        let field = |l: &str, name: &str| {
            l.split_whitespace().find_map(|w| w.strip_prefix(name)).and_then(|v| v.parse().ok()).expect("packet field")
        };
        out.lines().filter(|l| l.starts_with("# off=")).map(|l| (field(l, "tag=") as u32, field(l, "off="))).collect()
    }

    pub fn export(&self, uid: &str, to: &Path) {
        std::fs::write(to, self.run(&["--armor", "--export", uid])).expect("key file");
    }

    pub fn sign(&self, uid: &str, data: &Path, armor: bool) -> Vec<u8> {
        let mut args = vec!["--batch", "--yes", "-u", uid, "--detach-sign", "-o", "-"];
        if armor {
            args.insert(0, "--armor");
        }
        args.push(data.to_str().expect("path"));
        self.run(&args)
    }
}

impl Drop for Gpg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf").env("GNUPGHOME", self.home.path()).args(["--kill", "gpg-agent"]).status();
    }
}

/// An ACI: `manifest` and `rootfs/hello.txt`, gzipped.
pub fn aci(name: &str, hello: &str) -> Vec<u8> {
    let manifest = serde_json::json!({
        "acKind": "ImageManifest", "acVersion": "0.8.11", "name": name,
        "labels": [{"name": "version", "value": "1.0"}, {"name": "os", "value": "linux"}],
        "app": {"exec": ["/bin/hello"], "user": "0", "group": "0"}
    });
    let tar = aci_tar(manifest, &[("hello.txt", hello)]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar).expect("gzip");
    gz.finish().expect("gzip")
}

/// An ACI with a manifest and files at paths below `rootfs/` (their
/// directories made as entries too), plain tar.
pub fn aci_tar(manifest: serde_json::Value, files: &[(&str, &str)]) -> Vec<u8> {
    let json = serde_json::to_vec(&manifest).expect("manifest");
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: &str, kind: tar::EntryType, mode: u32, data: &[u8]| {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        b.append_data(&mut h, path, data).expect("append");
    };
    add("manifest", tar::EntryType::Regular, 0o644, &json);
    add("rootfs/", tar::EntryType::Directory, 0o755, b"");
    let mut dirs = std::collections::BTreeSet::new();
    for (path, content) in files {
        if let Some((dir, _)) = path.rsplit_once('/')
            && dirs.insert(dir)
        {
            add(&format!("rootfs/{dir}/"), tar::EntryType::Directory, 0o755, b"");
        }
        add(&format!("rootfs/{path}"), tar::EntryType::Regular, 0o644, content.as_bytes());
    }
    b.into_inner().expect("tar")
}

/// PullImage of an unsigned ACI file over CRI: refused as DataLoss, saying
/// there is no signature.
pub async fn assert_unsigned_aci_refused(
    img: &mut rktlet::proto::v1::image_service_client::ImageServiceClient<tonic::transport::Channel>,
    aci: &Path,
) {
    use rktlet::proto::v1 as cri;
    let image = Some(cri::ImageSpec { image: format!("aci:{}", aci.display()), ..Default::default() });
    let err = img.pull_image(cri::PullImageRequest { image, ..Default::default() }).await.expect_err("an unsigned ACI");
    assert_eq!(err.code(), tonic::Code::DataLoss, "{err:?}");
    assert!(err.message().contains("no signature"), "{}", err.message());
}
