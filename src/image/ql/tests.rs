//! Against databases written by the real ql (the one rkt 1.30 vendors); each
//! `.expect` file is what ql itself returned for `SELECT *` on the database
//! (newest row first, times as Unix nanoseconds). See tests/fixtures/ql/README.md.

use super::*;

fn fixture(name: &str) -> (Vec<u8>, String) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ql");
    let db = fs::read(dir.join(format!("{name}.db"))).unwrap();
    let expect = fs::read_to_string(dir.join(format!("{name}.expect"))).unwrap();
    (db, expect)
}

/// The tables as ql printed them, oldest row first (as `parse` returns them).
fn expected(text: &str) -> Tables {
    let mut t = Tables::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let int = |i: usize| f[i].parse::<i64>().unwrap();
        match f[0] {
            "version" => t.version = Some(int(1)),
            "aciinfo" => t.aciinfo.push(AciInfo {
                blobkey: f[1].into(),
                name: f[2].into(),
                importtime: int(3),
                lastused: int(4),
                latest: f[5] == "true",
                size: int(6),
                treestoresize: int(7),
                verified: false,
            }),
            "remote" => t.remote.push(Remote {
                aciurl: f[1].into(),
                sigurl: f[2].into(),
                etag: f[3].into(),
                blobkey: f[4].into(),
                cachemaxage: int(5),
                downloadtime: int(6),
            }),
            other => panic!("unknown line kind {other}"),
        }
    }
    t.aciinfo.reverse();
    t.remote.reverse();
    t
}

#[test]
fn a_fresh_rkt_database_has_the_schema_and_no_rows() {
    let (db, expect) = fixture("empty");
    let got = parse(&db).unwrap();
    assert_eq!(got, expected(&expect));
    assert_eq!(got.version, Some(RKT_DB_VERSION));
    let names: Vec<String> = tables(&db).unwrap().into_iter().map(|t| t.name).collect();
    for t in ["version", "remote", "aciinfo"] {
        assert!(names.contains(&t.to_string()), "{t} missing from {names:?}");
    }
    let all = tables(&db).unwrap();
    let aciinfo = find(&all, "aciinfo").unwrap();
    let cols: Vec<(char, &str)> = aciinfo.columns.iter().map(|c| (c.kind as char, c.name.as_str())).collect();
    assert_eq!(
        cols,
        [
            ('s', "blobkey"),
            ('s', "name"),
            ('T', "importtime"),
            ('T', "lastused"),
            ('b', "latest"),
            ('l', "size"),
            ('l', "treestoresize")
        ]
    );
}

