//! Changes to rkt's `ql.db` the way ql makes them for rkt's statements
//! (`DELETE` then `INSERT` of an `aciinfo` or `remote` row), keeping the
//! tables' indices and lldb's allocator consistent.
//!
//! Scope, refused with [`QlError::Unsupported`] beyond it:
//! - an index must be a single B-tree data page (at most 512 entries, that
//!   is 512 images or URLs; ql splits pages beyond that);
//! - indexed values must be strings, integers or null;
//! - a `time` value is written with the gob type id ql's process gave
//!   `time.Time`, learned from a time already in the file: a database with
//!   no time value yet cannot be written.
//!
//! Blocks are written uncompressed (lldb reads either). The whole file is
//! changed in memory and replaces the old one by rename, under rkt's
//! exclusive lock on `cas/db`: rkt opens the file afresh for every
//! transaction, and a crash leaves the old or the new file, never a mix.

use super::blocks::{self, ATOM, Blocks, FLT, HEADER, MAX_CONTENT, MAX_SHORT, TAG_FREE_LONG, TAG_FREE_SHORT};
use super::scalar::{self, Scalar};
use super::{CHUNK_TIME, KIND_TIME, QlError, WAL_FILE, corrupt, io_ctx};
use crate::image::cas::{AciInfo, Index, Remote};
use crate::lock;
use std::cmp::Ordering;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const SLOTS: usize = 14;
/// B-tree key/value field size, and the bytes of content kept inline when
/// the rest moves to a block of its own.
const KV: usize = 19;
const KV_INLINE: usize = KV - 1 - 7;
const DATA_PAGE: u8 = 1;
const MAX_PAGE_ITEMS: usize = 512;

/// A ql database being changed, held in memory.
pub struct Db {
    data: Vec<u8>,
    flt: [i64; SLOTS],
    time_type_id: Option<i64>,
}

fn be(bytes: &[u8]) -> i64 {
    bytes.iter().fold(0i64, |acc, &b| (acc << 8) | i64::from(b))
}

fn put7(out: &mut [u8], h: i64) {
    for (i, b) in out[..7].iter_mut().enumerate() {
        *b = (h >> (8 * (6 - i))) as u8;
    }
}

/// The free list a free block of `atoms` atoms belongs to.
fn slot(atoms: usize) -> usize {
    if atoms >= 4112 { 13 } else { (usize::BITS - 1 - atoms.leading_zeros()).min(12) as usize }
}

impl Db {
    pub fn new(data: Vec<u8>) -> Result<Db, QlError> {
        Blocks::new(&data)?;
        let mut flt = [0i64; SLOTS];
        for (i, head) in flt.iter_mut().enumerate() {
            *head = be(&data[HEADER + 8 * i..HEADER + 8 * i + 8]);
        }
        let mut db = Db { data, flt, time_type_id: None };
        db.time_type_id = db.find_time_type_id()?;
        Ok(db)
    }

    /// The file as changed.
    pub fn into_bytes(mut self) -> Vec<u8> {
        self.write_flt();
        self.data
    }

    fn get(&self, h: i64) -> Result<Vec<u8>, QlError> {
        Blocks::new(&self.data)?.get(h)
    }

    fn handle_at(off: usize) -> i64 {
        ((off - HEADER) / ATOM) as i64 - 6
    }

    fn end_handle(&self) -> i64 {
        Self::handle_at(self.data.len())
    }

    fn write_flt(&mut self) {
        for i in 0..SLOTS {
            self.data[HEADER + 8 * i..HEADER + 8 * i + 8].copy_from_slice(&self.flt[i].to_be_bytes());
        }
    }

