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

fn image(i: u64) -> AciInfo {
    AciInfo {
        // spread over the key space like SHA-512 digests
        blobkey: format!("sha512-{:016x}{:048x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15), i),
        name: format!("example.com/app-{}", i % 23),
        importtime: 1_795_694_400_000_000_000 + i as i64,
        lastused: 1_795_694_400_000_000_000 + 2 * i as i64,
        latest: i.is_multiple_of(2),
        size: i as i64,
        treestoresize: 3 * i as i64,
        verified: false,
    }
}

fn remote_of(a: &AciInfo) -> Remote {
    Remote {
        aciurl: format!("https://example.com/{}.aci", &a.blobkey[7..40]),
        sigurl: String::new(),
        etag: String::new(),
        blobkey: a.blobkey.clone(),
        cachemaxage: 0,
        downloadtime: a.importtime,
    }
}

/// A deterministic shuffle (xorshift) of `v`.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

/// The record handles of `table`, with their values, walking its list.
fn records(bytes: &[u8], table: &str) -> Vec<(i64, Vec<Scalar>)> {
    let blocks = Blocks::new(bytes).unwrap();
    let all = tables_raw(bytes).unwrap();
    let t = find(&all, table).unwrap();
    // the head handle is the table descriptor's third field
    let root = scalar::decode(&blocks.get(1).unwrap()).unwrap();
    let mut next = match root[0] {
        Scalar::Int(h) => h,
        _ => panic!(),
    };
    let mut head = 0;
    while next != 0 {
        let meta = scalar::decode(&blocks.get(next).unwrap()).unwrap();
        if meta[3] == Scalar::Str(table.into()) {
            head = int_at(&meta, 2, "head").unwrap();
            break;
        }
        next = int_at(&meta, 0, "next").unwrap();
    }
    let mut h = int_at(&scalar::decode(&blocks.get(head).unwrap()).unwrap(), 0, "first").unwrap();
    let mut out = Vec::new();
    while h != 0 {
        let rec = scalar::decode(&blocks.get(h).unwrap()).unwrap();
        out.push((h, rec[2..].to_vec()));
        h = int_at(&rec, 0, "link").unwrap();
    }
    assert_eq!(out.len(), t.rows.len());
    out
}

/// Every row of aciinfo and remote is found through each of their indices
/// (looked up from the tree's root, as ql does for `WHERE column == value`),
/// each index holds exactly one entry a row and has lldb's shape; returns
/// the depth of each tree.
fn check_indices(bytes: &[u8]) -> Vec<(String, usize)> {
    check_indices_with(bytes, (256, 256))
}

/// [`check_indices`] for trees of lldb's fan-out `k_data`, `k_index`.
fn check_indices_with(bytes: &[u8], (k_data, k_index): (usize, usize)) -> Vec<(String, usize)> {
    let mut db = write::Db::new(bytes.to_vec()).unwrap();
    db.set_fanout(k_data, k_index);
    let mut depths = Vec::new();
    for table in ["aciinfo", "remote"] {
        let all = tables(bytes).unwrap();
        let t = find(&all, table).unwrap().clone();
        let recs = records(bytes, table);
        for ix in db.indices(table).unwrap() {
            let (depth, _) = db.bt_check(ix.tree).unwrap_or_else(|e| panic!("{table}.{}: {e}", ix.column));
            assert_eq!(db.bt_entries(ix.tree).unwrap().len(), recs.len(), "{table}.{}: one entry a row", ix.column);
            let col = t.columns.iter().find(|c| c.name == ix.column).unwrap().index;
            for (h, row) in &recs {
                let v = row.get(col).cloned().unwrap_or(Scalar::Null);
                let found = db.index_find(&ix, &v, *h).unwrap();
                assert_eq!(found, Some(*h), "{table}.{} = {v:?} not found through its index", ix.column);
            }
            depths.push((format!("{table}.{}", ix.column), depth));
        }
    }
    depths
}

/// lldb's allocator invariants: blocks tile the file, each free block is on
/// the list of its size exactly once with its links both ways, no two free
/// blocks touch and none ends the file, relocations lead to used blocks, and
/// every used block is reachable from ql's objects (nothing leaked).
fn check_allocator(bytes: &[u8]) {
    let blocks = Blocks::new(bytes).unwrap();
    let be = |b: &[u8]| b.iter().fold(0i64, |a, &x| (a << 8) | i64::from(x));
    let mut off = blocks::HEADER + blocks::FLT;
    let mut free = std::collections::BTreeMap::new();
    let mut used = std::collections::BTreeMap::new();
    let mut last_free = false;
    while off < bytes.len() {
        let h = ((off - blocks::HEADER) / 16) as i64 - 6;
        let tag = bytes[off];
        let atoms = match tag {
            0..=0xfb => blocks::atoms(usize::from(tag)),
            blocks::TAG_LONG => {
                let m = usize::from(bytes[off + 1]) << 8 | usize::from(bytes[off + 2]);
                blocks::atoms(if m <= blocks::MAX_SHORT { m + 0x10000 } else { m })
            }
            blocks::TAG_RELOCATED | blocks::TAG_FREE_SHORT => 1,
            _ => be(&bytes[off + 1..off + 8]) as usize,
        };
        let is_free = tag >= blocks::TAG_FREE_SHORT;
        assert!(!(is_free && last_free), "free blocks touch at {h}");
        if is_free {
            free.insert(h, atoms);
        } else {
            used.insert(h, (tag, atoms));
        }
        last_free = is_free;
        off += atoms * 16;
    }
    assert_eq!(off, bytes.len(), "blocks tile the file");
    assert!(!last_free, "a free block ends the file");
    let mut listed = HashSet::new();
    for slot in 0..14 {
        let mut h = be(&bytes[blocks::HEADER + 8 * slot..blocks::HEADER + 8 * slot + 8]);
        let mut prev = 0;
        while h != 0 {
            let atoms = *free.get(&h).unwrap_or_else(|| panic!("list {slot} holds {h}, not a free block"));
            let want = if atoms >= 4112 { 13 } else { (usize::BITS - 1 - atoms.leading_zeros()).min(12) as usize };
            assert_eq!(want, slot, "free block {h} of {atoms} atoms on list {slot}");
            assert!(listed.insert(h), "free block {h} listed twice");
            let o = blocks::offset(h);
            let (p, n) = if atoms == 1 {
                (be(&bytes[o + 1..o + 8]), be(&bytes[o + 8..o + 15]))
            } else {
                (be(&bytes[o + 8..o + 15]), be(&bytes[o + 15..o + 22]))
            };
            assert_eq!(p, prev, "free block {h} links back to {p}");
            prev = h;
            h = n;
        }
    }
    assert_eq!(listed.len(), free.len(), "free blocks missing from the lists");
    // reachability from ql's objects
    let mut seen = HashSet::new();
    let mut mark = |h: i64, seen: &mut HashSet<i64>| {
        assert!(used.contains_key(&h), "handle {h} is not a used block");
        seen.insert(h);
        if used[&h].0 == blocks::TAG_RELOCATED {
            let o = blocks::offset(h);
            let t = be(&bytes[o + 1..o + 8]);
            assert!(matches!(used.get(&t), Some((tag, _)) if *tag != blocks::TAG_RELOCATED), "relocation {h}");
            seen.insert(t);
        }
    };
    mark(1, &mut seen);
    mark(2, &mut seen);
    let field = |f: &[u8], seen: &mut HashSet<i64>, mark: &mut dyn FnMut(i64, &mut HashSet<i64>)| {
        if usize::from(f[0]) >= 19 {
            mark(be(&f[12..19]), seen);
        }
    };
    let mut next = match scalar::decode(&blocks.get(1).unwrap()).unwrap().as_slice() {
        [Scalar::Int(h)] => *h,
        _ => 0,
    };
    while next != 0 {
        mark(next, &mut seen);
        let meta = scalar::decode(&blocks.get(next).unwrap()).unwrap();
        let head = int_at(&meta, 2, "head").unwrap();
        mark(head, &mut seen);
        let mut h = int_at(&scalar::decode(&blocks.get(head).unwrap()).unwrap(), 0, "first").unwrap();
        while h != 0 {
            mark(h, &mut seen);
            h = int_at(&scalar::decode(&blocks.get(h).unwrap()).unwrap(), 0, "link").unwrap();
        }
        if let Some(Scalar::Int(hx)) = meta.get(5) {
            mark(*hx, &mut seen);
            for root in scalar::decode(&blocks.get(*hx).unwrap()).unwrap() {
                let Scalar::Int(tree) = root else { continue };
                if tree == 0 {
                    continue;
                }
                mark(tree, &mut seen);
                let mut pages = vec![be(&blocks.get(tree).unwrap())];
                while let Some(p) = pages.pop() {
                    if p == 0 {
                        continue;
                    }
                    mark(p, &mut seen);
                    let page = blocks.get(p).unwrap();
                    if page[0] == 0 {
                        for i in 0..(page.len() - 8) / 14 + 1 {
                            pages.push(be(&page[1 + 14 * i..8 + 14 * i]));
                        }
                    } else {
                        for item in page[15..].chunks(38) {
                            field(&item[..19], &mut seen, &mut mark);
                            field(&item[19..], &mut seen, &mut mark);
                        }
                    }
                }
            }
        }
        next = int_at(&meta, 0, "next").unwrap();
    }
    let leaked: Vec<&i64> = used.keys().filter(|h| !seen.contains(h)).collect();
    assert!(
        leaked.is_empty(),
        "{} used blocks reachable from nothing: {:?}",
        leaked.len(),
        &leaked[..leaked.len().min(10)]
    );
}

#[test]
fn an_empty_database_gets_rkts_time_type_id() {
    let (db, _) = fixture("empty");
    let mut db = write::Db::new(db).unwrap();
    assert_eq!(db.time_type_id(), write::RKT_TIME_TYPE_ID);
    // the id every fixture the real ql wrote carries
    for name in ["three", "many", "churned", "paged"] {
        let (bytes, _) = fixture(name);
        assert_eq!(write::Db::new(bytes).unwrap().time_type_id(), 69, "{name}");
    }
    let a = image(1);
    db.put_aciinfo(&a).unwrap();
    db.put_remote(&remote_of(&a)).unwrap();
    let out = db.into_bytes();
    let got = parse(&out).unwrap();
    assert_eq!(got.aciinfo, std::slice::from_ref(&a));
    assert_eq!(got.remote, [remote_of(&a)]);
    check_allocator(&out);
    check_indices(&out);
    if let Ok(dir) = std::env::var("QL_WRITE_OUT") {
        fs::write(Path::new(&dir).join("first.db"), &out).unwrap();
    }
}

#[test]
fn thousands_of_inserts_and_deletes_keep_every_row_findable() {
    // 2100 images with their remotes: each index grows to a root index page
    // over data pages, then shrinks back to a single page
    let (db, _) = fixture("three");
    let base = parse(&db).unwrap();
    let mut order: Vec<u64> = (0..2100).collect();
    shuffle(&mut order, 0x5eed);
    let mut db = write::Db::new(db).unwrap();
    for (n, &i) in order.iter().enumerate() {
        let a = image(i);
        db.put_aciinfo(&a).unwrap();
        db.put_remote(&remote_of(&a)).unwrap();
        if n == 700 {
            // an update of a row in a multi-page index: rkt's DELETE + INSERT
            db.put_aciinfo(&AciInfo { lastused: 7, ..image(order[3]) }).unwrap();
        }
    }
    let grown = db.into_bytes();
    let got = parse(&grown).unwrap();
    assert_eq!(got.aciinfo.len(), 2103);
    assert_eq!(got.remote.len(), 2103);
    assert_eq!(got.aciinfo.iter().find(|a| a.blobkey == image(order[3]).blobkey).unwrap().lastused, 7);
    check_allocator(&grown);
    let depths = check_indices(&grown);
    for (ix, d) in &depths {
        assert_eq!(*d, 2, "{ix}: a root index page over data pages");
    }
    if let Ok(dir) = std::env::var("QL_WRITE_OUT") {
        fs::write(Path::new(&dir).join("grown.db"), &grown).unwrap();
    }
    // delete all but 150 of them again, in another order
    shuffle(&mut order, 0xdead);
    let (gone, kept) = order.split_at(1950);
    let mut db = write::Db::new(grown).unwrap();
    for (n, &i) in gone.iter().enumerate() {
        db.remove_image(&image(i).blobkey).unwrap();
        if n % 650 == 649 {
            let mid = db.into_bytes();
            check_allocator(&mid);
            check_indices(&mid);
            db = write::Db::new(mid).unwrap();
        }
    }
    let shrunk = db.into_bytes();
    let got = parse(&shrunk).unwrap();
    let mut want: Vec<String> = kept.iter().map(|&i| image(i).blobkey).collect();
    want.extend(base.aciinfo.iter().map(|a| a.blobkey.clone()));
    want.sort();
    let mut have: Vec<String> = got.aciinfo.iter().map(|a| a.blobkey.clone()).collect();
    have.sort();
    assert_eq!(have, want);
    assert_eq!(got.remote.len(), 153);
    check_allocator(&shrunk);
    for (ix, d) in check_indices(&shrunk) {
        assert_eq!(d, 1, "{ix}: back to a single data page");
    }
    if let Ok(dir) = std::env::var("QL_WRITE_OUT") {
        fs::write(Path::new(&dir).join("shrunk.db"), &shrunk).unwrap();
    }
}

#[test]
fn a_database_ql_wrote_with_multi_page_indices_is_read_and_changed() {
    // paged.db: 540 images and remotes written by the real ql (README.md)
    let (bytes, expect) = fixture("paged");
    let want = expected(&expect);
    assert_eq!(parse(&bytes).unwrap(), want);
    check_allocator(&bytes);
    for (ix, d) in check_indices(&bytes) {
        assert_eq!(d, 2, "{ix}: ql split it");
    }
    // remove 400 (the indices collapse to one page), update and add some
    let mut db = write::Db::new(bytes).unwrap();
    let mut keys: Vec<String> = want.aciinfo.iter().map(|a| a.blobkey.clone()).collect();
    shuffle(&mut keys, 7);
    for k in &keys[..400] {
        db.remove_image(k).unwrap();
    }
    let mut rows: Vec<AciInfo> = want.aciinfo.iter().filter(|a| keys[400..].contains(&a.blobkey)).cloned().collect();
    let newest = AciInfo { lastused: 1_800_000_000_000_000_000, ..rows[0].clone() };
    db.put_aciinfo(&newest).unwrap();
    rows.remove(0);
    rows.push(newest);
    for i in 0..10 {
        let a = image(10_000 + i);
        db.put_aciinfo(&a).unwrap();
        rows.push(a);
    }
    let out = db.into_bytes();
    assert_eq!(parse(&out).unwrap().aciinfo, rows);
    check_allocator(&out);
    for (ix, d) in check_indices(&out) {
        assert_eq!(d, 1, "{ix}");
    }
    if let Ok(dir) = std::env::var("QL_WRITE_OUT") {
        fs::write(Path::new(&dir).join("paged.db"), &out).unwrap();
    }
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
    let err = write::update_held(dir.path(), false, |db| db.insert("aciinfo", &[("nosuch", scalar::Scalar::Null)]));
    drop(held);
    assert!(err.is_err());
    assert!(fs::read(dir.path().join(DB_FILE)).unwrap() == kept, "file changed by a failed change");
    let left: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, [std::ffi::OsString::from(DB_FILE)], "nothing else left behind");
}

