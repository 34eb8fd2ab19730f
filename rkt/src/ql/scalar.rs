//! lldb's scalar vector encoding (records and B-tree keys are vectors of
//! these) and the gob framing ql wraps around `time` values.
//!
//! Each scalar starts with a tag byte: 0 null, 1 false, 2 true, 0x03-0x14
//! floats and complex numbers, 0x15-0x28 byte strings, 0x29-0x3c strings,
//! 0x3d-0x44 unsigned, 0x45-0x54 signed integers (8..1 bytes negative, 1..8
//! bytes positive, all big-endian), 0x55-0xff the small integers 0..170.

use super::QlError;

/// One decoded scalar.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    /// Null (tag 0).
    Null,
    /// A boolean (tags 1 and 2).
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    Uint(u64),
    /// A float.
    Float(f64),
    /// A complex number: its real and imaginary parts.
    Complex(f64, f64),
    /// A byte string.
    Bytes(Vec<u8>),
    /// A string.
    Str(String),
}

const NULL: u8 = 0x00;
const FALSE: u8 = 0x01;
const TRUE: u8 = 0x02;
const FLOAT0: u8 = 0x03;
const COMPLEX0: u8 = 0x0c;
const BYTES0: u8 = 0x15;
const BYTES1: u8 = 0x27;
const BYTES2: u8 = 0x28;
const STRING0: u8 = 0x29;
const STRING1: u8 = 0x3b;
const STRING2: u8 = 0x3c;
const UINT1: u8 = 0x3d;
const INT_M8: u8 = 0x45;
const INT_P1: u8 = 0x4d;
const INT0: u8 = 0x55;
/// Up to 17 bytes of a string or byte string fit in the tag.
const SHORT: usize = 17;

fn corrupt(detail: impl Into<String>) -> QlError {
    QlError::Format(detail.into())
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], QlError> {
    if b.len() < n {
        return Err(corrupt(format!("scalar runs past its record ({n} bytes wanted, {} left)", b.len())));
    }
    let (head, tail) = b.split_at(n);
    *b = tail;
    Ok(head)
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, &v| (acc << 8) | u64::from(v))
}

/// A float is stored as its IEEE bits with the bytes reversed (low byte
/// first), as a big-endian number without its leading zero bytes.
fn float_from(bytes: &[u8]) -> f64 {
    f64::from_bits(be(bytes).swap_bytes())
}

/// Decodes a whole scalar vector.
pub(crate) fn decode(mut b: &[u8]) -> Result<Vec<Scalar>, QlError> {
    let mut out = Vec::new();
    while let Some((&tag, rest)) = b.split_first() {
        b = rest;
        let v = match tag {
            NULL => Scalar::Null,
            FALSE => Scalar::Bool(false),
            TRUE => Scalar::Bool(true),
            FLOAT0..COMPLEX0 => Scalar::Float(float_from(take(&mut b, usize::from(tag - FLOAT0))?)),
            COMPLEX0..BYTES0 => {
                let re = float_from(take(&mut b, usize::from(tag - COMPLEX0))?);
                let tag2 = take(&mut b, 1)?[0];
                if !(COMPLEX0..BYTES0).contains(&tag2) {
                    return Err(corrupt("complex value without its imaginary part"));
                }
                Scalar::Complex(re, float_from(take(&mut b, usize::from(tag2 - COMPLEX0))?))
            }
            BYTES0..BYTES1 => Scalar::Bytes(take(&mut b, usize::from(tag - BYTES0))?.to_vec()),
            BYTES1 => {
                let n = usize::from(take(&mut b, 1)?[0]);
                Scalar::Bytes(take(&mut b, n)?.to_vec())
            }
            BYTES2 => {
                // stored one less, so that 65536 bytes fit
                let n = be(take(&mut b, 2)?) as usize + 1;
                Scalar::Bytes(take(&mut b, n)?.to_vec())
            }
            STRING0..STRING1 | STRING1 | STRING2 => {
                let n = match tag {
                    STRING1 => usize::from(take(&mut b, 1)?[0]),
                    STRING2 => be(take(&mut b, 2)?) as usize,
                    _ => usize::from(tag - STRING0),
                };
                let s = take(&mut b, n)?;
                Scalar::Str(String::from_utf8(s.to_vec()).map_err(|_| corrupt("string that is not UTF-8"))?)
            }
            UINT1..INT_M8 => Scalar::Uint(be(take(&mut b, usize::from(tag - UINT1) + 1)?)),
            INT_M8..INT_P1 => {
                let n = 8 - usize::from(tag - INT_M8);
                let bytes = take(&mut b, n)?;
                // sign-extended: the missing high bytes are all ones
                let v = bytes.iter().fold(u64::MAX, |acc, &x| (acc << 8) | u64::from(x));
                Scalar::Int(v as i64)
            }
            INT_P1..INT0 => Scalar::Int(be(take(&mut b, usize::from(tag - INT_P1) + 1)?) as i64),
            _ => Scalar::Int(i64::from(tag - INT0)),
        };
        out.push(v);
    }
    Ok(out)
}

