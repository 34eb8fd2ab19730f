//! A docker layer as rkt stores it: an ACI, the uncompressed tar of an appc
//! image manifest (`manifest`) and the layer's files under `rootfs/`, keyed
//! by rkt's key of those bytes (`sha512-` + 64 hex of their SHA-512).
//!
//! The rendition is a pure function of the layer's tar and the layer's
//! manifest, so the same bytes can be made twice: once into a hasher while
//! a pull unpacks the layer (the key, with no file written:
//! [`crate::extract::Unpacker::with_aci`]), and once into a file in the
//! background ([`convert`]; the daemon's `image::layer_aci::convert_pending`),
//! checked against that key. Until then the layer's compressed download
//! waits in `cas/rktlet-layers/<key>` ([`pending`]) and renders are made
//! from it.
//!
//! The rendition, entry by entry:
//! - `manifest` first (mode 0644, owner 0, time 0), then the `rootfs`
//!   directory (0755, owner 0, time 0);
//! - every entry of the layer but its root, in the layer's order, named
//!   `rootfs/` + its cleaned path (no `./`, no trailing `/`), with the
//!   entry's type (regular files of every tar flavour as `0`), mode
//!   (permission, setuid, setgid and sticky bits), owner ids and names,
//!   modification time (whole seconds), device numbers and, for a hard
//!   link, `rootfs/` + its cleaned target (a symlink's target as written);
//! - a ustar header each; a PAX header (`././@PaxHeader`, records sorted by
//!   key) before it when the name or link is longer than 100 bytes, an
//!   owner name longer than 32, or the entry has extended attributes
//!   (`SCHILY.xattr.*`);
//! - docker's whiteouts (`.wh.<name>`, `.wh..wh..opq`) stay, as entries
//!   of the layer: rktlet renders from them. rkt's renderer does not know
//!   them; the image's manifest hides them from it, and what they delete,
//!   with a `pathWhitelist` ([`path_whitelist`]), which is how docker2aci
//!   expresses a deletion;
//! - entry types rktlet does not unpack are left out; the archive ends
//!   with two zero blocks.

use crate::cas::Cas;
use crate::digest::{Algorithm, Hasher, cas_key};
use std::collections::BTreeSet;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const BLOCK: usize = 512;

/// Where the compressed download of a layer waits for its ACI to be
/// written: `cas/rktlet-layers/<key>` (rktlet's own directory).
pub fn pending(cas: &Cas, key: &str) -> PathBuf {
    cas.root().join(PENDING_DIR).join(key)
}

/// The directory under `cas/` where layers' downloads wait ([`pending`]).
pub const PENDING_DIR: &str = "rktlet-layers";

/// What the bytes of a layer's ACI go to while it is rendered.
pub struct HashOut {
    hasher: Hasher,
    count: u64,
}

impl HashOut {
    /// Nothing written yet.
    pub fn new() -> Self {
        HashOut { hasher: Hasher::new(Algorithm::Sha512), count: 0 }
    }

    /// rkt's key of what was written, and its size.
    pub fn key(self) -> (String, u64) {
        (cas_key(&self.hasher.finish()), self.count)
    }
}

impl Default for HashOut {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for HashOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.hasher.update(buf);
        self.count += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes the ACI rendition of a layer's entries to `out`.
pub(crate) struct AciWriter<W: Write> {
    out: W,
    /// Data bytes the current entry still has to get.
    remaining: u64,
    /// Data bytes of the current entry (for its padding).
    size: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl<W: Write> AciWriter<W> {
    /// Starts the ACI: its manifest, then the `rootfs` directory.
    pub(crate) fn new(out: W, manifest: &[u8]) -> io::Result<Self> {
        let mut w = AciWriter { out, remaining: 0, size: 0 };
        let m = Head { size: manifest.len() as u64, ..Head::new(b"manifest", tar::EntryType::Regular, 0o644) };
        w.write_head(&m)?;
        w.data(manifest)?;
        w.close_entry()?;
        let root = Head::new(b"rootfs", tar::EntryType::Directory, 0o755);
        w.write_head(&root)?;
        Ok(w)
    }

    /// The next entry of the layer, `rel` its cleaned path. Returns whether
    /// its data follows (through [`AciWriter::data`]).
    pub(crate) fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>, rel: &Path) -> io::Result<bool> {
        self.close_entry()?;
        let Some(head) = head_of(entry, rel)? else { return Ok(false) };
        self.write_head(&head)?;
        Ok(head.size > 0)
    }