/// A store rkt never opened: rktlet's first change makes rkt's database, as
/// rkt makes it (the schema, mode 0666), with every row of rktlet's index,
/// so `rkt image list` finds rktlet's images; a store's database is made
/// only by a change (`update_dir` leaves a store without one alone).
#[test]
fn a_store_rkt_never_opened_gets_rkts_database_with_rktlets_rows() {
    let (empty, _) = fixture("empty");
    assert!(write::EMPTY_DB == &empty[..], "the embedded empty database is the one rkt 1.30 makes");
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(write::update_dir(dir.path(), |_| Ok(())).unwrap(), None);
    assert!(!dir.path().join(DB_FILE).exists());
    let (three, _) = fixture("three");
    let rkt = parse(&three).unwrap();
    let after = Index { aciinfo: rkt.aciinfo.clone(), remote: rkt.remote.clone(), ..Default::default() };
    let held = lock::exclusive_dir(dir.path()).unwrap();
    let written = write::mirror_held(dir.path(), &Index::default(), &after, |_| true).unwrap();
    drop(held);
    assert_eq!(written, Some(rkt.aciinfo.len() + rkt.remote.len()));
    let got = read_dir(dir.path()).unwrap().unwrap();
    let sorted = |mut v: Vec<AciInfo>| {
        v.sort_by(|a, b| a.blobkey.cmp(&b.blobkey));
        v
    };
    assert_eq!(sorted(got.aciinfo.clone()), sorted(rkt.aciinfo.clone()));
    assert_eq!(got.remote.len(), rkt.remote.len());
    let out = fs::read(dir.path().join(DB_FILE)).unwrap();
    check_allocator(&out);
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(dir.path().join(DB_FILE)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666, "rkt's mode");
}