#[test]
fn rows_read_back_as_ql_returns_them() {
    for name in ["three", "many", "churned"] {
        let (db, expect) = fixture(name);
        let want = expected(&expect);
        let got = parse(&db).unwrap();
        assert_eq!(got.aciinfo.len(), want.aciinfo.len(), "{name}");
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn three_rows_carry_rkts_values() {
    let (db, _) = fixture("three");
    let got = parse(&db).unwrap();
    let first = &got.aciinfo[0];
    assert_eq!(first.name, "example.com/app-0");
    assert!(first.blobkey.starts_with("sha512-") && first.blobkey.len() == 71);
    // 2026-11-26T12:00:00.123456789Z
    assert_eq!(first.importtime, 1_795_694_400_123_456_789);
    assert!(first.latest);
    assert_eq!(got.remote[0].aciurl, "https://example.com/app-0.aci");
    assert_eq!(got.remote[0].blobkey, first.blobkey);
}

#[test]
fn the_big_fixtures_use_long_and_compressed_blocks() {
    // the reader is exercised on every block kind the allocator writes
    let (db, _) = fixture("churned");
    let mut seen = HashSet::new();
    let mut off = blocks::HEADER + blocks::FLT;
    while off < db.len() {
        let tag = db[off];
        let len = match tag {
            0..=0xfb => blocks::atoms(usize::from(tag)),
            blocks::TAG_LONG => {
                let m = usize::from(db[off + 1]) << 8 | usize::from(db[off + 2]);
                blocks::atoms(if m <= blocks::MAX_SHORT { m + 0x10000 } else { m })
            }
            blocks::TAG_RELOCATED | blocks::TAG_FREE_SHORT => 1,
            _ => {
                let s = &db[off + 1..off + 8];
                s.iter().fold(0usize, |a, &b| (a << 8) | usize::from(b))
            }
        };
        let kind = match tag {
            0..=0xfb if db[off + len * 16 - 1] == 1 => "short compressed",
            0..=0xfb => "short",
            blocks::TAG_LONG if db[off + len * 16 - 1] == 1 => "long compressed",
            blocks::TAG_LONG => "long",
            blocks::TAG_RELOCATED => "relocated",
            _ => "free",
        };
        seen.insert(kind);
        off += len * 16;
    }
    assert_eq!(off, db.len(), "blocks tile the file");
    for k in ["short", "short compressed", "relocated", "free"] {
        assert!(seen.contains(k), "no {k} block in churned.db: {seen:?}");
    }
}

#[test]
fn damaged_files_are_refused_with_the_cause() {
    let (db, _) = fixture("three");
    let err = parse(b"SQLite format 3\0").unwrap_err();
    assert!(err.to_string().contains("not a ql database"), "{err}");
    let err = parse(&db[..db.len() - 8]).unwrap_err();
    assert!(err.to_string().contains("whole number"), "{err}");
    // the root points at a free block
    let mut bad = db.clone();
    let root = blocks::offset(1);
    bad[root..root + 16].copy_from_slice(&[1, 0x55 + 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let err = parse(&bad).unwrap_err();
    assert!(matches!(err, QlError::Format(_)), "{err}");
    // every truncation point fails cleanly, never panics
    for cut in (0..db.len()).step_by(16) {
        let _ = parse(&db[..cut]);
    }
}

#[test]
fn read_dir_takes_the_db_dir_and_refuses_a_pending_wal() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(read_dir(dir.path()).unwrap(), None, "no ql.db: rkt never used the store");
    let (db, expect) = fixture("three");
    fs::write(dir.path().join(DB_FILE), &db).unwrap();
    fs::write(dir.path().join(WAL_FILE), b"").unwrap();
    assert_eq!(read_dir(dir.path()).unwrap(), Some(expected(&expect)));
    fs::write(dir.path().join(WAL_FILE), b"x").unwrap();
    let err = read_dir(dir.path()).unwrap_err();
    assert!(matches!(err, QlError::PendingWal(_)), "{err}");
}

#[test]
fn read_dir_waits_for_rkts_exclusive_lock() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = fixture("three");
    fs::write(dir.path().join(DB_FILE), &db).unwrap();
    let held = lock::exclusive_dir(dir.path()).unwrap();
    let path = dir.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || tx.send(read_dir(&path).map(|t| t.map(|t| t.aciinfo.len()))).unwrap());
    assert!(rx.recv_timeout(std::time::Duration::from_millis(200)).is_err(), "read while rkt held the lock");
    drop(held);
    let got = rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(got, Some(3));
    reader.join().unwrap();
}

#[test]
fn merging_adds_rkts_images_and_keeps_rktlets_rows() {
    let (db, _) = fixture("three");
    let rkt = parse(&db).unwrap();
    let mut index = Index::default();
    let mine = AciInfo { size: 1, ..rkt.aciinfo[1].clone() };
    index.aciinfo.push(mine.clone());
    assert!(merge_into(&mut index, &rkt));
    assert_eq!(index.aciinfo.len(), 3);
    assert_eq!(index.aci(&mine.blobkey), Some(&mine), "rktlet's own row wins");
    // the remotes of the images added, in rktlet's form
    let urls: Vec<&str> = index.remote.iter().map(|r| r.aciurl.as_str()).collect();
    assert_eq!(urls, ["aci:https://example.com/app-0.aci", "aci:https://example.com/app-2.aci"]);
    assert!(!merge_into(&mut index, &rkt), "nothing new the second time");
}

/// The changes `written/*.db` hold (see tests/fixtures/ql/README.md): on a
/// copy of `base`, a new image with its remote, a `lastused` update of the
/// newest image, and the removal of the oldest.
fn rktlet_changes(base: &[u8]) -> (Vec<u8>, Tables) {
    let before = parse(base).unwrap();
    let mut db = write::Db::new(base.to_vec()).unwrap();
    let new = AciInfo {
        blobkey: format!("sha512-{}", "5e".repeat(32)),
        name: "registry-1.docker.io/library/busybox".into(),
        importtime: 1_795_780_800_000_000_001,
        lastused: 1_795_780_800_000_000_002,
        latest: true,
        size: 4_404_224,
        treestoresize: 4_321_000,
        verified: false,
    };
    let remote = Remote {
        aciurl: "docker://busybox:1.36".into(),
        sigurl: String::new(),
        etag: String::new(),
        blobkey: new.blobkey.clone(),
        cachemaxage: 0,
        downloadtime: -5,
    };
    db.put_aciinfo(&new).unwrap();
    db.put_remote(&remote).unwrap();
    let newest = AciInfo { lastused: 1_800_000_000_000_000_000, ..before.aciinfo.last().unwrap().clone() };
    db.put_aciinfo(&newest).unwrap();
    let oldest = before.aciinfo[0].blobkey.clone();
    db.remove_image(&oldest).unwrap();
    let mut want = before.clone();
    want.aciinfo.retain(|a| a.blobkey != oldest && a.blobkey != newest.blobkey);
    want.aciinfo.push(new);
    want.aciinfo.push(newest);
    want.remote.retain(|r| r.blobkey != oldest);
    want.remote.push(remote);
    (db.into_bytes(), want)
}

#[test]
fn written_rows_read_back_in_rkts_order() {
    for name in ["three", "many", "churned"] {
        let (db, _) = fixture(name);
        let (out, want) = rktlet_changes(&db);
        assert_eq!(parse(&out).unwrap(), want, "{name}");
        if name != "many" {
            // what the real ql read from the bytes this writer made
            let ql_saw = fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/ql/{name}.written.expect")),
            )
            .unwrap();
            assert_eq!(expected(&ql_saw), want, "{name}: as the real ql read it");
        }
        if let Ok(dir) = std::env::var("QL_WRITE_OUT") {
            fs::write(Path::new(&dir).join(format!("{name}.db")), &out).unwrap();
        }
    }
}