    /// The size in atoms of the used block at `h` (a relocation is one atom).
    fn used_atoms(&self, h: i64) -> Result<usize, QlError> {
        let off = blocks::offset(h);
        let tag = *self.data.get(off).ok_or_else(|| corrupt(format!("handle {h} past the end")))?;
        Ok(match tag {
            0..=0xfb => blocks::atoms(usize::from(tag)),
            blocks::TAG_LONG => {
                let m = usize::from(self.data[off + 1]) << 8 | usize::from(self.data[off + 2]);
                blocks::atoms(if m <= MAX_SHORT { m + 0x10000 } else { m })
            }
            blocks::TAG_RELOCATED => 1,
            _ => return Err(corrupt(format!("handle {h} is a free block"))),
        })
    }

    /// (size, prev, next) of the free block at `h`.
    fn free_info(&self, h: i64) -> Result<(usize, i64, i64), QlError> {
        let off = blocks::offset(h);
        let b = self.data.get(off..off + ATOM).ok_or_else(|| corrupt(format!("free block {h} past the end")))?;
        match b[0] {
            TAG_FREE_SHORT => Ok((1, be(&b[1..8]), be(&b[8..15]))),
            TAG_FREE_LONG => {
                let b = self.data.get(off..off + 22).ok_or_else(|| corrupt(format!("free block {h} past the end")))?;
                Ok((be(&b[1..8]) as usize, be(&b[8..15]), be(&b[15..22])))
            }
            t => Err(corrupt(format!("free list entry {h} has tag {t:#x}"))),
        }
    }

    fn set_links(&mut self, h: i64, prev: Option<i64>, next: Option<i64>) {
        let off = blocks::offset(h);
        let (p, n) = if self.data[off] == TAG_FREE_SHORT { (off + 1, off + 8) } else { (off + 8, off + 15) };
        if let Some(prev) = prev {
            put7(&mut self.data[p..], prev);
        }
        if let Some(next) = next {
            put7(&mut self.data[n..], next);
        }
    }

    fn unlink_free(&mut self, h: i64) -> Result<(), QlError> {
        let (size, prev, next) = self.free_info(h)?;
        if prev == 0 {
            self.flt[slot(size)] = next;
        } else {
            self.set_links(prev, None, Some(next));
        }
        if next != 0 {
            self.set_links(next, Some(prev), None);
        }
        Ok(())
    }

    /// Marks `atoms` atoms at `h` free and puts them at the head of their list.
    fn put_free(&mut self, h: i64, atoms: usize) {
        let off = blocks::offset(h);
        let head = self.flt[slot(atoms)];
        let block = &mut self.data[off..off + atoms * ATOM];
        block.fill(0);
        if atoms == 1 {
            block[0] = TAG_FREE_SHORT;
            put7(&mut block[8..], head);
            block[15] = TAG_FREE_SHORT;
        } else {
            block[0] = TAG_FREE_LONG;
            put7(&mut block[1..], atoms as i64);
            put7(&mut block[15..], head);
            let z = atoms * ATOM - 1;
            put7(&mut block[z - 7..], atoms as i64);
            block[z] = TAG_FREE_LONG;
        }
        if head != 0 {
            self.set_links(head, Some(h), None);
        }
        self.flt[slot(atoms)] = h;
    }

    /// Frees `atoms` atoms at `h`, joining free neighbours, giving the space
    /// back to the file when it ends the file.
    fn free_range(&mut self, mut h: i64, mut atoms: usize) -> Result<(), QlError> {
        let off = blocks::offset(h);
        if off > HEADER + FLT {
            match self.data[off - 1] {
                TAG_FREE_SHORT => {
                    self.unlink_free(h - 1)?;
                    h -= 1;
                    atoms += 1;
                }
                TAG_FREE_LONG => {
                    let size = be(&self.data[off - 8..off - 1]) as usize;
                    self.unlink_free(h - size as i64)?;
                    h -= size as i64;
                    atoms += size;
                }
                _ => {}
            }
        }
        let right = h + atoms as i64;
        if right < self.end_handle() && matches!(self.data[blocks::offset(right)], TAG_FREE_SHORT | TAG_FREE_LONG) {
            let (size, _, _) = self.free_info(right)?;
            self.unlink_free(right)?;
            atoms += size;
        }
        if h + atoms as i64 == self.end_handle() {
            self.data.truncate(blocks::offset(h));
        } else {
            self.put_free(h, atoms);
        }
        Ok(())
    }

