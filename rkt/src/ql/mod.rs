//! rkt's image index, `cas/db/ql.db`: a cznic/ql database (the format is
//! described in `docs/ql-format.md`). This module reads its `aciinfo` and
//! `remote` tables so that images rkt fetched are visible to rktlet.
//!
//! rkt opens the database for every transaction while holding an exclusive
//! flock on `cas/db`; [`read_dir`] holds a shared one while it reads, so it
//! never sees a transaction half done. ql keeps a write-ahead log beside the
//! file that is empty between transactions; a non-empty one means a
//! transaction was interrupted, and ql itself refuses to open the database
//! then, so this reader refuses too.

mod blocks;
pub(crate) mod scalar;
pub mod write;

use crate::index::{AciInfo, Index, Remote};
use crate::lock;
use blocks::Blocks;
use scalar::Scalar;
use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The database file rkt keeps in `cas/db`.
pub const DB_FILE: &str = "ql.db";
/// ql's write-ahead log of `ql.db`: "." and the hex SHA-1 of the file name.
pub(crate) const WAL_FILE: &str = ".34a8b4c1ad933745146fdbfef3073706ee571625";
/// The schema version rkt 1.30 writes in its `version` table.
pub const RKT_DB_VERSION: i64 = 7;

/// Errors reading or changing a ql database.
#[derive(Debug, thiserror::Error)]
pub enum QlError {
    /// A file system operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: io::Error,
    },
    /// The file is not a well-formed ql database (what is wrong).
    #[error("corrupted ql database: {0}")]
    Format(String),
    /// Valid ql, beyond what this module reads or writes (what it is).
    #[error("unsupported in a ql database: {0}")]
    Unsupported(String),
    /// The database's write-ahead log is not empty: a transaction was
    /// interrupted (it holds the database's path).
    #[error(
        "{0} holds an interrupted rkt transaction (its write-ahead log is not empty); run any rkt image command to recover it"
    )]
    PendingWal(PathBuf),
}

fn io_ctx(context: impl Into<String>) -> impl FnOnce(io::Error) -> QlError {
    let context = context.into();
    move |source| QlError::Io { context, source }
}

/// What rktlet uses of rkt's database.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tables {
    /// The `version` table's row (rkt's schema version), if present.
    pub version: Option<i64>,
    /// The `aciinfo` table's rows, oldest first.
    pub aciinfo: Vec<AciInfo>,
    /// The `remote` table's rows, oldest first.
    pub remote: Vec<Remote>,
}

/// Reads `db_dir/ql.db` under a shared lock on `db_dir`; `None` if there is
/// no such file (rkt never used this store).
pub fn read_dir(db_dir: &Path) -> Result<Option<Tables>, QlError> {
    with_db(db_dir, |path| match fs::read(path) {
        Ok(bytes) => parse(&bytes),
        Err(e) => Err(io_ctx(format!("reading {}", path.display()))(e)),
    })
}

/// Runs `read` on the path of `db_dir/ql.db` while holding a shared lock on
/// `db_dir` (rkt takes it exclusive for each transaction), after checking
/// that no interrupted transaction is pending. `None` without a `ql.db`.
pub fn with_db<T>(db_dir: &Path, read: impl FnOnce(&Path) -> Result<T, QlError>) -> Result<Option<T>, QlError> {
    let path = db_dir.join(DB_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let _lock = lock::shared_dir(db_dir).map_err(io_ctx(format!("locking {}", db_dir.display())))?;
    if !path.exists() {
        return Ok(None);
    }
    let wal = db_dir.join(WAL_FILE);
    match fs::metadata(&wal) {
        Ok(m) if m.len() > 0 => return Err(QlError::PendingWal(path)),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_ctx(format!("reading {}", wal.display()))(e)),
    }
    read(&path).map(Some)
}

/// rkt records an ACI fetched from a URL under the bare URL; rktlet prefixes
/// the URLs it fetched ACIs from with `aci:`. rkt records a docker image
/// under the URL as the user wrote it (`docker://busybox`); rktlet under the
/// normalized reference (`docker://docker.io/library/busybox:latest`), which
/// is how a reference finds it.
pub(crate) fn rktlet_aciurl(rkt: &str) -> String {
    if rkt.starts_with("https://") || rkt.starts_with("http://") {
        format!("{}{rkt}", crate::index::ACI_PREFIX)
    } else if let Some(rest) = rkt.strip_prefix("docker://")
        && let Ok(r) = rest.parse::<crate::reference::Reference>()
    {
        format!("docker://{r}")
    } else {
        rkt.to_string()
    }
}

