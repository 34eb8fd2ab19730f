//! lldb's block file as ql lays it out: a 16-byte ql header, then lldb's
//! free list table (14 big-endian 8-byte heads), then blocks of 16-byte
//! atoms. A handle is the number of a block's first atom; handle `h` starts
//! at byte `16 + 16 * (h + 6)` of the file.
//!
//! A block's first byte says what it is: 0x00-0xfb a short used block of that
//! many content bytes, 0xfc a long used block (content length in the next two
//! bytes, lengths 0x10000-0x100fb stored as their low 16 bits), 0xfd a
//! relocation (the 7-byte handle of the block holding the content), 0xfe and
//! 0xff free blocks. A used block's last byte is 0 for plain content, 1 for
//! zappy-compressed content.

use super::QlError;

/// ql's file header: its magic, then zeros up to 16 bytes.
pub(crate) const MAGIC: &[u8; 4] = b"\x60\xdbql";
pub(crate) const HEADER: usize = 16;
/// lldb's free list table at the start of its (inner) file.
pub(crate) const FLT: usize = 14 * 8;
pub(crate) const ATOM: usize = 16;
pub(crate) const MAX_SHORT: usize = 251;
pub(crate) const MAX_CONTENT: usize = 65787;
pub(crate) const TAG_LONG: u8 = 0xfc;
pub(crate) const TAG_RELOCATED: u8 = 0xfd;
pub(crate) const TAG_FREE_SHORT: u8 = 0xfe;
pub(crate) const TAG_FREE_LONG: u8 = 0xff;
pub(crate) const MAX_HANDLE: i64 = (1 << 56) - 1;

/// The byte offset in the file of block `handle`.
pub(crate) fn offset(handle: i64) -> usize {
    HEADER + (handle as usize + 6) * ATOM
}

/// The number of atoms a used block of `n` content bytes takes.
pub(crate) fn atoms(n: usize) -> usize {
    let n = if n > MAX_SHORT { n + 2 } else { n };
    (n + 1) / ATOM + 1
}

fn corrupt(detail: impl Into<String>) -> QlError {
    QlError::Format(detail.into())
}

/// A whole ql database file, read into memory.
pub(crate) struct Blocks<'a> {
    data: &'a [u8],
}

impl<'a> Blocks<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Result<Self, QlError> {
        if data.len() < HEADER || &data[..4] != MAGIC {
            return Err(corrupt("not a ql database (no ql magic at its start)"));
        }
        if data.len() < HEADER + FLT || !(data.len() - HEADER - FLT).is_multiple_of(ATOM) {
            return Err(corrupt(format!("{} bytes is not a whole number of 16-byte atoms", data.len())));
        }
        Ok(Blocks { data })
    }

    fn bytes(&self, off: usize, n: usize) -> Result<&'a [u8], QlError> {
        off.checked_add(n)
            .and_then(|end| self.data.get(off..end))
            .ok_or_else(|| corrupt(format!("block at byte {off} runs past the end of the file")))
    }

    /// The content of block `handle` (following a relocation, decompressing).
    pub(crate) fn get(&self, handle: i64) -> Result<Vec<u8>, QlError> {
        self.get_inner(handle, false)
    }

    fn get_inner(&self, handle: i64, relocated: bool) -> Result<Vec<u8>, QlError> {
        if handle <= 0 || handle > MAX_HANDLE {
            return Err(corrupt(format!("handle {handle} out of range")));
        }
        let off = offset(handle);
        let tag = self.bytes(off, 1)?[0];
        let (start, n) = match tag {
            0 => return Ok(Vec::new()),
            1..=0xfb => (off + 1, usize::from(tag)),
            TAG_LONG => {
                let m = self.bytes(off + 1, 2)?;
                let m = usize::from(m[0]) << 8 | usize::from(m[1]);
                (off + 3, if m <= MAX_SHORT { m + 0x10000 } else { m })
            }
            TAG_RELOCATED if !relocated => {
                let h = self.bytes(off + 1, 7)?.iter().fold(0i64, |acc, &b| (acc << 8) | i64::from(b));
                return self.get_inner(h, true);
            }
            TAG_RELOCATED => return Err(corrupt(format!("block {handle} relocates to another relocation"))),
            TAG_FREE_SHORT | TAG_FREE_LONG => {
                return Err(corrupt(format!("handle {handle} refers to a free block")));
            }
        };
        let tail = self.bytes(off + atoms(n) * ATOM - 1, 1)?[0];
        let content = self.bytes(start, n)?;
        match tail {
            0 => Ok(content.to_vec()),
            1 => zappy_decode(content),
            t => Err(corrupt(format!("block {handle} has tail tag {t}"))),
        }
    }
}

fn uvarint(b: &[u8], pos: &mut usize) -> Result<u64, QlError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos).ok_or_else(|| corrupt("zappy: truncated varint"))?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(v);
        }
    }
    Err(corrupt("zappy: varint too long"))
}

/// Decodes zappy: the decoded length as a uvarint, then chunks, each a
/// zigzag varint `n`: `n >= 0` is `n + 1` literal bytes, `n < 0` copies `-n`
/// bytes from `offset` (a uvarint) bytes back.
pub(crate) fn zappy_decode(src: &[u8]) -> Result<Vec<u8>, QlError> {
    let mut pos = 0;
    let len = uvarint(src, &mut pos)? as usize;
    if len > MAX_CONTENT {
        return Err(corrupt(format!("zappy: decoded length {len} exceeds a block")));
    }
    let mut out = Vec::with_capacity(len);
    while pos < src.len() {
        let u = uvarint(src, &mut pos)?;
        let n = ((u >> 1) as i64) ^ -((u & 1) as i64);
        if n >= 0 {
            let count = n as usize + 1;
            let lit = src.get(pos..pos + count).ok_or_else(|| corrupt("zappy: literal past the end"))?;
            if out.len() + count > len {
                return Err(corrupt("zappy: output longer than announced"));
            }
            out.extend_from_slice(lit);
            pos += count;
        } else {
            let count = n.unsigned_abs() as usize;
            let back = uvarint(src, &mut pos)? as usize;
            if back == 0 || back > out.len() || out.len() + count > len {
                return Err(corrupt("zappy: copy outside the output"));
            }
            let from = out.len() - back;
            for i in 0..count {
                let b = out[from + i];
                out.push(b);
            }
        }
    }
    if out.len() != len {
        return Err(corrupt(format!("zappy: decoded {} bytes, announced {len}", out.len())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zappy_copies_may_overlap_their_source() {
        // 3 bytes, literal "ab" (n = 1, zigzag 2), copy 4 (n = -4, zigzag 7) from 2 back
        let src = [6, 2, b'a', b'b', 7, 2];
        assert_eq!(zappy_decode(&src).unwrap(), b"ababab");
        let err = zappy_decode(&[6, 2, b'a', b'b', 7, 3]).unwrap_err();
        assert!(err.to_string().contains("copy outside"), "{err}");
        assert!(zappy_decode(&[9, 2, b'a', b'b']).is_err(), "short output");
    }

    #[test]
    fn block_sizes_follow_lldb() {
        assert_eq!(atoms(0), 1);
        assert_eq!(atoms(14), 1);
        assert_eq!(atoms(15), 2);
        assert_eq!(atoms(251), 16);
        assert_eq!(atoms(252), 16);
        assert_eq!(atoms(MAX_CONTENT), 4112);
        assert_eq!(offset(1), 128);
    }
}