    /// Frees the block at `h` (and what a relocation points to).
    pub fn free(&mut self, h: i64) -> Result<(), QlError> {
        let off = blocks::offset(h);
        if self.data.get(off) == Some(&blocks::TAG_RELOCATED) {
            let target = be(&self.data[off + 1..off + 8]);
            let atoms = self.used_atoms(target)?;
            self.free_range(target, atoms)?;
        }
        let atoms = self.used_atoms(h)?;
        self.free_range(h, atoms)
    }

    fn write_used(&mut self, h: i64, content: &[u8]) {
        let n = content.len();
        let atoms = blocks::atoms(n);
        let off = blocks::offset(h);
        let block = &mut self.data[off..off + atoms * ATOM];
        block.fill(0);
        if n <= MAX_SHORT {
            block[0] = n as u8;
            block[1..1 + n].copy_from_slice(content);
        } else {
            let m = n % 0x10000;
            block[..3].copy_from_slice(&[blocks::TAG_LONG, (m >> 8) as u8, m as u8]);
            block[3..3 + n].copy_from_slice(content);
        }
    }

    /// Stores `content` in a new block: the first free block big enough, or
    /// the end of the file.
    pub fn alloc(&mut self, content: &[u8]) -> Result<i64, QlError> {
        if content.len() > MAX_CONTENT {
            return Err(QlError::Unsupported(format!("a block of {} bytes", content.len())));
        }
        let need = blocks::atoms(content.len());
        for s in slot(need)..SLOTS {
            let mut h = self.flt[s];
            let mut steps = 0;
            while h != 0 {
                steps += 1;
                if steps > self.data.len() / ATOM {
                    return Err(corrupt("a free list loops"));
                }
                let (size, _, next) = self.free_info(h)?;
                if size >= need {
                    self.unlink_free(h)?;
                    self.write_used(h, content);
                    if size > need {
                        self.put_free(h + need as i64, size - need);
                    }
                    self.write_flt();
                    return Ok(h);
                }
                h = next;
            }
        }
        let h = self.end_handle();
        self.data.resize(self.data.len() + need * ATOM, 0);
        self.write_used(h, content);
        Ok(h)
    }

    /// Replaces the content of block `h`, which keeps its handle.
    pub fn realloc(&mut self, h: i64, content: &[u8]) -> Result<(), QlError> {
        let need = blocks::atoms(content.len());
        let off = blocks::offset(h);
        if self.data.get(off) == Some(&blocks::TAG_RELOCATED) {
            let target = be(&self.data[off + 1..off + 8]);
            if self.used_atoms(target)? == need {
                self.write_used(target, content);
                return Ok(());
            }
            let atoms = self.used_atoms(target)?;
            self.free_range(target, atoms)?;
            let moved = self.alloc(content)?;
            put7(&mut self.data[blocks::offset(h) + 1..], moved);
            self.write_flt();
            return Ok(());
        }
        let have = self.used_atoms(h)?;
        if need <= have {
            self.write_used(h, content);
            if need < have {
                self.free_range(h + need as i64, have - need)?;
            }
        } else {
            let moved = self.alloc(content)?;
            let off = blocks::offset(h);
            self.data[off..off + ATOM].fill(0);
            self.data[off] = blocks::TAG_RELOCATED;
            put7(&mut self.data[off + 1..], moved);
            if have > 1 {
                self.free_range(h + 1, have - 1)?;
            }
        }
        self.write_flt();
        Ok(())
    }

