//! Changes to rkt's `ql.db` the way ql makes them for rkt's statements
//! (`DELETE` then `INSERT` of an `aciinfo` or `remote` row), keeping the
//! tables' indices and lldb's allocator consistent.
//!
//! Scope, refused with [`QlError::Unsupported`] beyond it:
//! - indices are lldb's B+trees of any depth; a third level of pages (over
//!   about 130000 entries in one index) was checked only against rktlet's
//!   own invariants, see docs/ql-format.md;
//! - indexed values must be strings, integers or null;
//! - a `time` value is written with the gob type id ql's process gave
//!   `time.Time`: the one of a time already in the file, else the id rkt's
//!   ql always gets (see `RKT_TIME_TYPE_ID` and docs/ql-format.md).
//!
//! Blocks are written uncompressed (lldb reads either). The whole file is
//! changed in memory and replaces the old one by rename, under rkt's
//! exclusive lock on `cas/db`: rkt opens the file afresh for every
//! transaction, and a crash leaves the old or the new file, never a mix.

use super::blocks::{self, ATOM, Blocks, FLT, HEADER, MAX_CONTENT, MAX_SHORT, TAG_FREE_LONG, TAG_FREE_SHORT};
use super::scalar::{self, Scalar};
use super::{CHUNK_TIME, KIND_TIME, QlError, WAL_FILE, corrupt, io_ctx};
use crate::index::{AciInfo, Index, Remote};
use crate::lock;
use std::cmp::Ordering;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The gob type id a ql built as rkt vendors it gives `time.Time`: ql's
/// package init is the first gob encoder of rkt's process and encodes
/// `*big.Int` (ids 65, 66: its base and pointer type), `*big.Rat` (67, 68),
/// then `time.Time` (69); see docs/ql-format.md.
pub(crate) const RKT_TIME_TYPE_ID: i64 = 69;

const SLOTS: usize = 14;
/// B-tree key/value field size, and the bytes of content kept inline when
/// the rest moves to a block of its own.
const KV: usize = 19;
const KV_INLINE: usize = KV - 1 - 7;
const DATA_PAGE: u8 = 1;

/// A ql database being changed, held in memory.
pub struct Db {
    data: Vec<u8>,
    flt: [i64; SLOTS],
    time_type_id: Option<i64>,
    /// lldb's B-tree fan-out (`K_DATA`, `K_INDEX`); tests use small ones.
    k_data: usize,
    k_index: usize,
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
    /// Takes the bytes of a `ql.db` to change them.
    pub(crate) fn new(data: Vec<u8>) -> Result<Db, QlError> {
        Blocks::new(&data)?;
        let mut flt = [0i64; SLOTS];
        for (i, head) in flt.iter_mut().enumerate() {
            *head = be(&data[HEADER + 8 * i..HEADER + 8 * i + 8]);
        }
        let mut db = Db { data, flt, time_type_id: None, k_data: K_DATA, k_index: K_INDEX };
        db.time_type_id = db.find_time_type_id()?;
        Ok(db)
    }