    /// Data of the current entry.
    pub(crate) fn data(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.len() as u64 > self.remaining {
            return Err(invalid("a layer entry has more data than its header says".into()));
        }
        self.remaining -= bytes.len() as u64;
        self.out.write_all(bytes)
    }

    fn close_entry(&mut self) -> io::Result<()> {
        if self.remaining > 0 {
            return Err(invalid(format!("a layer entry ended {} bytes short of its size", self.remaining)));
        }
        let pad = (BLOCK as u64 - self.size % BLOCK as u64) % BLOCK as u64;
        self.out.write_all(&[0u8; BLOCK][..pad as usize])?;
        self.size = 0;
        Ok(())
    }

    /// Ends the archive; returns the output.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        self.close_entry()?;
        self.out.write_all(&[0u8; 2 * BLOCK])?;
        Ok(self.out)
    }

    fn write_head(&mut self, h: &Head) -> io::Result<()> {
        let pax = h.pax_records();
        if !pax.is_empty() {
            let mut x = tar::Header::new_ustar();
            x.set_entry_type(tar::EntryType::XHeader);
            x.set_mode(0o644);
            x.set_uid(0);
            x.set_gid(0);
            x.set_mtime(0);
            x.set_size(pax.len() as u64);
            copy_field(&mut x.as_old_mut().name, b"././@PaxHeader");
            x.set_cksum();
            self.out.write_all(x.as_bytes())?;
            self.remaining = pax.len() as u64;
            self.size = pax.len() as u64;
            self.data(&pax)?;
            self.close_entry()?;
        }
        let mut t = tar::Header::new_ustar();
        t.set_entry_type(h.kind);
        t.set_mode(h.mode);
        t.set_uid(h.uid);
        t.set_gid(h.gid);
        t.set_mtime(h.mtime);
        t.set_size(h.size);
        copy_field(&mut t.as_old_mut().name, &h.name);
        copy_field(&mut t.as_old_mut().linkname, &h.link);
        if let Some(u) = t.as_ustar_mut() {
            copy_field(&mut u.uname, &h.uname);
            copy_field(&mut u.gname, &h.gname);
        }
        if matches!(h.kind, tar::EntryType::Char | tar::EntryType::Block) {
            t.set_device_major(h.dev.0)?;
            t.set_device_minor(h.dev.1)?;
        } else {
            t.set_device_major(0)?;
            t.set_device_minor(0)?;
        }
        t.set_cksum();
        self.out.write_all(t.as_bytes())?;
        self.remaining = h.size;
        self.size = h.size;
        Ok(())
    }
}

/// As much of `value` as fits, the rest of the field zeros.
fn copy_field(field: &mut [u8], value: &[u8]) {
    let n = value.len().min(field.len());
    field[..n].copy_from_slice(&value[..n]);
    field[n..].fill(0);
}