    fn find_time_type_id(&self) -> Result<Option<i64>, QlError> {
        for t in super::tables_raw(&self.data)? {
            let cols: Vec<usize> = t.columns.iter().filter(|c| c.kind == KIND_TIME).map(|c| c.index).collect();
            for (_, row) in &t.rows {
                for &i in &cols {
                    if let Some(Scalar::Bytes(chunk)) = row.get(i)
                        && let [Scalar::Int(CHUNK_TIME), Scalar::Bytes(gob)] = scalar::decode(chunk)?.as_slice()
                    {
                        return Ok(Some(scalar::decode_gob_time(gob)?.type_id));
                    }
                }
            }
        }
        Ok(None)
    }

    fn time(&self, unix_nanos: i64) -> Result<Scalar, QlError> {
        let id = self.time_type_id.ok_or_else(|| {
            QlError::Unsupported(
                "writing a time into a database that holds none yet (the gob type id ql uses is unknown)".into(),
            )
        })?;
        let chunk = scalar::encode(&[Scalar::Int(CHUNK_TIME), Scalar::Bytes(scalar::encode_gob_time(id, unix_nanos))])?;
        Ok(Scalar::Bytes(chunk))
    }
}

/// ql's order of index keys: element by element, null first, then by value;
/// a shorter vector first when one is a prefix of the other.
fn collate(a: &[Scalar], b: &[Scalar]) -> Result<Ordering, QlError> {
    for (x, y) in a.iter().zip(b) {
        let o = match (x, y) {
            (Scalar::Null, Scalar::Null) => Ordering::Equal,
            (Scalar::Null, _) => Ordering::Less,
            (_, Scalar::Null) => Ordering::Greater,
            (Scalar::Str(x), Scalar::Str(y)) => x.as_bytes().cmp(y.as_bytes()),
            (Scalar::Int(x), Scalar::Int(y)) => x.cmp(y),
            _ => return Err(QlError::Unsupported(format!("an index over {x:?} and {y:?}"))),
        };
        if o != Ordering::Equal {
            return Ok(o);
        }
    }
    Ok(a.len().cmp(&b.len()))
}