fn put_be(out: &mut Vec<u8>, v: u64, n: usize) {
    for i in (0..n).rev() {
        out.push((v >> (8 * i)) as u8);
    }
}

fn byte_len(v: u64) -> usize {
    (((64 - v.leading_zeros()) as usize).div_ceil(8)).max(1)
}

/// Encodes a scalar vector the way lldb does (the shortest form of each).
pub(crate) fn encode(values: &[Scalar]) -> Result<Vec<u8>, QlError> {
    let mut out = Vec::new();
    for v in values {
        match v {
            Scalar::Null => out.push(NULL),
            Scalar::Bool(false) => out.push(FALSE),
            Scalar::Bool(true) => out.push(TRUE),
            Scalar::Int(i) => encode_int(&mut out, *i),
            Scalar::Uint(u) => {
                let n = byte_len(*u);
                out.push(UINT1 + (n - 1) as u8);
                put_be(&mut out, *u, n);
            }
            Scalar::Str(s) => {
                let n = s.len();
                if n <= SHORT {
                    out.push(STRING0 + n as u8);
                } else if n <= 0xff {
                    out.extend([STRING1, n as u8]);
                } else if n <= 0xffff {
                    out.push(STRING2);
                    put_be(&mut out, n as u64, 2);
                } else {
                    return Err(QlError::Unsupported(format!("a string of {n} bytes (ql stores at most 65535)")));
                }
                out.extend_from_slice(s.as_bytes());
            }
            Scalar::Bytes(b) => {
                let n = b.len();
                if n <= SHORT {
                    out.push(BYTES0 + n as u8);
                } else if n <= 0xff {
                    out.extend([BYTES1, n as u8]);
                } else if n <= 0x10000 {
                    out.push(BYTES2);
                    put_be(&mut out, (n - 1) as u64, 2);
                } else {
                    return Err(QlError::Unsupported(format!("a byte string of {n} bytes")));
                }
                out.extend_from_slice(b);
            }
            Scalar::Float(_) | Scalar::Complex(..) => {
                return Err(QlError::Unsupported("writing floating point values".into()));
            }
        }
    }
    Ok(out)
}

fn encode_int(out: &mut Vec<u8>, i: i64) {
    if (0..=0xff - i64::from(INT0)).contains(&i) {
        out.push(INT0 + i as u8);
    } else if i >= 0 {
        let n = byte_len(i as u64);
        out.push(INT_P1 + (n - 1) as u8);
        put_be(out, i as u64, n);
    } else {
        // the fewest bytes whose sign extension gives i back
        let mut n = 1;
        while n < 8 && i < -(1i64 << (8 * n)) {
            n += 1;
        }
        out.push(INT_M8 + (8 - n) as u8);
        put_be(out, i as u64, n);
    }
}

/// Seconds from 0001-01-01 to 1970-01-01, the base of Go's binary times.
const GO_EPOCH_OFFSET: i64 = 62_135_596_800;

/// Reads a gob "uint": one byte below 128, else a byte holding the negated
/// count of big-endian bytes that follow.
fn gob_uint(b: &mut &[u8]) -> Result<u64, QlError> {
    let first = take(b, 1)?[0];
    if first < 0x80 {
        return Ok(u64::from(first));
    }
    let n = (!first).wrapping_add(1) as usize;
    if n > 8 {
        return Err(corrupt("gob integer longer than 8 bytes"));
    }
    Ok(be(take(b, n)?))
}

fn put_gob_uint(out: &mut Vec<u8>, v: u64) {
    if v < 0x80 {
        out.push(v as u8);
    } else {
        let n = byte_len(v);
        out.push((n as u8).wrapping_neg());
        put_be(out, v, n);
    }
}

/// A gob value message carrying a `time.Time`: the type id it was sent
/// with and the instant in nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GobTime {
    /// The gob type id the value was sent with.
    pub type_id: i64,
    /// The instant, in nanoseconds since the Unix epoch.
    pub unix_nanos: i64,
}