/// Adds to `index` what rkt's tables have and it lacks: images by key, and
/// remotes by URL (in rktlet's form) of the images added. Returns whether
/// anything was added.
pub fn merge_into(index: &mut Index, rkt: &Tables) -> bool {
    let mut added = HashSet::new();
    for a in &rkt.aciinfo {
        if index.aci(&a.blobkey).is_none() {
            added.insert(a.blobkey.clone());
            index.aciinfo.push(a.clone());
        }
    }
    for r in rkt.remote.iter().filter(|r| added.contains(&r.blobkey)) {
        let aciurl = rktlet_aciurl(&r.aciurl);
        if !index.remote.iter().any(|x| x.aciurl == aciurl) {
            index.remote.push(Remote { aciurl, ..r.clone() });
        }
    }
    !added.is_empty()
}

/// A column as ql records it: its type letter, name and position in a record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Column {
    /// The type letter (`s` string, `l` int64, `b` bool, `T` time, ...).
    pub kind: u8,
    /// The column's name.
    pub name: String,
    /// Index of the value in a record (after the next-record link and the id).
    pub index: usize,
}

/// One table read whole.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Table {
    /// The table's name.
    pub name: String,
    /// Its columns, in record order.
    pub columns: Vec<Column>,
    /// Rows as stored, newest first, each with its record id.
    pub rows: Vec<(i64, Vec<Scalar>)>,
}

impl Table {
    /// The value of column `name` in `row`; `Null` if the row predates the column.
    fn value<'r>(&self, row: &'r [Scalar], name: &str) -> Result<&'r Scalar, QlError> {
        let col = self
            .columns
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| QlError::Unsupported(format!("table {} has no column {name}", self.name)))?;
        Ok(row.get(col.index).unwrap_or(&Scalar::Null))
    }
}

/// The type letters ql writes in a table's column list.
const KIND_TIME: u8 = b'T';

fn corrupt(detail: impl Into<String>) -> QlError {
    QlError::Format(detail.into())
}

fn int_at(v: &[Scalar], i: usize, what: &str) -> Result<i64, QlError> {
    match v.get(i) {
        Some(Scalar::Int(n)) => Ok(*n),
        other => Err(corrupt(format!("{what}: expected an integer, found {other:?}"))),
    }
}

fn str_at<'v>(v: &'v [Scalar], i: usize, what: &str) -> Result<&'v str, QlError> {
    match v.get(i) {
        Some(Scalar::Str(s)) => Ok(s),
        other => Err(corrupt(format!("{what}: expected a string, found {other:?}"))),
    }
}

/// Reads every table of a ql database held in memory, times as Unix nanoseconds.
pub(crate) fn tables(data: &[u8]) -> Result<Vec<Table>, QlError> {
    let blocks = Blocks::new(data)?;
    let mut out = tables_raw(data)?;
    // resolve time values (stored out of line as gob messages)
    for t in &mut out {
        let time_cols: Vec<usize> = t.columns.iter().filter(|c| c.kind == KIND_TIME).map(|c| c.index).collect();
        for (_, row) in &mut t.rows {
            for &i in &time_cols {
                if let Some(v) = row.get_mut(i)
                    && let Scalar::Bytes(chunk) = v
                {
                    *v = Scalar::Int(time_chunk(&blocks, chunk)?.unix_nanos);
                }
            }
        }
    }
    Ok(out)
}

/// Every table with its values as stored (times as their chunk bytes).
fn tables_raw(data: &[u8]) -> Result<Vec<Table>, QlError> {
    let blocks = Blocks::new(data)?;
    // bounds every walk: no list can have more entries than the file has atoms
    let max_steps = data.len() / blocks::ATOM;
    let root = scalar::decode(&blocks.get(1)?)?;
    let mut next = match root.as_slice() {
        [] => 0,
        [Scalar::Int(h)] => *h,
        _ => return Err(corrupt(format!("root block holds {root:?}"))),
    };
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    while next != 0 {
        if !seen.insert(next) {
            return Err(corrupt("the table list loops"));
        }
        let meta = scalar::decode(&blocks.get(next)?)?;
        if meta.len() != 4 && meta.len() != 6 {
            return Err(corrupt(format!("table record of {} fields", meta.len())));
        }
        let name = str_at(&meta, 3, "table name")?.to_string();
        let columns = str_at(&meta, 1, "column list")?
            .split('|')
            .enumerate()
            .filter_map(|(i, c)| {
                let (&kind, rest) = c.as_bytes().split_first()?;
                Some(Column { kind, name: String::from_utf8_lossy(rest).into_owned(), index: i })
            })
            .filter(|c| !c.name.is_empty())
            .collect();
        let head = scalar::decode(&blocks.get(int_at(&meta, 2, "table head handle")?)?)?;
        let mut row_handle = int_at(&head, 0, "table head")?;
        let mut rows = Vec::new();
        while row_handle != 0 {
            if rows.len() > max_steps {
                return Err(corrupt(format!("the record list of table {name} loops")));
            }
            let rec = scalar::decode(&blocks.get(row_handle)?)?;
            let link = int_at(&rec, 0, "record link")?;
            let id = int_at(&rec, 1, "record id")?;
            rows.push((id, rec[2..].to_vec()));
            row_handle = link;
        }
        out.push(Table { name, columns, rows });
        next = int_at(&meta, 0, "next table")?;
    }
    Ok(out)
}