/// One B-tree whose root is a single data page.
struct Page {
    tree: i64,
    root: i64,
    /// (key, value) of every item, in order.
    items: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Db {
    fn field(&self, f: &[u8]) -> Result<Vec<u8>, QlError> {
        let n = usize::from(f[0]);
        if n >= KV {
            let mut out = f[1..1 + KV_INLINE].to_vec();
            out.extend(self.get(be(&f[KV - 7..KV]))?);
            Ok(out)
        } else {
            Ok(f[1..1 + n].to_vec())
        }
    }

    fn free_field(&mut self, f: &[u8]) -> Result<(), QlError> {
        if usize::from(f[0]) >= KV { self.free(be(&f[KV - 7..KV])) } else { Ok(()) }
    }

    fn load_page(&self, tree: i64) -> Result<(Page, Vec<u8>), QlError> {
        let r = self.get(tree)?;
        if r.len() != 7 {
            return Err(corrupt(format!("B-tree handle {tree} holds {} bytes", r.len())));
        }
        let root = be(&r);
        if root == 0 {
            return Ok((Page { tree, root, items: Vec::new() }, Vec::new()));
        }
        let raw = self.get(root)?;
        if raw.first() != Some(&DATA_PAGE) {
            return Err(QlError::Unsupported("an index of more than one B-tree page (over 512 entries)".into()));
        }
        if raw.len() < 15 || !(raw.len() - 15).is_multiple_of(2 * KV) {
            return Err(corrupt(format!("B-tree data page of {} bytes", raw.len())));
        }
        let mut items = Vec::new();
        for item in raw[15..].chunks(2 * KV) {
            items.push((self.field(&item[..KV])?, self.field(&item[KV..])?));
        }
        Ok((Page { tree, root, items }, raw))
    }

    /// Writes `page` back, freeing the old overflow blocks and making new ones.
    fn store_page(&mut self, page: Page, old: Vec<u8>) -> Result<(), QlError> {
        if page.items.len() > MAX_PAGE_ITEMS {
            return Err(QlError::Unsupported("an index of more than 512 entries (a B-tree split)".into()));
        }
        if !old.is_empty() {
            for item in old[15..].chunks(2 * KV) {
                self.free_field(&item[..KV])?;
                self.free_field(&item[KV..])?;
            }
        }
        if page.items.is_empty() {
            if page.root != 0 {
                self.free(page.root)?;
            }
            return self.realloc(page.tree, &[0; 7]);
        }
        let mut raw = vec![0u8; 15 + 2 * KV * page.items.len()];
        raw[0] = DATA_PAGE;
        for (i, (k, v)) in page.items.iter().enumerate() {
            for (j, content) in [k, v].into_iter().enumerate() {
                let at = 15 + 2 * KV * i + KV * j;
                if content.len() < KV {
                    raw[at] = content.len() as u8;
                    raw[at + 1..at + 1 + content.len()].copy_from_slice(content);
                } else {
                    let rest = self.alloc(&content[KV_INLINE..])?;
                    raw[at] = 0xff;
                    raw[at + 1..at + 1 + KV_INLINE].copy_from_slice(&content[..KV_INLINE]);
                    put7(&mut raw[at + KV - 7..], rest);
                }
            }
        }
        if page.root == 0 {
            let root = self.alloc(&raw)?;
            let mut r = [0u8; 7];
            put7(&mut r, root);
            self.realloc(page.tree, &r)
        } else {
            self.realloc(page.root, &raw)
        }
    }

    /// The key and value ql stores in an index for `value` of record `h`.
    fn index_entry(unique: bool, value: &Scalar, h: i64) -> Result<(Vec<u8>, Vec<u8>), QlError> {
        let zero = scalar::encode(&[Scalar::Int(0)])?;
        Ok(match (unique, value) {
            (false, v) => (scalar::encode(&[v.clone(), Scalar::Int(h)])?, zero),
            (true, Scalar::Null) => (scalar::encode(&[Scalar::Null, Scalar::Int(h)])?, zero),
            (true, v) => (scalar::encode(&[v.clone(), Scalar::Int(0)])?, scalar::encode(&[Scalar::Int(h)])?),
        })
    }

    fn index_insert(&mut self, tree: i64, unique: bool, value: &Scalar, h: i64) -> Result<(), QlError> {
        let (key, val) = Self::index_entry(unique, value, h)?;
        let (mut page, old) = self.load_page(tree)?;
        let decoded = scalar::decode(&key)?;
        let mut at = page.items.len();
        for (i, (k, _)) in page.items.iter().enumerate() {
            match collate(&decoded, &scalar::decode(k)?)? {
                Ordering::Less => {
                    at = i;
                    break;
                }
                Ordering::Equal => {
                    return Err(QlError::Unsupported(format!("a duplicate in a unique index: {value:?}")));
                }
                Ordering::Greater => {}
            }
        }
        page.items.insert(at, (key, val));
        self.store_page(page, old)
    }

    fn index_delete(&mut self, tree: i64, unique: bool, value: &Scalar, h: i64) -> Result<(), QlError> {
        let (key, _) = Self::index_entry(unique, value, h)?;
        let (mut page, old) = self.load_page(tree)?;
        let decoded = scalar::decode(&key)?;
        let mut found = None;
        for (i, (k, _)) in page.items.iter().enumerate() {
            if collate(&decoded, &scalar::decode(k)?)? == Ordering::Equal {
                found = Some(i);
                break;
            }
        }
        let Some(i) = found else {
            return Err(corrupt(format!("index entry for {value:?} missing")));
        };
        page.items.remove(i);
        self.store_page(page, old)
    }
}

/// A table as the writer needs it.
struct TableMeta {
    hhead: i64,
    columns: Vec<super::Column>,
    width: usize,
    /// (column position, unique, B-tree handle) of each column index.
    indices: Vec<(usize, bool, i64)>,
}

impl Db {
    fn table(&self, name: &str) -> Result<TableMeta, QlError> {
        let root = scalar::decode(&self.get(1)?)?;
        let mut next = match root.as_slice() {
            [Scalar::Int(h)] => *h,
            _ => 0,
        };
        let mut steps = 0;
        while next != 0 {
            steps += 1;
            if steps > 4096 {
                return Err(corrupt("the table list loops"));
            }
            let meta = scalar::decode(&self.get(next)?)?;
            let field = |i: usize| meta.get(i).cloned().unwrap_or(Scalar::Null);
            if field(3) == Scalar::Str(name.to_string()) {
                let Scalar::Str(cols) = field(1) else { return Err(corrupt("table column list")) };
                let Scalar::Int(hhead) = field(2) else { return Err(corrupt("table head")) };
                let all: Vec<&str> = cols.split('|').collect();
                let columns = all
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.len() > 1)
                    .map(|(i, c)| super::Column { kind: c.as_bytes()[0], name: c[1..].to_string(), index: i })
                    .collect();
                let mut indices = Vec::new();
                if let (Scalar::Str(defs), Scalar::Int(hx)) = (field(4), field(5)) {
                    let roots = scalar::decode(&self.get(hx)?)?;
                    for (i, d) in defs.split('|').enumerate() {
                        if d.is_empty() {
                            continue;
                        }
                        if i == 0 {
                            return Err(QlError::Unsupported(format!("an id() index on {name}")));
                        }
                        let Some(Scalar::Int(tree)) = roots.get(i) else {
                            return Err(corrupt(format!("index {d} of {name} has no root")));
                        };
                        indices.push((i - 1, d.starts_with('u'), *tree));
                    }
                }
                return Ok(TableMeta { hhead, columns, width: all.len(), indices });
            }
            let Scalar::Int(n) = field(0) else { return Err(corrupt("next table")) };
            next = n;
        }
        Err(QlError::Unsupported(format!("a database without table {name}")))
    }