/// One entry's header in the rendition.
struct Head {
    name: Vec<u8>,
    kind: tar::EntryType,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
    size: u64,
    link: Vec<u8>,
    uname: Vec<u8>,
    gname: Vec<u8>,
    dev: (u32, u32),
    /// Sorted by name.
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Head {
    fn new(name: &[u8], kind: tar::EntryType, mode: u32) -> Head {
        Head {
            name: name.to_vec(),
            kind,
            mode,
            uid: 0,
            gid: 0,
            mtime: 0,
            size: 0,
            link: Vec::new(),
            uname: Vec::new(),
            gname: Vec::new(),
            dev: (0, 0),
            xattrs: Vec::new(),
        }
    }

    /// The PAX records the ustar header cannot carry, sorted by key.
    fn pax_records(&self) -> Vec<u8> {
        let mut recs: Vec<(Vec<u8>, &[u8])> = Vec::new();
        if self.name.len() > 100 {
            recs.push((b"path".to_vec(), &self.name));
        }
        if self.link.len() > 100 {
            recs.push((b"linkpath".to_vec(), &self.link));
        }
        if self.uname.len() > 32 {
            recs.push((b"uname".to_vec(), &self.uname));
        }
        if self.gname.len() > 32 {
            recs.push((b"gname".to_vec(), &self.gname));
        }
        for (k, v) in &self.xattrs {
            recs.push(([b"SCHILY.xattr.", &k[..]].concat(), v));
        }
        recs.sort();
        let mut out = Vec::new();
        for (k, v) in recs {
            // "<len> <key>=<value>\n", the length counting its own digits
            let base = k.len() + v.len() + 3;
            let mut len = base + 1;
            while len != base + len.to_string().len() {
                len = base + len.to_string().len();
            }
            out.extend_from_slice(len.to_string().as_bytes());
            out.push(b' ');
            out.extend_from_slice(&k);
            out.push(b'=');
            out.extend_from_slice(v);
            out.push(b'\n');
        }
        out
    }
}

/// The rendition's header of a layer entry (`rel`: its cleaned path);
/// `None` for what is not part of the rendition (the root, entry types
/// rktlet does not unpack).
fn head_of<R: Read>(entry: &mut tar::Entry<'_, R>, rel: &Path) -> io::Result<Option<Head>> {
    if rel.as_os_str().is_empty() {
        return Ok(None);
    }
    let header = entry.header();
    let kind = match header.entry_type() {
        tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => tar::EntryType::Regular,
        k @ (tar::EntryType::Directory
        | tar::EntryType::Symlink
        | tar::EntryType::Link
        | tar::EntryType::Char
        | tar::EntryType::Block
        | tar::EntryType::Fifo) => k,
        _ => return Ok(None),
    };
    let name = [b"rootfs/", rel.as_os_str().as_bytes()].concat();
    let mut h = Head {
        uid: header.uid()?,
        gid: header.gid()?,
        mtime: header.mtime()?,
        size: if kind == tar::EntryType::Regular { entry.size() } else { 0 },
        uname: header.username_bytes().unwrap_or_default().to_vec(),
        gname: header.groupname_bytes().unwrap_or_default().to_vec(),
        ..Head::new(&name, kind, header.mode()? & 0o7777)
    };
    if matches!(kind, tar::EntryType::Char | tar::EntryType::Block) {
        h.dev = (header.device_major().ok().flatten().unwrap_or(0), header.device_minor().ok().flatten().unwrap_or(0));
    }
    match kind {
        tar::EntryType::Symlink => h.link = entry.link_name_bytes().map(|l| l.to_vec()).unwrap_or_default(),
        tar::EntryType::Link => {
            let target = entry.link_name()?.map(|l| l.into_owned()).unwrap_or_default();
            // a target that climbs out is the unpacker's to refuse, after this
            h.link = match super::tar_entry::clean(&target) {
                Ok(cleaned) => [b"rootfs/", cleaned.as_os_str().as_bytes()].concat(),
                Err(_) => target.as_os_str().as_bytes().to_vec(),
            };
        }
        _ => {}
    }
    if let Ok(Some(exts)) = entry.pax_extensions() {
        for ext in exts.flatten() {
            if let Some(name) = ext.key_bytes().strip_prefix(b"SCHILY.xattr.") {
                h.xattrs.push((name.to_vec(), ext.value_bytes().to_vec()));
            }
        }
    }
    h.xattrs.sort();
    Ok(Some(h))
}

/// Writes the ACI rendition of the layer tar `layer` to `out`.
pub fn convert<W: Write>(layer: impl Read, manifest: &[u8], out: W) -> io::Result<W> {
    let mut w = AciWriter::new(out, manifest)?;
    let mut archive = tar::Archive::new(super::tar_entry::PadLastBlock::new(layer));
    let mut buf = vec![0u8; 256 * 1024];
    for entry in archive.entries()? {
        let mut entry = entry?;
        let rel = super::tar_entry::clean(&entry.path()?).map_err(|e| invalid(e.to_string()))?;
        if w.entry(&mut entry, &rel)? {
            loop {
                let n = entry.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                w.data(&buf[..n])?;
            }
        }
    }
    w.finish()
}

/// Whether `head`, a blob's first bytes, starts an ACI in rktlet's
/// rendition (its first entry is `manifest`).
pub fn is_aci(head: &[u8]) -> bool {
    head.len() >= BLOCK && head[..100].starts_with(b"manifest\0") && head[156] == b'0'
}

/// The paths a layer's tar holds and deletes, as [`path_whitelist`] needs them.
#[derive(Debug, Default, Clone)]
pub struct LayerPaths {
    /// Each entry's path, `/` + its cleaned path.
    pub paths: Vec<String>,
    /// Paths the layer deletes from the layers below.
    pub whiteouts: Vec<String>,
    /// Directories whose content from the layers below it hides.
    pub opaque: Vec<String>,
}

impl LayerPaths {
    /// `/` + a cleaned path relative to the layer's root.
    pub(crate) fn absolute(rel: &Path) -> String {
        format!("/{}", rel.to_string_lossy())
    }
}

/// The `pathWhitelist` of an image made of `layers` (bottom first): empty
/// when no layer deletes anything (appc: every path), else every path of
/// the image as docker renders it, sorted, with each one's parent
/// directories. rkt's renderer takes a dependency's file only if the
/// image's whitelist names it, so what a layer deletes, and its whiteout
/// entries, stay out of rkt's rendering.
pub fn path_whitelist(layers: &[&LayerPaths]) -> Vec<String> {
    if layers.iter().all(|l| l.whiteouts.is_empty() && l.opaque.is_empty()) {
        return Vec::new();
    }
    let mut set: BTreeSet<String> = BTreeSet::new();
    let remove_below = |set: &mut BTreeSet<String>, dir: &str| {
        let prefix = if dir.ends_with('/') { dir.to_string() } else { format!("{dir}/") };
        let below: Vec<String> = set.range(prefix.clone()..).take_while(|p| p.starts_with(&prefix)).cloned().collect();
        for p in below {
            set.remove(&p);
        }
    };
    for l in layers {
        for w in &l.whiteouts {
            set.remove(w);
            remove_below(&mut set, w);
        }
        for o in &l.opaque {
            remove_below(&mut set, o);
        }
        for p in &l.paths {
            let name = p.rsplit('/').next().unwrap_or_default();
            if name.starts_with(".wh.") {
                continue;
            }
            let mut at = p.as_str();
            while !at.is_empty() && at != "/" && set.insert(at.to_string()) {
                at = &at[..at.rfind('/').unwrap_or(0)];
            }
        }
    }
    set.into_iter().collect()
}

/// A compressed (gzip, zstd) or plain tar file, decompressed.
pub fn decompressed(file: fs::File) -> io::Result<Box<dyn Read + Send>> {
    let mut buffered = BufReader::with_capacity(256 * 1024, file);
    let head = buffered.fill_buf()?;
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::bufread::MultiGzDecoder::new(buffered))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(zstd::Decoder::with_buffer(buffered)?)
    } else {
        Box::new(buffered)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ImageManifest;
    use tar::EntryType as T;

    /// A docker layer: (path, type, data, link target, xattrs).
    fn layer(entries: &[(&str, T, &[u8], &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(if *kind == T::Directory { 0o755 } else { 0o4755 });
            h.set_size(data.len() as u64);
            h.set_mtime(1_700_000_000);
            h.set_uid(1000);
            h.set_gid(1001);
            h.set_username("someone").expect("uname");
            if link.is_empty() {
                b.append_data(&mut h, path, *data).expect("append");
            } else {
                b.append_link(&mut h, path, link).expect("link");
            }
        }
        b.into_inner().expect("tar")
    }

    fn long_name() -> String {
        format!("usr/share/{}/file.txt", "d".repeat(120))
    }

    fn sample() -> Vec<u8> {
        let long = long_name();
        layer(&[
            ("./", T::Directory, b"", ""),
            ("./etc/", T::Directory, b"", ""),
            ("./etc/passwd", T::Regular, b"root:x:0:0::/root:/bin/sh\n", ""),
            ("etc/.wh.shadow", T::Regular, b"", ""),
            ("var/.wh..wh..opq", T::Regular, b"", ""),
            (&long, T::Regular, b"long", ""),
            ("bin/sh-link", T::Link, b"", "etc/passwd"),
            ("bin/long-symlink", T::Symlink, b"", &format!("/{}", long)),
        ])
    }

    fn manifest() -> Vec<u8> {
        let mut m = ImageManifest::new("layer/sha256-abc");
        m.labels = vec![crate::schema::NameValue::new("os", "linux")];
        serde_json::to_vec(&m).expect("json")
    }

    /// (name, type, link, size, uid, mode) of every entry, read back.
    fn entries(aci: &[u8]) -> Vec<(String, u8, String, u64, u64, u32)> {
        let mut a = tar::Archive::new(aci);
        a.entries()
            .expect("entries")
            .map(|e| {
                let e = e.expect("entry");
                let h = e.header();
                (
                    e.path().expect("path").to_string_lossy().into_owned(),
                    h.entry_type().as_byte(),
                    e.link_name().expect("link").map(|l| l.to_string_lossy().into_owned()).unwrap_or_default(),
                    e.size(),
                    h.uid().expect("uid"),
                    h.mode().expect("mode"),
                )
            })
            .collect()
    }

    #[test]
    fn the_rendition_is_an_aci_by_appcs_rules() {
        let aci = convert(&sample()[..], &manifest(), Vec::new()).expect("convert");
        let list = entries(&aci);
        // manifest first, then the rootfs directory; everything else below rootfs/
        assert_eq!((list[0].0.as_str(), list[0].1), ("manifest", b'0'));
        assert_eq!((list[1].0.as_str(), list[1].1), ("rootfs", b'5'));
        assert!(list[2..].iter().all(|e| e.0.starts_with("rootfs/")), "{list:?}");
        // no duplicate names (appc's ValidateArchive refuses them)
        let mut names: Vec<&str> = list.iter().map(|e| e.0.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), list.len());
        // the manifest is the one given, a valid image manifest
        let mut a = tar::Archive::new(&aci[..]);
        let mut first = a.entries().expect("entries").next().expect("one").expect("entry");
        let mut json = Vec::new();
        first.read_to_end(&mut json).expect("read");
        assert_eq!(json, manifest());
        let m: ImageManifest = serde_json::from_slice(&json).expect("manifest");
        assert_eq!((m.ac_kind.as_str(), m.name.as_str()), ("ImageManifest", "layer/sha256-abc"));
        assert!(is_aci(&aci));
        assert!(!is_aci(&sample()));
        // the layer's root is not an entry; the rest keep type, owner and mode
        let find = |n: &str| list.iter().find(|e| e.0 == n).unwrap_or_else(|| panic!("{n} in {list:?}")).clone();
        assert!(!names.contains(&"rootfs/."));
        let passwd = find("rootfs/etc/passwd");
        assert_eq!((passwd.1, passwd.3, passwd.4, passwd.5), (b'0', 26, 1000, 0o4755));
        // a long name through PAX, a hard link to rootfs/ + its target,
        // a symlink's target as it was
        assert_eq!(find(&format!("rootfs/{}", long_name())).3, 4);
        assert_eq!(find("rootfs/bin/sh-link").2, "rootfs/etc/passwd");
        assert_eq!(find("rootfs/bin/long-symlink").2, format!("/{}", long_name()));
        // whiteouts stay as the layer's entries
        find("rootfs/etc/.wh.shadow");
        find("rootfs/var/.wh..wh..opq");
        // the same layer gives the same bytes; another manifest, others
        assert_eq!(aci, convert(&sample()[..], &manifest(), Vec::new()).expect("again"));
        assert_ne!(aci, convert(&sample()[..], b"{}", Vec::new()).expect("other"));
        assert_eq!(aci.len() % 512, 0);
    }

    #[test]
    fn the_pull_hashes_the_same_bytes_it_would_store_and_renders_them_back() {
        let t = tempfile::tempdir().expect("tmp");
        let (a, b) = (t.path().join("from-layer"), t.path().join("from-aci"));
        fs::create_dir(&a).expect("a");
        fs::create_dir(&b).expect("b");
        let done = super::super::extract::Unpacker::new(&a, false)
            .with_aci(&manifest())
            .expect("aci")
            .unpack(&sample()[..])
            .expect("unpack");
        let aci = convert(&sample()[..], &manifest(), Vec::new()).expect("convert");
        assert_eq!(done.aci, Some((crate::digest::cas_key_of(&aci), aci.len() as u64)));
        let back = super::super::extract::Unpacker::new(&b, false).from_aci().unpack(&aci[..]).expect("from aci");
        assert_eq!(back.whiteouts, done.whiteouts);
        assert_eq!(back.opaque, done.opaque);
        assert_eq!(back.paths, done.paths);
        let list = |root: &Path| {
            let mut v: Vec<String> = walk(root).into_iter().map(|p| p.to_string_lossy().into_owned()).collect();
            v.sort();
            v
        };
        assert_eq!(list(&a), list(&b));
        assert_eq!(fs::read(b.join(long_name())).expect("long"), b"long");
        // an ACI entry outside rootfs/ is refused
        let mut bad = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_size(1);
        bad.append_data(&mut h, "elsewhere", &b"x"[..]).expect("append");
        let bad = bad.into_inner().expect("tar");
        let c = t.path().join("bad");
        fs::create_dir(&c).expect("c");
        let err = super::super::extract::Unpacker::new(&c, false).from_aci().unpack(&bad[..]).expect_err("refused");
        assert!(err.to_string().contains("outside the ACI's rootfs"), "{err}");
    }

    fn walk(root: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).expect("dir").flatten() {
                let p = e.path();
                out.push(p.strip_prefix(root).expect("below").to_path_buf());
                if e.file_type().expect("type").is_dir() {
                    stack.push(p);
                }
            }
        }
        out
    }

    /// Go's archive/tar, which rkt reads ACIs with, reads the rendition
    /// the same way (long names, link names, owners).
    #[test]
    fn gos_tar_reader_reads_the_rendition() {
        let _spawning = crate::one_at_a_time();
        if std::process::Command::new("go").arg("version").output().is_err() {
            println!("SKIPPED: gos_tar_reader_reads_the_rendition needs go");
            return;
        }
        let t = tempfile::tempdir().expect("tmp");
        let aci = convert(&sample()[..], &manifest(), Vec::new()).expect("convert");
        fs::write(t.path().join("x.aci"), &aci).expect("write");
        let prog = r#"package main
import ("archive/tar"; "fmt"; "io"; "os")
func main() {
	f, _ := os.Open(os.Args[1])
	r := tar.NewReader(f)
	for {
		h, err := r.Next()
		if err == io.EOF { return }
		if err != nil { fmt.Println("ERROR", err); os.Exit(1) }
		fmt.Printf("%s|%c|%s|%d|%d|%o\n", h.Name, h.Typeflag, h.Linkname, h.Size, h.Uid, h.Mode)
	}
}"#;
        fs::write(t.path().join("main.go"), prog).expect("prog");
        let out = std::process::Command::new("go")
            .args(["run", "main.go", "x.aci"])
            .current_dir(t.path())
            .env("GOCACHE", t.path().join("cache"))
            .env("GOFLAGS", "-mod=mod")
            .env("GO111MODULE", "off")
            .output()
            .expect("go run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let got = String::from_utf8_lossy(&out.stdout).into_owned();
        let want: Vec<String> = entries(&aci)
            .into_iter()
            .map(|(n, ty, l, size, uid, mode)| format!("{n}|{}|{l}|{size}|{uid}|{mode:o}", ty as char))
            .collect();
        assert_eq!(got.lines().collect::<Vec<_>>(), want);
    }

    #[test]
    fn the_whitelist_leaves_out_what_layers_delete() {
        let l = |paths: &[&str], wh: &[&str], opq: &[&str]| LayerPaths {
            paths: paths.iter().map(|s| s.to_string()).collect(),
            whiteouts: wh.iter().map(|s| s.to_string()).collect(),
            opaque: opq.iter().map(|s| s.to_string()).collect(),
        };
        let l0 = l(&["/etc", "/etc/passwd", "/etc/shadow", "/var/cache/x", "/a-b", "/a/x"], &[], &[]);
        assert!(path_whitelist(&[&l0]).is_empty(), "nothing deleted: no whitelist (every path)");
        let l1 =
            l(&["/etc/.wh.shadow", "/var/cache/.wh..wh..opq", "/var/cache/y"], &["/etc/shadow", "/a"], &["/var/cache"]);
        let l2 = l(&["/a/z"], &[], &[]);
        assert_eq!(
            path_whitelist(&[&l0, &l1, &l2]),
            ["/a", "/a-b", "/a/z", "/etc", "/etc/passwd", "/var", "/var/cache", "/var/cache/y"]
        );
    }
}