    /// The file as changed.
    pub(crate) fn into_bytes(mut self) -> Vec<u8> {
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
    pub(crate) fn free(&mut self, h: i64) -> Result<(), QlError> {
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
    pub(crate) fn alloc(&mut self, content: &[u8]) -> Result<i64, QlError> {
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
    pub(crate) fn realloc(&mut self, h: i64, content: &[u8]) -> Result<(), QlError> {
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

    /// The gob type id times are written with: the one in the file, else
    /// `RKT_TIME_TYPE_ID`.
    pub(crate) fn time_type_id(&self) -> i64 {
        self.time_type_id.unwrap_or(RKT_TIME_TYPE_ID)
    }

    fn time(&self, unix_nanos: i64) -> Result<Scalar, QlError> {
        let id = self.time_type_id();
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

/// lldb's B+tree as ql keeps its indices in it. The tree's handle holds the
/// 7-byte handle of the root page (zero: empty tree). A data page is
/// `1, prev, next` and items of a key and a value field (`KV` bytes each);
/// the data pages form a doubly linked list in key order. An index page is
/// `0, child 0` then pairs `(separator, child i+1)`, where the separator is
/// the handle of the leftmost data page of child i+1: its first key divides
/// the children, and stays right when items move between data pages.
///
/// Pages other than the root hold `K_DATA..=2*K_DATA` items (data) or
/// about `K_INDEX..=2*K_INDEX` separators (index); a full data page first
/// gives an item to a sibling with room, else splits in halves; a data page
/// falling under half borrows an item from a sibling or is joined with one.
/// Index pages are split (the middle separator moving up) or refilled
/// (borrowing a child, or joined with the parent's separator coming down)
/// on the way down, before a change below could need it; a root index page
/// left with one child gives way to it. This is lldb's algorithm (delayed
/// split and join), so ql finds the trees as it would make them.
/// A B-tree item: its key and value, both encoded scalar vectors.
#[cfg(test)]
pub(crate) type Entry = (Vec<u8>, Vec<u8>);

const K_DATA: usize = 256;
const K_INDEX: usize = 256;
const INDEX_PAGE: u8 = 0;
/// Bytes of one data page item (key and value field).
const ITEM: usize = 2 * KV;
/// Deepest tree walked; lldb's trees of 2^56 handles are far shallower.
const MAX_DEPTH: usize = 32;

fn h7(h: i64) -> [u8; 7] {
    let mut b = [0u8; 7];
    put7(&mut b, h);
    b
}

fn dp_len(p: &[u8]) -> usize {
    (p.len() - 15) / ITEM
}

#[cfg(test)]
fn dp_prev(p: &[u8]) -> i64 {
    be(&p[1..8])
}

fn dp_next(p: &[u8]) -> i64 {
    be(&p[8..15])
}

fn dp_item(p: &[u8], i: usize) -> &[u8] {
    &p[15 + ITEM * i..15 + ITEM * (i + 1)]
}

fn ip_len(p: &[u8]) -> usize {
    (p.len() - 8) / 14
}

fn ip_child(p: &[u8], i: usize) -> i64 {
    be(&p[1 + 14 * i..8 + 14 * i])
}

fn ip_set_child(p: &mut [u8], i: usize, h: i64) {
    put7(&mut p[1 + 14 * i..], h);
}

fn ip_sep(p: &[u8], i: usize) -> i64 {
    be(&p[8 + 14 * i..15 + 14 * i])
}

/// Inserts the pair (separator, child) after child `i`.
fn ip_insert(p: &mut Vec<u8>, i: usize, sep: i64, child: i64) {
    let at = 8 + 14 * i;
    let mut pair = [0u8; 14];
    put7(&mut pair, sep);
    put7(&mut pair[7..], child);
    p.splice(at..at, pair);
}

/// Removes child `i` and separator `i`.
fn ip_remove(p: &mut Vec<u8>, i: usize) {
    let at = 1 + 14 * i;
    p.drain(at..at + 14);
}

fn new_data_page() -> Vec<u8> {
    let mut p = vec![0u8; 15];
    p[0] = DATA_PAGE;
    p
}

/// Moves the first `n` items of `from` to the end of `to`.
fn move_to_left(from: &mut Vec<u8>, to: &mut Vec<u8>, n: usize) {
    to.extend_from_slice(&from[15..15 + ITEM * n]);
    from.drain(15..15 + ITEM * n);
}

/// Moves the last `n` items of `from` to the front of `to`.
fn move_to_right(from: &mut Vec<u8>, to: &mut Vec<u8>, n: usize) {
    let cut = from.len() - ITEM * n;
    let moved: Vec<u8> = from.drain(cut..).collect();
    to.splice(15..15, moved);
}

impl Db {
    /// The content of a key or value field (its overflow block read).
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

    /// A field holding `content`, its rest in a new block when it is long.
    fn new_field(&mut self, content: &[u8]) -> Result<[u8; KV], QlError> {
        let mut f = [0u8; KV];
        if content.len() < KV {
            f[0] = content.len() as u8;
            f[1..1 + content.len()].copy_from_slice(content);
        } else {
            f[0] = 0xff;
            f[1..1 + KV_INLINE].copy_from_slice(&content[..KV_INLINE]);
            let rest = self.alloc(&content[KV_INLINE..])?;
            put7(&mut f[KV - 7..], rest);
        }
        Ok(f)
    }

    fn free_field(&mut self, f: &[u8]) -> Result<(), QlError> {
        if usize::from(f[0]) >= KV { self.free(be(&f[KV - 7..KV])) } else { Ok(()) }
    }

    /// The root page of `tree` (0: empty).
    fn tree_root(&self, tree: i64) -> Result<i64, QlError> {
        let r = self.get(tree)?;
        if r.len() != 7 {
            return Err(corrupt(format!("B-tree handle {tree} holds {} bytes", r.len())));
        }
        Ok(be(&r))
    }

    /// A B-tree page, its shape checked.
    fn page(&self, h: i64) -> Result<Vec<u8>, QlError> {
        let p = self.get(h)?;
        let ok = match p.first() {
            Some(&DATA_PAGE) => p.len() >= 15 && (p.len() - 15).is_multiple_of(ITEM),
            Some(&INDEX_PAGE) => p.len() >= 22 && (p.len() - 8).is_multiple_of(14),
            _ => false,
        };
        if !ok {
            return Err(corrupt(format!("B-tree page {h} of {} bytes", p.len())));
        }
        Ok(p)
    }

    fn data_page(&self, h: i64) -> Result<Vec<u8>, QlError> {
        let p = self.page(h)?;
        if p[0] != DATA_PAGE {
            return Err(corrupt(format!("B-tree page {h} is not a data page")));
        }
        Ok(p)
    }

    fn dp_key(&self, p: &[u8], i: usize) -> Result<Vec<Scalar>, QlError> {
        scalar::decode(&self.field(&dp_item(p, i)[..KV])?)
    }

    /// lldb's binary search in a page: (position, found). In an index page a
    /// key is compared with the first key of each separator page.
    fn find(&self, p: &[u8], key: &[Scalar]) -> Result<(usize, bool), QlError> {
        let index = p[0] == INDEX_PAGE;
        let (mut lo, mut hi) = (0isize, if index { ip_len(p) } else { dp_len(p) } as isize - 1);
        while lo <= hi {
            let mid = ((lo + hi) >> 1) as usize;
            let other = if index {
                let sep = self.data_page(ip_sep(p, mid))?;
                if dp_len(&sep) == 0 {
                    return Err(corrupt("an empty B-tree separator page"));
                }
                self.dp_key(&sep, 0)?
            } else {
                self.dp_key(p, mid)?
            };
            match collate(key, &other)? {
                Ordering::Greater => lo = mid as isize + 1,
                Ordering::Equal => return Ok((mid, true)),
                Ordering::Less => hi = mid as isize - 1,
            }
        }
        Ok((lo as usize, false))
    }

    /// Inserts an item at `i` of data page `p`.
    fn dp_insert(&mut self, p: &mut Vec<u8>, i: usize, key: &[u8], value: &[u8]) -> Result<(), QlError> {
        let mut item = [0u8; ITEM];
        item[..KV].copy_from_slice(&self.new_field(key)?);
        item[KV..].copy_from_slice(&self.new_field(value)?);
        let at = 15 + ITEM * i;
        p.splice(at..at, item);
        Ok(())
    }

    /// The left and right siblings of child `pi` of index page `parent`.
    fn siblings(&self, parent: i64, pi: Option<usize>) -> Result<(i64, i64), QlError> {
        let Some(pi) = pi else { return Ok((0, 0)) };
        let pp = self.page(parent)?;
        let left = if pi > 0 { ip_child(&pp, pi - 1) } else { 0 };
        let right = if pi < ip_len(&pp) { ip_child(&pp, pi + 1) } else { 0 };
        Ok((left, right))
    }

    /// Adds `key` (not yet in the tree) with `value` to the B-tree `tree`.
    fn bt_insert(&mut self, tree: i64, key: &[u8], value: &[u8]) -> Result<(), QlError> {
        let want = scalar::decode(key)?;
        let iroot = self.tree_root(tree)?;
        if iroot == 0 {
            let mut p = new_data_page();
            self.dp_insert(&mut p, 0, key, value)?;
            let h = self.alloc(&p)?;
            return self.realloc(tree, &h7(h));
        }
        let (mut parent, mut pi, mut ph) = (0, None, iroot);
        for _ in 0..MAX_DEPTH {
            let mut p = self.page(ph)?;
            let (index, found) = self.find(&p, &want)?;
            if found {
                return Err(QlError::Unsupported(format!("a duplicate index key {want:?}")));
            }
            if p[0] == INDEX_PAGE {
                let mut index = index;
                if ip_len(&p) > 2 * self.k_index {
                    p = self.ip_split(tree, &mut ph, parent, pi, &mut index, p)?;
                }
                (parent, pi, ph) = (ph, Some(index), ip_child(&p, index));
                continue;
            }
            if dp_len(&p) < 2 * self.k_data {
                self.dp_insert(&mut p, index, key, value)?;
                return self.realloc(ph, &p);
            }
            return self.dp_overflow(tree, ph, p, parent, pi, index, key, value);
        }
        Err(corrupt(format!("B-tree {tree} deeper than {MAX_DEPTH} levels")))
    }

    /// Inserts into the full data page `p`: an item moves to a sibling with
    /// room, or the page splits.
    #[allow(clippy::too_many_arguments)]
    fn dp_overflow(
        &mut self,
        tree: i64,
        ph: i64,
        mut p: Vec<u8>,
        parent: i64,
        pi: Option<usize>,
        index: usize,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), QlError> {
        let (lh, rh) = self.siblings(parent, pi)?;
        if lh != 0 {
            let mut left = self.data_page(lh)?;
            if dp_len(&left) < 2 * self.k_data && index > 0 {
                move_to_left(&mut p, &mut left, 1);
                self.realloc(lh, &left)?;
                self.dp_insert(&mut p, index - 1, key, value)?;
                return self.realloc(ph, &p);
            }
        }
        if rh != 0 {
            let mut right = self.data_page(rh)?;
            if dp_len(&right) < 2 * self.k_data {
                if index < 2 * self.k_data {
                    move_to_right(&mut p, &mut right, 1);
                    self.realloc(rh, &right)?;
                    self.dp_insert(&mut p, index, key, value)?;
                    return self.realloc(ph, &p);
                }
                self.dp_insert(&mut right, 0, key, value)?;
                return self.realloc(rh, &right);
            }
        }
        // split: the upper half moves to a new page after p
        let mut right = new_data_page();
        let rh = self.alloc(&right)?;
        let next = dp_next(&p);
        if next != 0 {
            put7(&mut right[8..], next);
            let mut nx = self.data_page(next)?;
            put7(&mut nx[1..], rh);
            self.realloc(next, &nx)?;
        }
        put7(&mut p[8..], rh);
        put7(&mut right[1..], ph);
        let n = dp_len(&p);
        move_to_right(&mut p, &mut right, n - self.k_data);
        self.link_split(tree, parent, pi, ph, rh, rh)?;
        if index > self.k_data {
            self.dp_insert(&mut right, index - self.k_data, key, value)?;
        } else {
            self.dp_insert(&mut p, index, key, value)?;
        }
        self.realloc(ph, &p)?;
        self.realloc(rh, &right)
    }

    /// Removes `key` from the B-tree `tree`; an error if it is not there.
    fn bt_delete(&mut self, tree: i64, key: &[u8]) -> Result<(), QlError> {
        let want = scalar::decode(key)?;
        let missing = || corrupt(format!("index entry {want:?} missing"));
        let iroot = self.tree_root(tree)?;
        if iroot == 0 {
            return Err(missing());
        }
        let (mut parent, mut pi, mut ph) = (0, None, iroot);
        for _ in 0..MAX_DEPTH {
            let mut p = self.page(ph)?;
            let (index, found) = self.find(&p, &want)?;
            if p[0] == INDEX_PAGE {
                if found {
                    // the key is the first of the separator page
                    let dph = ip_sep(&p, index);
                    let mut dp = self.data_page(dph)?;
                    if dp_len(&dp) > self.k_data {
                        self.dp_remove(&mut dp, 0)?;
                        return self.realloc(dph, &dp);
                    }
                }
                let mut index = index;
                if ip_len(&p) < self.k_index && ph != iroot {
                    p = self.ip_underflow(tree, iroot, parent, pi, &mut ph, &mut index, p)?;
                }
                let next = if found { index + 1 } else { index };
                (parent, pi, ph) = (ph, Some(next), ip_child(&p, next));
                continue;
            }
            if !found {
                return Err(missing());
            }
            self.dp_remove(&mut p, index)?;
            if dp_len(&p) >= self.k_data {
                return self.realloc(ph, &p);
            }
            if ph != iroot {
                return self.dp_underflow(tree, iroot, parent, pi, ph, p);
            }
            if dp_len(&p) == 0 {
                self.free(ph)?;
                return self.realloc(tree, &[0; 7]);
            }
            return self.realloc(ph, &p);
        }
        Err(corrupt(format!("B-tree {tree} deeper than {MAX_DEPTH} levels")))
    }

    /// Hangs `right`, the new upper half of split page `left`, beside it
    /// under separator `sep`: in `parent` after child `pi`, or, when `left`
    /// was the root (`pi` none), under a new root index page.
    fn link_split(
        &mut self,
        tree: i64,
        parent: i64,
        pi: Option<usize>,
        left: i64,
        sep: i64,
        right: i64,
    ) -> Result<(), QlError> {
        match pi {
            Some(pi) => {
                let mut pp = self.page(parent)?;
                ip_insert(&mut pp, pi, sep, right);
                self.realloc(parent, &pp)
            }
            None => {
                let mut root = vec![INDEX_PAGE];
                root.extend_from_slice(&h7(left));
                ip_insert(&mut root, 0, sep, right);
                let nrh = self.alloc(&root)?;
                self.realloc(tree, &h7(nrh))
            }
        }
    }

    /// Splits the over-full index page `p` (at `ph`, child `pi` of
    /// `parent`) on the way down: its middle separator moves up. Returns the
    /// half the descent continues in, `ph` and `index` changed to it.
    fn ip_split(
        &mut self,
        tree: i64,
        ph: &mut i64,
        parent: i64,
        pi: Option<usize>,
        index: &mut usize,
        mut p: Vec<u8>,
    ) -> Result<Vec<u8>, QlError> {
        let k = self.k_index;
        let up = ip_sep(&p, k);
        let mut right = vec![INDEX_PAGE];
        right.extend_from_slice(&p[1 + 14 * (k + 1)..]);
        p.truncate(8 + 14 * k);
        self.realloc(*ph, &p)?;
        let rh = self.alloc(&right)?;
        self.link_split(tree, parent, pi, *ph, up, rh)?;
        if *index > k {
            *ph = rh;
            *index -= k + 1;
            return Ok(right);
        }
        Ok(p)
    }

    /// Index page `p` (not the root) has fewer than `k_index` separators on
    /// the way down a delete: it takes a child from a sibling that can spare
    /// one, or is joined with a sibling. Returns the page the descent
    /// continues in, `ph` and `index` changed to it.
    #[allow(clippy::too_many_arguments)]
    fn ip_underflow(
        &mut self,
        tree: i64,
        iroot: i64,
        parent: i64,
        pi: Option<usize>,
        ph: &mut i64,
        index: &mut usize,
        mut p: Vec<u8>,
    ) -> Result<Vec<u8>, QlError> {
        let Some(pi) = pi else { return Err(corrupt("a B-tree page without a parent")) };
        let (lh, rh) = self.siblings(parent, Some(pi))?;
        let k = self.k_index;
        if lh != 0 {
            let mut left = self.page(lh)?;
            let lc = ip_len(&left);
            if left[0] == INDEX_PAGE && lc > k {
                let mut pp = self.page(parent)?;
                let mut first = [0u8; 14];
                put7(&mut first, ip_child(&left, lc));
                put7(&mut first[7..], ip_sep(&pp, pi - 1));
                p.splice(1..1, first);
                *index += 1;
                put7(&mut pp[8 + 14 * (pi - 1)..], ip_sep(&left, lc - 1));
                left.truncate(8 + 14 * (lc - 1));
                self.realloc(parent, &pp)?;
                self.realloc(*ph, &p)?;
                self.realloc(lh, &left)?;
                return Ok(p);
            }
        }
        if rh != 0 {
            let mut right = self.page(rh)?;
            if right[0] == INDEX_PAGE && ip_len(&right) > k {
                let mut pp = self.page(parent)?;
                p.extend_from_slice(&h7(ip_sep(&pp, pi)));
                p.extend_from_slice(&h7(ip_child(&right, 0)));
                put7(&mut pp[8 + 14 * pi..], ip_sep(&right, 0));
                right.drain(1..15);
                self.realloc(parent, &pp)?;
                self.realloc(*ph, &p)?;
                self.realloc(rh, &right)?;
                return Ok(p);
            }
        }
        if lh != 0 {
            let left = self.page(lh)?;
            *index += ip_len(&left) + 1;
            let joined = self.ip_concat(tree, iroot, parent, pi - 1, lh, left, *ph)?;
            *ph = lh;
            return Ok(joined);
        }
        if rh == 0 {
            return Err(corrupt(format!("B-tree page {} has no sibling", *ph)));
        }
        self.ip_concat(tree, iroot, parent, pi, *ph, p, rh)
    }

    /// Joins index page `rh` (child `pi + 1` of `parent`) into `p` (child
    /// `pi`), with the parent's separator between them coming down.
    #[allow(clippy::too_many_arguments)]
    fn ip_concat(
        &mut self,
        tree: i64,
        iroot: i64,
        parent: i64,
        pi: usize,
        ph: i64,
        mut p: Vec<u8>,
        rh: i64,
    ) -> Result<Vec<u8>, QlError> {
        let mut pp = self.page(parent)?;
        let right = self.page(rh)?;
        if right[0] != INDEX_PAGE || p[0] != INDEX_PAGE {
            return Err(corrupt(format!("B-tree pages {ph} and {rh} differ in kind")));
        }
        p.extend_from_slice(&h7(ip_sep(&pp, pi)));
        p.extend_from_slice(&right[1..]);
        self.realloc(ph, &p)?;
        self.free(rh)?;
        if ip_len(&pp) > 1 {
            pp.drain(8 + 14 * pi..8 + 14 * (pi + 1));
            self.realloc(parent, &pp)?;
            return Ok(p);
        }
        if parent != iroot {
            return Err(corrupt(format!("B-tree index page {parent} with a single child")));
        }
        self.free(iroot)?;
        self.realloc(tree, &h7(ph))?;
        Ok(p)
    }

    /// Uses lldb's B-tree fan-out `k_data`/`k_index` instead of 256 (tests
    /// of deep trees; ql itself reads any page sizes but refills to 256).
    #[cfg(test)]
    pub(crate) fn set_fanout(&mut self, k_data: usize, k_index: usize) {
        self.k_data = k_data;
        self.k_index = k_index;
    }

    /// Removes item `i` of data page `p`, freeing its overflow blocks.
    fn dp_remove(&mut self, p: &mut Vec<u8>, i: usize) -> Result<(), QlError> {
        let item = dp_item(p, i).to_vec();
        self.free_field(&item[..KV])?;
        self.free_field(&item[KV..])?;
        p.drain(15 + ITEM * i..15 + ITEM * (i + 1));
        Ok(())
    }

    /// Data page `p` (not the root) fell under half: it borrows an item from
    /// a sibling that can spare one, or is joined with a sibling.
    fn dp_underflow(
        &mut self,
        tree: i64,
        iroot: i64,
        parent: i64,
        pi: Option<usize>,
        ph: i64,
        mut p: Vec<u8>,
    ) -> Result<(), QlError> {
        let Some(pi) = pi else { return Err(corrupt("a B-tree page without a parent")) };
        let (lh, rh) = self.siblings(parent, Some(pi))?;
        if lh != 0 {
            let mut left = self.data_page(lh)?;
            if dp_len(&left) + dp_len(&p) >= 2 * self.k_data {
                move_to_right(&mut left, &mut p, 1);
                self.realloc(lh, &left)?;
                return self.realloc(ph, &p);
            }
        }
        if rh != 0 {
            let mut right = self.data_page(rh)?;
            if dp_len(&p) + dp_len(&right) > 2 * self.k_data {
                move_to_left(&mut right, &mut p, 1);
                self.realloc(rh, &right)?;
                return self.realloc(ph, &p);
            }
        }
        if lh != 0 {
            let left = self.data_page(lh)?;
            self.realloc(ph, &p)?;
            return self.dp_concat(tree, iroot, parent, pi - 1, lh, left, ph);
        }
        if rh == 0 {
            return Err(corrupt(format!("B-tree page {ph} has no sibling")));
        }
        self.dp_concat(tree, iroot, parent, pi, ph, p, rh)
    }

    /// Joins data page `rh` (child `pi + 1` of `parent`) into `p` (child `pi`).
    #[allow(clippy::too_many_arguments)]
    fn dp_concat(
        &mut self,
        tree: i64,
        iroot: i64,
        parent: i64,
        pi: usize,
        ph: i64,
        mut p: Vec<u8>,
        rh: i64,
    ) -> Result<(), QlError> {
        let mut right = self.data_page(rh)?;
        let n = dp_len(&right);
        move_to_left(&mut right, &mut p, n);
        let next = dp_next(&right);
        if next != 0 {
            let mut nx = self.data_page(next)?;
            put7(&mut nx[1..], ph);
            self.realloc(next, &nx)?;
        }
        put7(&mut p[8..], next);
        self.free(rh)?;
        let mut pp = self.page(parent)?;
        if ip_len(&pp) > 1 {
            ip_remove(&mut pp, pi);
            ip_set_child(&mut pp, pi, ph);
            self.realloc(parent, &pp)?;
            return self.realloc(ph, &p);
        }
        if parent != iroot {
            return Err(corrupt(format!("B-tree index page {parent} with a single child")));
        }
        // the root index page gives way to its only child
        self.free(iroot)?;
        self.realloc(ph, &p)?;
        self.realloc(tree, &h7(ph))
    }

    #[cfg(test)]
    /// Every (key, value) of `tree` in key order, along the data page list.
    pub(crate) fn bt_entries(&self, tree: i64) -> Result<Vec<Entry>, QlError> {
        let mut h = self.tree_root(tree)?;
        let mut depth = 0;
        while h != 0 {
            let p = self.page(h)?;
            if p[0] == DATA_PAGE {
                break;
            }
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(corrupt(format!("B-tree {tree} deeper than {MAX_DEPTH} levels")));
            }
            h = ip_child(&p, 0);
        }
        let mut out = Vec::new();
        let mut prev = 0;
        while h != 0 {
            if out.len() > self.data.len() / ATOM {
                return Err(corrupt(format!("the data pages of B-tree {tree} loop")));
            }
            let p = self.data_page(h)?;
            if dp_prev(&p) != prev {
                return Err(corrupt(format!("B-tree page {h} links back to {} not {prev}", dp_prev(&p))));
            }
            for i in 0..dp_len(&p) {
                let item = dp_item(&p, i);
                out.push((self.field(&item[..KV])?, self.field(&item[KV..])?));
            }
            prev = h;
            h = dp_next(&p);
        }
        Ok(out)
    }

    #[cfg(test)]
    /// The value of `key` in `tree`, found from the root down as lldb does.
    pub(crate) fn bt_get(&self, tree: i64, key: &[u8]) -> Result<Option<Vec<u8>>, QlError> {
        let want = scalar::decode(key)?;
        let mut h = self.tree_root(tree)?;
        for _ in 0..MAX_DEPTH {
            if h == 0 {
                return Ok(None);
            }
            let p = self.page(h)?;
            let (index, found) = self.find(&p, &want)?;
            match (p[0] == INDEX_PAGE, found) {
                (true, true) => {
                    let dp = self.data_page(ip_sep(&p, index))?;
                    return Ok(Some(self.field(&dp_item(&dp, 0)[KV..])?));
                }
                (true, false) => h = ip_child(&p, index),
                (false, true) => return Ok(Some(self.field(&dp_item(&p, index)[KV..])?)),
                (false, false) => return Ok(None),
            }
        }
        Err(corrupt(format!("B-tree {tree} deeper than {MAX_DEPTH} levels")))
    }

    #[cfg(test)]
    /// Checks lldb's shape of `tree`: leaves all at one depth, pages other
    /// than the root at least half full, keys ascending, each separator the
    /// leftmost data page of the child after it. Returns (depth, pages).
    pub(crate) fn bt_check(&self, tree: i64) -> Result<(usize, usize), QlError> {
        let root = self.tree_root(tree)?;
        if root == 0 {
            return Ok((0, 0));
        }
        let mut leaves = Vec::new();
        let depth = self.check_page(root, true, 1, &mut leaves)?;
        for w in leaves.windows(2) {
            let (a, b) = (self.data_page(w[0])?, self.data_page(w[1])?);
            if dp_next(&a) != w[1] || dp_prev(&b) != w[0] {
                return Err(corrupt(format!("data pages {} and {} are not linked", w[0], w[1])));
            }
        }
        let entries = self.bt_entries(tree)?;
        for w in entries.windows(2) {
            if collate(&scalar::decode(&w[0].0)?, &scalar::decode(&w[1].0)?)? != Ordering::Less {
                return Err(corrupt(format!("B-tree {tree} keys out of order")));
            }
        }
        Ok((depth, leaves.len()))
    }

    #[cfg(test)]
    fn check_page(&self, h: i64, root: bool, level: usize, leaves: &mut Vec<i64>) -> Result<usize, QlError> {
        if level > MAX_DEPTH {
            return Err(corrupt("B-tree too deep"));
        }
        let p = self.page(h)?;
        if p[0] == DATA_PAGE {
            let n = dp_len(&p);
            if n > 2 * self.k_data || (!root && n < self.k_data) || n == 0 {
                return Err(corrupt(format!("data page {h} holds {n} items")));
            }
            leaves.push(h);
            return Ok(level);
        }
        let n = ip_len(&p);
        // a join below may leave one separator fewer until the next descent
        if n > 2 * self.k_index + 1 || (!root && n + 1 < self.k_index) || n == 0 {
            return Err(corrupt(format!("index page {h} holds {n} separators")));
        }
        let mut depth = None;
        for i in 0..=n {
            let first = leaves.len();
            let d = self.check_page(ip_child(&p, i), false, level + 1, leaves)?;
            if *depth.get_or_insert(d) != d {
                return Err(corrupt(format!("index page {h} has children of unequal depth")));
            }
            if i > 0 && leaves.get(first) != Some(&ip_sep(&p, i - 1)) {
                return Err(corrupt(format!("separator {} of index page {h} is not its child's first page", i - 1)));
            }
        }
        Ok(depth.unwrap_or(level))
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
        self.bt_insert(tree, &key, &val).map_err(|e| match e {
            QlError::Unsupported(m) if m.starts_with("a duplicate") => {
                QlError::Unsupported(format!("a duplicate in a unique index: {value:?}"))
            }
            e => e,
        })
    }

    fn index_delete(&mut self, tree: i64, unique: bool, value: &Scalar, h: i64) -> Result<(), QlError> {
        let (key, _) = Self::index_entry(unique, value, h)?;
        self.bt_delete(tree, &key)
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

#[cfg(test)]
/// One index of a table: the column, whether it is unique, its B-tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IndexTree {
    /// The column indexed.
    pub column: String,
    /// Whether the index is unique.
    pub unique: bool,
    /// The handle of the index's B-tree.
    pub tree: i64,
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

    #[cfg(test)]
    /// The column indices of `table`.
    pub(crate) fn indices(&self, table: &str) -> Result<Vec<IndexTree>, QlError> {
        let t = self.table(table)?;
        let mut out = Vec::new();
        for &(c, unique, tree) in &t.indices {
            let column = t.columns.iter().find(|x| x.index == c).map(|x| x.name.clone()).unwrap_or_default();
            out.push(IndexTree { column, unique, tree });
        }
        Ok(out)
    }

    #[cfg(test)]
    /// Looks `value` of record `h` up through index `ix` from the tree's
    /// root, as ql finds a row by an indexed column: the record handle the
    /// entry leads to, `None` without an entry.
    pub(crate) fn index_find(&self, ix: &IndexTree, value: &Scalar, h: i64) -> Result<Option<i64>, QlError> {
        let (key, _) = Self::index_entry(ix.unique, value, h)?;
        let Some(v) = self.bt_get(ix.tree, &key)? else { return Ok(None) };
        if !ix.unique || *value == Scalar::Null {
            return Ok(Some(h));
        }
        match scalar::decode(&v)?.as_slice() {
            [Scalar::Int(found)] => Ok(Some(*found)),
            other => Err(corrupt(format!("unique index value {other:?}"))),
        }
    }

    /// `DELETE FROM table WHERE column == value`; returns how many rows went.
    pub(crate) fn delete_where(&mut self, table: &str, column: &str, value: &str) -> Result<usize, QlError> {
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
    pub(crate) fn insert(&mut self, table: &str, values: &[(&str, Scalar)]) -> Result<i64, QlError> {
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
    pub(crate) fn put_aciinfo(&mut self, a: &AciInfo) -> Result<(), QlError> {
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
    update_held(db_dir, false, change)
}

/// The database rkt 1.30 makes when it opens a store that has none: its
/// schema (version 7) and no rows, as the real ql wrote it
/// (`tests/fixtures/ql/empty.db`, the same bytes). rktlet starts from it in
/// a store rkt never opened, so rkt finds rktlet's images there.
pub(crate) const EMPTY_DB: &[u8] = include_bytes!("empty.db");

/// The mode rkt gives its database (it runs with umask 0).
const DB_MODE: u32 = 0o666;

/// [`update_dir`] for a caller that holds the exclusive lock on `db_dir`.
/// With `create`, a store without rkt's database gets one ([`EMPTY_DB`]
/// with the change); without, nothing is done there (`None`).
pub(crate) fn update_held<T>(
    db_dir: &Path,
    create: bool,
    change: impl FnOnce(&mut Db) -> Result<T, QlError>,
) -> Result<Option<T>, QlError> {
    let path = db_dir.join(super::DB_FILE);
    match fs::metadata(db_dir.join(WAL_FILE)) {
        Ok(m) if m.len() > 0 => return Err(QlError::PendingWal(path)),
        _ => {}
    }
    let (bytes, mode) = match fs::read(&path) {
        Ok(b) => (b, fs::metadata(&path).map(|m| m.permissions().mode() & 0o7777).unwrap_or(DB_MODE)),
        Err(e) if e.kind() == io::ErrorKind::NotFound && create => (EMPTY_DB.to_vec(), DB_MODE),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_ctx(format!("reading {}", path.display()))(e)),
    };
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
pub(crate) fn rkt_aciurl(rktlet: &str) -> Option<String> {
    match rktlet.strip_prefix(crate::index::ACI_PREFIX) {
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
/// (rkt removed the image: it must not come back). A store without rkt's
/// database gets one, as rkt would make it, with every row of `after`: rkt
/// then lists the images of a store only rktlet filled. The caller holds the
/// exclusive lock on `db_dir`. Returns how many rows were written or deleted.
pub(crate) fn mirror_held(
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
    update_held(db_dir, true, |db| {
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