    /// `DELETE FROM table WHERE column == value`; returns how many rows went.
    pub fn delete_where(&mut self, table: &str, column: &str, value: &str) -> Result<usize, QlError> {
        let t = self.table(table)?;
        let col = t
            .columns
            .iter()
            .find(|c| c.name == column)
            .ok_or_else(|| QlError::Unsupported(format!("table {table} has no column {column}")))?
            .index;
        let head = scalar::decode(&self.get(t.hhead)?)?;
        let Some(Scalar::Int(mut h)) = head.first().cloned() else { return Err(corrupt("table head")) };
        let mut prev: Option<(i64, Vec<Scalar>)> = None;
        let mut removed = 0;
        let mut steps = 0;
        while h != 0 {
            steps += 1;
            if steps > self.data.len() / ATOM {
                return Err(corrupt(format!("the record list of {table} loops")));
            }
            let rec = scalar::decode(&self.get(h)?)?;
            let Some(Scalar::Int(next)) = rec.first().cloned() else { return Err(corrupt("record link")) };
            if rec.get(col + 2) == Some(&Scalar::Str(value.to_string())) {
                match &mut prev {
                    None => self.realloc(t.hhead, &scalar::encode(&[Scalar::Int(next)])?)?,
                    Some((ph, prec)) => {
                        prec[0] = Scalar::Int(next);
                        self.realloc(*ph, &scalar::encode(prec)?)?;
                    }
                }
                for &(c, unique, tree) in &t.indices {
                    let v = rec.get(c + 2).cloned().unwrap_or(Scalar::Null);
                    self.index_delete(tree, unique, &v, h)?;
                }
                for c in t.columns.iter().filter(|c| c.kind == KIND_TIME) {
                    if let Some(Scalar::Bytes(chunk)) = rec.get(c.index + 2)
                        && scalar::decode(chunk)?.len() != 2
                    {
                        return Err(QlError::Unsupported("a value stored in chunks of its own".into()));
                    }
                }
                self.free(h)?;
                removed += 1;
            } else {
                prev = Some((h, rec));
            }
            h = next;
        }
        Ok(removed)
    }