#[test]
fn the_index_never_takes_more_than_one_page() {
    // 512 entries fit the root data page; the 513th would need a split
    let (db, _) = fixture("empty");
    let mut db = write::Db::new(db).unwrap();
    let err = db
        .put_aciinfo(&AciInfo {
            blobkey: "sha512-00".into(),
            name: String::new(),
            importtime: 0,
            lastused: 0,
            latest: false,
            size: 0,
            treestoresize: 0,
            verified: false,
        })
        .unwrap_err();
    assert!(err.to_string().contains("gob type id"), "an empty database has no time to learn from: {err}");
    let (db, _) = fixture("three");
    let mut db = write::Db::new(db).unwrap();
    for i in 0..509 {
        db.put_remote(&Remote {
            aciurl: format!("https://example.com/{i}.aci"),
            sigurl: String::new(),
            etag: String::new(),
            blobkey: String::new(),
            cachemaxage: 0,
            downloadtime: 0,
        })
        .unwrap();
    }
    let full = db.into_bytes();
    assert_eq!(parse(&full).unwrap().remote.len(), 512);
    if let Ok(dir) = std::env::var("QL_WRITE_OUT") {
        fs::write(Path::new(&dir).join("full.db"), &full).unwrap();
    }
    let mut db = write::Db::new(full).unwrap();
    let err = db
        .put_remote(&Remote {
            aciurl: "https://example.com/last.aci".into(),
            sigurl: String::new(),
            etag: String::new(),
            blobkey: String::new(),
            cachemaxage: 0,
            downloadtime: 0,
        })
        .unwrap_err();
    assert!(matches!(err, QlError::Unsupported(_)), "{err}");
}

#[test]
fn a_change_of_rktlets_index_reaches_rkts_database() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = fixture("three");
    fs::write(dir.path().join(DB_FILE), &db).unwrap();
    let rkt = parse(&db).unwrap();
    let before = Index::default();
    let mut after = Index::default();
    let mine = AciInfo { blobkey: format!("sha512-{}", "ab".repeat(32)), ..rkt.aciinfo[0].clone() };
    after.aciinfo.push(mine.clone());
    after.remote.push(Remote {
        aciurl: "aci:https://example.org/x.aci".into(),
        blobkey: mine.blobkey.clone(),
        ..rkt.remote[0].clone()
    });
    after.remote.push(Remote {
        aciurl: "aci:/srv/x.aci".into(),
        blobkey: mine.blobkey.clone(),
        ..rkt.remote[0].clone()
    });
    let held = lock::exclusive_dir(dir.path()).unwrap();
    assert_eq!(
        write::mirror_held(dir.path(), &before, &after, |_| true).unwrap(),
        Some(2),
        "a local file has no rkt remote"
    );
    drop(held);
    let got = read_dir(dir.path()).unwrap().unwrap();
    assert_eq!(got.aciinfo.last().map(|a| &a.blobkey), Some(&mine.blobkey));
    assert_eq!(got.remote.last().map(|r| r.aciurl.as_str()), Some("https://example.org/x.aci"));
    // and its removal
    let held = lock::exclusive_dir(dir.path()).unwrap();
    assert_eq!(write::mirror_held(dir.path(), &after, &before, |_| true).unwrap(), Some(2));
    drop(held);
    assert_eq!(read_dir(dir.path()).unwrap().unwrap(), rkt);
    // a failed change leaves the file as it was
    let kept = fs::read(dir.path().join(DB_FILE)).unwrap();
    let held = lock::exclusive_dir(dir.path()).unwrap();
    let err = write::update_held(dir.path(), |db| db.insert("aciinfo", &[("nosuch", scalar::Scalar::Null)]));
    drop(held);
    assert!(err.is_err());
    assert!(fs::read(dir.path().join(DB_FILE)).unwrap() == kept, "file changed by a failed change");
    let left: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, [std::ffi::OsString::from(DB_FILE)], "nothing else left behind");
}