#[test]
fn deep_trees_split_borrow_and_join_index_pages() {
    // lldb's smallest fan-outs make trees of many levels from a few hundred
    // rows, so index pages split, take children from siblings and join
    for fanout in [(1, 2), (2, 3), (3, 2)] {
        let (db, _) = fixture("empty");
        let mut order: Vec<u64> = (0..400).collect();
        shuffle(&mut order, 0xfeed + fanout.0 as u64);
        let mut db = write::Db::new(db).unwrap();
        db.set_fanout(fanout.0, fanout.1);
        let mut deepest = 0;
        let out = |name: &str, bytes: &[u8]| {
            if let Ok(dir) = std::env::var("QL_WRITE_OUT") {
                fs::write(Path::new(&dir).join(format!("deep-{}-{}-{name}.db", fanout.0, fanout.1)), bytes).unwrap();
            }
        };
        for (n, &i) in order.iter().enumerate() {
            let a = image(i);
            db.put_aciinfo(&a).unwrap();
            db.put_remote(&remote_of(&a)).unwrap();
            if n % 100 == 99 {
                let bytes = db.into_bytes();
                check_allocator(&bytes);
                let depths = check_indices_with(&bytes, fanout);
                deepest = depths.iter().map(|d| d.1).max().unwrap().max(deepest);
                if n == 399 {
                    out("grown", &bytes);
                }
                db = write::Db::new(bytes).unwrap();
                db.set_fanout(fanout.0, fanout.1);
            }
        }
        assert!(deepest >= 4, "{fanout:?}: {deepest} levels");
        shuffle(&mut order, 0xbeef);
        for (n, &i) in order.iter().enumerate() {
            db.remove_image(&image(i).blobkey).unwrap();
            if n % 50 == 49 {
                let bytes = db.into_bytes();
                check_allocator(&bytes);
                let want = 400 - n - 1;
                if want == 100 {
                    out("shrunk", &bytes);
                }
                assert_eq!(parse(&bytes).unwrap().aciinfo.len(), want);
                let depths = check_indices_with(&bytes, fanout);
                if want == 0 {
                    assert!(depths.iter().all(|d| d.1 == 0), "{fanout:?}: empty trees {depths:?}");
                }
                db = write::Db::new(bytes).unwrap();
                db.set_fanout(fanout.0, fanout.1);
            }
        }
        let bytes = db.into_bytes();
        let left = write::Db::new(bytes.clone()).unwrap();
        for table in ["aciinfo", "remote"] {
            for ix in left.indices(table).unwrap() {
                assert!(left.bt_entries(ix.tree).unwrap().is_empty());
            }
        }
        check_allocator(&bytes);
    }
}