/// ql's tag for a time value's chunk.
const CHUNK_TIME: i64 = 0x54;

/// A time value: the scalars (type tag, gob message), or (tag, next chunk,
/// first part) when it is longer than one chunk.
fn time_chunk(blocks: &Blocks<'_>, chunk: &[u8]) -> Result<scalar::GobTime, QlError> {
    let items = scalar::decode(chunk)?;
    match items.as_slice() {
        [Scalar::Int(CHUNK_TIME), Scalar::Bytes(gob)] => scalar::decode_gob_time(gob),
        [Scalar::Int(CHUNK_TIME), Scalar::Int(next), Scalar::Bytes(first)] => {
            let mut gob = first.clone();
            let mut next = *next;
            let mut steps = 0;
            while next != 0 {
                steps += 1;
                if steps > 64 {
                    return Err(corrupt("a time value's chunk list loops"));
                }
                match scalar::decode(&blocks.get(next)?)?.as_slice() {
                    [Scalar::Bytes(part)] => {
                        gob.extend_from_slice(part);
                        next = 0;
                    }
                    [Scalar::Int(n), Scalar::Bytes(part)] => {
                        gob.extend_from_slice(part);
                        next = *n;
                    }
                    other => return Err(corrupt(format!("time chunk holds {other:?}"))),
                }
            }
            scalar::decode_gob_time(&gob)
        }
        other => Err(corrupt(format!("time value holds {other:?}"))),
    }
}

fn find<'t>(tables: &'t [Table], name: &str) -> Option<&'t Table> {
    tables.iter().find(|t| t.name == name)
}

fn get_str(t: &Table, row: &[Scalar], col: &str) -> Result<String, QlError> {
    match t.value(row, col)? {
        Scalar::Str(s) => Ok(s.clone()),
        Scalar::Null => Ok(String::new()),
        other => Err(corrupt(format!("{}.{col} holds {other:?}", t.name))),
    }
}

fn get_int(t: &Table, row: &[Scalar], col: &str) -> Result<i64, QlError> {
    match t.value(row, col)? {
        Scalar::Int(n) => Ok(*n),
        Scalar::Uint(n) => i64::try_from(*n).map_err(|_| corrupt(format!("{}.{col} out of range", t.name))),
        Scalar::Null => Ok(0),
        other => Err(corrupt(format!("{}.{col} holds {other:?}", t.name))),
    }
}

fn get_bool(t: &Table, row: &[Scalar], col: &str) -> Result<bool, QlError> {
    match t.value(row, col)? {
        Scalar::Bool(b) => Ok(*b),
        Scalar::Null => Ok(false),
        other => Err(corrupt(format!("{}.{col} holds {other:?}", t.name))),
    }
}

/// Reads rkt's tables from the bytes of a `ql.db`. Rows come oldest first.
pub fn parse(data: &[u8]) -> Result<Tables, QlError> {
    let all = tables(data)?;
    let mut out = Tables::default();
    if let Some(t) = find(&all, "version") {
        out.version = t.rows.first().map(|(_, r)| get_int(t, r, "version")).transpose()?;
    }
    if let Some(t) = find(&all, "aciinfo") {
        for (_, r) in t.rows.iter().rev() {
            out.aciinfo.push(AciInfo {
                blobkey: get_str(t, r, "blobkey")?,
                name: get_str(t, r, "name")?,
                importtime: get_int(t, r, "importtime")?,
                lastused: get_int(t, r, "lastused")?,
                latest: get_bool(t, r, "latest")?,
                size: get_int(t, r, "size")?,
                treestoresize: get_int(t, r, "treestoresize")?,
                verified: false,
            });
        }
    }
    if let Some(t) = find(&all, "remote") {
        for (_, r) in t.rows.iter().rev() {
            out.remote.push(Remote {
                aciurl: get_str(t, r, "aciurl")?,
                sigurl: get_str(t, r, "sigurl")?,
                etag: get_str(t, r, "etag")?,
                blobkey: get_str(t, r, "blobkey")?,
                cachemaxage: get_int(t, r, "cachemaxage")?,
                downloadtime: get_int(t, r, "downloadtime")?,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