/// Decodes a gob message holding one `time.Time` (its MarshalBinary form:
/// version 1 or 2, seconds since year 1, nanoseconds, zone offset).
pub(crate) fn decode_gob_time(mut b: &[u8]) -> Result<GobTime, QlError> {
    let len = gob_uint(&mut b)? as usize;
    let mut msg = take(&mut b, len)?;
    let raw_id = gob_uint(&mut msg)?;
    let type_id = if raw_id & 1 == 1 { !((raw_id >> 1) as i64) } else { (raw_id >> 1) as i64 };
    if type_id < 0 {
        return Err(corrupt("a time value holds a gob type definition instead of a value"));
    }
    // a value that is not a struct is sent as field 0 of a singleton
    if take(&mut msg, 1)?[0] != 0 {
        return Err(corrupt("gob time value without its singleton marker"));
    }
    let n = gob_uint(&mut msg)? as usize;
    let bin = take(&mut msg, n)?;
    let version = *bin.first().ok_or_else(|| corrupt("empty binary time"))?;
    let want = match version {
        1 => 15,
        2 => 16,
        v => return Err(corrupt(format!("binary time version {v}"))),
    };
    if bin.len() != want {
        return Err(corrupt(format!("binary time of {} bytes, version {version} has {want}", bin.len())));
    }
    let secs = be(&bin[1..9]) as i64;
    let nanos = be(&bin[9..13]) as i64;
    let unix = secs.checked_sub(GO_EPOCH_OFFSET).and_then(|s| s.checked_mul(1_000_000_000));
    let unix_nanos = unix.and_then(|n| n.checked_add(nanos)).ok_or_else(|| corrupt("time out of range"))?;
    Ok(GobTime { type_id, unix_nanos })
}

/// Encodes a UTC instant as a gob value message of type `type_id`.
pub(crate) fn encode_gob_time(type_id: i64, unix_nanos: i64) -> Vec<u8> {
    let secs = unix_nanos.div_euclid(1_000_000_000) + GO_EPOCH_OFFSET;
    let nanos = unix_nanos.rem_euclid(1_000_000_000);
    let mut bin = vec![1u8];
    put_be(&mut bin, secs as u64, 8);
    put_be(&mut bin, nanos as u64, 4);
    bin.extend([0xff, 0xff]); // zone offset -1: UTC
    let mut msg = Vec::new();
    let raw_id = if type_id < 0 { ((!type_id as u64) << 1) | 1 } else { (type_id as u64) << 1 };
    put_gob_uint(&mut msg, raw_id);
    msg.push(0);
    put_gob_uint(&mut msg, bin.len() as u64);
    msg.extend(bin);
    let mut out = Vec::new();
    put_gob_uint(&mut out, msg.len() as u64);
    out.extend(msg);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip_in_their_shortest_form() {
        let cases: &[(i64, usize)] = &[
            (0, 1),
            (170, 1),
            (171, 2),
            (255, 2),
            (256, 3),
            (-1, 2),
            (-256, 2),
            (-257, 3),
            (i64::MAX, 9),
            (i64::MIN, 9),
        ];
        for &(i, len) in cases {
            let b = encode(&[Scalar::Int(i)]).unwrap();
            assert_eq!(b.len(), len, "{i}: {b:02x?}");
            assert_eq!(decode(&b).unwrap(), vec![Scalar::Int(i)], "{i}");
        }
    }

    #[test]
    fn strings_and_bytes_of_every_length_class_round_trip() {
        for n in [0, 17, 18, 255, 256, 65535] {
            let s = "x".repeat(n);
            let v = vec![Scalar::Str(s.clone()), Scalar::Bytes(s.into_bytes()), Scalar::Null, Scalar::Bool(true)];
            assert_eq!(decode(&encode(&v).unwrap()).unwrap(), v, "length {n}");
        }
        let big = vec![Scalar::Bytes(vec![7; 65536])];
        assert_eq!(decode(&encode(&big).unwrap()).unwrap(), big);
    }

    #[test]
    fn truncated_vectors_are_refused() {
        let b = encode(&[Scalar::Str("a string longer than 17".into())]).unwrap();
        assert!(matches!(decode(&b[..b.len() - 1]), Err(QlError::Format(_))));
        assert!(matches!(decode(&[INT_P1 + 3, 1]), Err(QlError::Format(_))));
    }

    #[test]
    fn floats_decode_from_reversed_bytes() {
        // 1.0 is 0x3ff0000000000000: reversed and stripped of leading zeros
        assert_eq!(decode(&[FLOAT0 + 2, 0xf0, 0x3f]).unwrap(), vec![Scalar::Float(1.0)]);
        assert_eq!(decode(&[FLOAT0]).unwrap(), vec![Scalar::Float(0.0)]);
    }

    #[test]
    fn gob_time_round_trips_before_and_after_the_epoch() {
        for nanos in [0, 1_795_780_800_123_456_789, -1_500_000_000] {
            let b = encode_gob_time(69, nanos);
            assert_eq!(decode_gob_time(&b).unwrap(), GobTime { type_id: 69, unix_nanos: nanos });
        }
    }
}