#[test]
fn damaged_index_pages_are_refused_not_followed() {
    let (bytes, expect) = fixture("paged");
    let victim = expected(&expect).aciinfo[100].blobkey.clone();
    let db = write::Db::new(bytes.clone()).unwrap();
    let tree = db.indices("aciinfo").unwrap()[0].tree;
    let blocks = Blocks::new(&bytes).unwrap();
    let root = blocks.get(tree).unwrap().iter().fold(0i64, |a, &b| (a << 8) | i64::from(b));
    let at = blocks::offset(root);
    // the root index page's kind, its length, each byte of its first handles
    let mut tried = 0;
    for off in at..at + 40 {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = bytes.clone();
            bad[off] ^= flip;
            let Ok(mut db) = write::Db::new(bad) else { continue };
            // never a panic, never a loop: an error or a change
            let _ = db.remove_image(&victim);
            let _ = db.put_aciinfo(&image(77));
            tried += 1;
        }
    }
    assert!(tried > 60, "{tried} damaged files tried");
    // a page of the wrong kind is named as damage
    let mut bad = bytes.clone();
    let content = if bytes[at] == blocks::TAG_LONG { at + 3 } else { at + 1 };
    bad[content] = 7;
    let err = write::Db::new(bad).unwrap().remove_image(&victim).unwrap_err();
    assert!(matches!(err, QlError::Format(_)), "{err}");
}

#[test]
fn rkts_docker_urls_read_as_normalized_references() {
    assert_eq!(rktlet_aciurl("docker://busybox"), "docker://docker.io/library/busybox:latest");
    assert_eq!(rktlet_aciurl("docker://quay.io/coreos/etcd:v3.3"), "docker://quay.io/coreos/etcd:v3.3");
    assert_eq!(rktlet_aciurl("https://example.com/a.aci"), "aci:https://example.com/a.aci");
    // what is no reference stays as rkt wrote it
    assert_eq!(rktlet_aciurl("docker://Not A Reference"), "docker://Not A Reference");
    let (db, _) = fixture("three");
    let mut rkt = parse(&db).unwrap();
    rkt.remote[0].aciurl = "docker://busybox:1.36".into();
    let mut index = Index::default();
    assert!(merge_into(&mut index, &rkt));
    assert!(index.remote.iter().any(|r| r.aciurl == "docker://docker.io/library/busybox:1.36"), "{:?}", index.remote);
}