    /// `INSERT INTO table VALUES (...)` with values by column name; columns
    /// not given are null.
    pub fn insert(&mut self, table: &str, values: &[(&str, Scalar)]) -> Result<i64, QlError> {
        let t = self.table(table)?;
        let mut row = vec![Scalar::Null; t.width];
        for (name, v) in values {
            let c = t
                .columns
                .iter()
                .find(|c| c.name == *name)
                .ok_or_else(|| QlError::Unsupported(format!("table {table} has no column {name}")))?;
            row[c.index] = v.clone();
        }
        let id = be(&self.get(2)?) + 1;
        self.realloc(2, &id.to_be_bytes())?;
        let head = scalar::decode(&self.get(t.hhead)?)?;
        let Some(Scalar::Int(first)) = head.first().cloned() else { return Err(corrupt("table head")) };
        let mut rec = vec![Scalar::Int(first), Scalar::Int(id)];
        rec.extend(row.iter().cloned());
        let h = self.alloc(&scalar::encode(&rec)?)?;
        for &(c, unique, tree) in &t.indices {
            self.index_insert(tree, unique, &row[c], h)?;
        }
        self.realloc(t.hhead, &scalar::encode(&[Scalar::Int(h)])?)?;
        Ok(id)
    }

    /// rkt's `WriteACIInfo`: the row of `a.blobkey` replaced.
    pub fn put_aciinfo(&mut self, a: &AciInfo) -> Result<(), QlError> {
        self.delete_where("aciinfo", "blobkey", &a.blobkey)?;
        let importtime = self.time(a.importtime)?;
        let lastused = self.time(a.lastused)?;
        self.insert(
            "aciinfo",
            &[
                ("blobkey", Scalar::Str(a.blobkey.clone())),
                ("name", Scalar::Str(a.name.clone())),
                ("importtime", importtime),
                ("lastused", lastused),
                ("latest", Scalar::Bool(a.latest)),
                ("size", Scalar::Int(a.size)),
                ("treestoresize", Scalar::Int(a.treestoresize)),
            ],
        )
        .map(drop)
    }

    /// rkt's `WriteRemote`: the row of `r.aciurl` replaced.
    pub fn put_remote(&mut self, r: &Remote) -> Result<(), QlError> {
        self.delete_where("remote", "aciurl", &r.aciurl)?;
        let downloadtime = self.time(r.downloadtime)?;
        self.insert(
            "remote",
            &[
                ("aciurl", Scalar::Str(r.aciurl.clone())),
                ("sigurl", Scalar::Str(r.sigurl.clone())),
                ("etag", Scalar::Str(r.etag.clone())),
                ("blobkey", Scalar::Str(r.blobkey.clone())),
                ("cachemaxage", Scalar::Int(r.cachemaxage)),
                ("downloadtime", downloadtime),
            ],
        )
        .map(drop)
    }

    /// rkt's `RemoveACI`: the image's aciinfo row and its remote rows.
    pub fn remove_image(&mut self, blobkey: &str) -> Result<(), QlError> {
        self.delete_where("aciinfo", "blobkey", blobkey)?;
        self.delete_where("remote", "blobkey", blobkey)?;
        Ok(())
    }
}

/// One transaction on `db_dir/ql.db` under rkt's exclusive lock; `None`
/// (nothing done) when rkt never created the database. The file is replaced
/// only if `change` succeeds.
pub fn update_dir<T>(db_dir: &Path, change: impl FnOnce(&mut Db) -> Result<T, QlError>) -> Result<Option<T>, QlError> {
    if !db_dir.join(super::DB_FILE).exists() {
        return Ok(None);
    }
    let _lock = lock::exclusive_dir(db_dir).map_err(io_ctx(format!("locking {}", db_dir.display())))?;
    update_held(db_dir, change)
}

/// [`update_dir`] for a caller that holds the exclusive lock on `db_dir`.
pub fn update_held<T>(db_dir: &Path, change: impl FnOnce(&mut Db) -> Result<T, QlError>) -> Result<Option<T>, QlError> {
    let path = db_dir.join(super::DB_FILE);
    match fs::metadata(db_dir.join(WAL_FILE)) {
        Ok(m) if m.len() > 0 => return Err(QlError::PendingWal(path)),
        _ => {}
    }
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_ctx(format!("reading {}", path.display()))(e)),
    };
    let mode = fs::metadata(&path).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0o644);
    let mut db = Db::new(bytes)?;
    let out = change(&mut db)?;
    let data = db.into_bytes();
    let tmp = db_dir.join(format!(".ql.db.rktlet-{}", std::process::id()));
    let write = || -> io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&data)?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        fs::File::open(db_dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_ctx(format!("replacing {}", path.display()))(e)
    })?;
    Ok(Some(out))
}

/// rkt's form of a remote URL rktlet recorded: `aci:<http(s) URL>` as the
/// bare URL; `None` for what rkt keeps no remote of (a local ACI file).
pub fn rkt_aciurl(rktlet: &str) -> Option<String> {
    match rktlet.strip_prefix(crate::image::aci::ACI_PREFIX) {
        Some(url) if url.starts_with("https://") || url.starts_with("http://") => Some(url.to_string()),
        Some(_) => None,
        None => Some(rktlet.to_string()),
    }
}

/// Makes rkt's database show rktlet's index after one change of it: rows
/// the change removed are deleted, and every row of `after` that rkt's
/// database lacks or holds differently is written (rkt's DELETE + INSERT),
/// so rows from before rkt created its database get there too. Rows only
/// rkt has are left alone, and so are rows whose blob `stored` says is gone
/// (rkt removed the image: it must not come back). The caller holds the
/// exclusive lock on `db_dir`. Returns how many rows were written or deleted
/// (`None`: rkt has no database here).
pub fn mirror_held(
    db_dir: &Path,
    before: &Index,
    after: &Index,
    stored: impl Fn(&str) -> bool,
) -> Result<Option<usize>, QlError> {
    let aci_gone: Vec<&str> =
        before.aciinfo.iter().filter(|a| after.aci(&a.blobkey).is_none()).map(|a| a.blobkey.as_str()).collect();
    let remote_gone: Vec<String> = before
        .remote
        .iter()
        .filter(|r| !after.remote.iter().any(|x| x.aciurl == r.aciurl))
        .filter_map(|r| rkt_aciurl(&r.aciurl))
        .collect();
    // rkt's view of a row: without rktlet's own fields, remotes by rkt's URL
    let as_rkt = |a: &AciInfo| AciInfo { verified: false, ..a.clone() };
    let remotes: Vec<Remote> = after
        .remote
        .iter()
        .filter_map(|r| rkt_aciurl(&r.aciurl).map(|aciurl| Remote { aciurl, ..r.clone() }))
        .collect();
    update_held(db_dir, |db| {
        let rkt = super::parse(&db.data)?;
        let mut n = 0;
        for key in &aci_gone {
            n += db.delete_where("aciinfo", "blobkey", key)?;
        }
        for url in &remote_gone {
            n += db.delete_where("remote", "aciurl", url)?;
        }
        for a in after.aciinfo.iter().filter(|a| stored(&a.blobkey)).map(as_rkt) {
            if !rkt.aciinfo.contains(&a) {
                db.put_aciinfo(&a)?;
                n += 1;
            }
        }
        for r in remotes.iter().filter(|r| r.blobkey.is_empty() || stored(&r.blobkey)) {
            if !rkt.remote.contains(r) {
                db.put_remote(r)?;
                n += 1;
            }
        }
        Ok(n)
    })
}
