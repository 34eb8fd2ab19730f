//! SPDY/3.1 framing for the streaming server (what kubelet's clients speak
//! through `Upgrade: SPDY/3.1`): the 8-byte frame headers, the control
//! frames a Kubernetes stream session uses (SYN_STREAM, SYN_REPLY,
//! RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE), data frames,
//! and header blocks compressed with zlib and the SPDY/3 dictionary, one
//! compression context per direction for the whole session. No maintained
//! Rust crate speaks SPDY, so it is written here, from the spec.
//!
//! Flow control: windows are not enforced on what we send, as Kubernetes'
//! own client library (spdystream) neither sends WINDOW_UPDATE nor limits
//! itself; we send WINDOW_UPDATE for what we receive so that a strict 3.1
//! peer never stalls.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use std::sync::OnceLock;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest frame accepted (SPDY allows 16 MiB - 1).
const MAX_FRAME: usize = (1 << 24) - 1;
/// Largest decompressed header block accepted.
const MAX_HEADERS: usize = 256 << 10;
const VERSION: u16 = 3;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;
pub(crate) const FLAG_FIN: u8 = 0x01;

/// RST_STREAM status codes used here.
pub(crate) const PROTOCOL_ERROR: u32 = 1;
pub(crate) const REFUSED_STREAM: u32 = 3;

/// The words of the SPDY/3 header dictionary (each preceded by its length as
/// a 32-bit big-endian integer), then [`DICTIONARY_TAIL`] as is.
const DICTIONARY_WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];
const DICTIONARY_TAIL: &str = "100101201202205206300302303304305306307402405406407408409410411412413414415416417502\
504505203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized403 \
Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun \
Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,\
image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,\
sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

/// The SPDY/3 zlib dictionary (1423 bytes).
pub(crate) fn dictionary() -> &'static [u8] {
    static DICT: OnceLock<Vec<u8>> = OnceLock::new();
    DICT.get_or_init(|| {
        let mut d = Vec::with_capacity(1423);
        for w in DICTIONARY_WORDS {
            d.extend_from_slice(&(w.len() as u32).to_be_bytes());
            d.extend_from_slice(w.as_bytes());
        }
        d.extend_from_slice(DICTIONARY_TAIL.as_bytes());
        d
    })
}

#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    #[error("spdy: {0}")]
    Protocol(String),
    #[error("spdy: {0}")]
    Io(#[from] std::io::Error),
}

fn protocol(msg: impl Into<String>) -> SpdyError {
    SpdyError::Protocol(msg.into())
}

/// Header names and values of a SYN_STREAM, SYN_REPLY or HEADERS frame.
pub(crate) type Headers = Vec<(String, String)>;

/// A frame as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    SynReply {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream: u32,
        status: u32,
    },
    Settings,
    Ping {
        id: u32,
    },
    GoAway {
        last: u32,
    },
    Headers {
        stream: u32,
        headers: Headers,
    },
    WindowUpdate {
        stream: u32,
        delta: u32,
    },
    Data {
        stream: u32,
        fin: bool,
        data: Vec<u8>,
    },
    /// A control frame type this server does not use (skipped, as the spec says).
    Other,
}

/// The session's two zlib contexts, shared by every header block of a
/// direction (the dictionary is set once per context).
pub struct Codec {
    deflate: Compress,
    inflate: Decompress,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("spdy::Codec")
    }
}

impl Codec {
    pub fn new() -> Result<Self, SpdyError> {
        let mut deflate = Compress::new(Compression::default(), true);
        deflate.set_dictionary(dictionary()).map_err(|e| protocol(format!("zlib dictionary: {e}")))?;
        Ok(Codec { deflate, inflate: Decompress::new(true) })
    }

    /// A header block: count, then length-prefixed names and values, compressed.
    pub fn encode_headers(&mut self, headers: &[(&str, &str)]) -> Result<Vec<u8>, SpdyError> {
        let mut block = Vec::new();
        block.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (k, v) in headers {
            for s in [k.to_ascii_lowercase().as_str(), *v] {
                block.extend_from_slice(&(s.len() as u32).to_be_bytes());
                block.extend_from_slice(s.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut consumed = 0;
        loop {
            let before = self.deflate.total_in();
            self.deflate
                .compress_vec(&block[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| protocol(format!("deflate: {e}")))?;
            consumed += (self.deflate.total_in() - before) as usize;
            // done once all input is in and the flush fit in the buffer
            if consumed == block.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            out.reserve(out.capacity().max(64));
        }
    }

    /// Inflates and parses a header block.
    pub fn decode_headers(&mut self, compressed: &[u8]) -> Result<Headers, SpdyError> {
        let mut out = Vec::with_capacity((compressed.len() * 4 + 256).min(MAX_HEADERS));
        let mut consumed = 0;
        loop {
            let (before_in, before_out) = (self.inflate.total_in(), self.inflate.total_out());
            let r = self.inflate.decompress_vec(&compressed[consumed..], &mut out, FlushDecompress::Sync);
            consumed += (self.inflate.total_in() - before_in) as usize;
            let progress = self.inflate.total_in() != before_in || self.inflate.total_out() != before_out;
            match r {
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(dictionary())
                        .map_err(|e| protocol(format!("inflate dictionary: {e}")))?;
                }
                Err(e) => return Err(protocol(format!("inflate: {e}"))),
                // a session's header blocks are one endless zlib stream
                Ok(flate2::Status::StreamEnd) => return Err(protocol("header block ends the zlib stream")),
                Ok(_) if consumed == compressed.len() && out.len() < out.capacity() => break,
                // bytes zlib does not take: refuse rather than loop
                Ok(_) if !progress && out.len() < out.capacity() => return Err(protocol("undecodable header block")),
                Ok(_) => {
                    if out.len() >= MAX_HEADERS {
                        return Err(protocol("header block over the limit"));
                    }
                    out.reserve(out.capacity().min(MAX_HEADERS - out.len()).max(1));
                }
            }
        }
        parse_block(&out)
    }
}

/// An inflated header block: a count, then length-prefixed names and
/// values (32-bit, big-endian); names lowercased. Public for the fuzz target.
pub fn parse_block(b: &[u8]) -> Result<Headers, SpdyError> {
    let mut pos = 0;
    let mut next = |n: usize| -> Result<&[u8], SpdyError> {
        let s = b.get(pos..pos + n).ok_or_else(|| protocol("truncated header block"))?;
        pos += n;
        Ok(s)
    };
    let u32_at = |s: &[u8]| u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize;
    let count = u32_at(next(4)?);
    let mut headers = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let n = u32_at(next(4)?);
        let name = String::from_utf8_lossy(next(n)?).to_ascii_lowercase();
        let n = u32_at(next(4)?);
        let value = String::from_utf8_lossy(next(n)?).into_owned();
        headers.push((name, value));
    }
    Ok(headers)
}

/// Reads the next frame; `None` at a clean end of the connection.
pub async fn read_frame(r: &mut (impl AsyncRead + Unpin), codec: &mut Codec) -> Result<Option<Frame>, SpdyError> {
    let mut head = [0u8; 8];
    match r.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let flags = head[4];
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    if len > MAX_FRAME {
        return Err(protocol("frame too long"));
    }
    // read what arrives (not a buffer of the declared size up front)
    let mut body = Vec::with_capacity(len.min(64 << 10));
    (&mut *r).take(len as u64).read_to_end(&mut body).await?;
    if body.len() < len {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    let word = |i: usize| -> Result<u32, SpdyError> {
        body.get(i..i + 4).map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]])).ok_or_else(|| protocol("short frame"))
    };
    if head[0] & 0x80 == 0 {
        let stream = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff;
        return Ok(Some(Frame::Data { stream, fin: flags & FLAG_FIN != 0, data: body }));
    }
    let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
    if version != VERSION {
        return Err(protocol(format!("version {version}, not 3")));
    }
    let fin = flags & FLAG_FIN != 0;
    Ok(Some(match u16::from_be_bytes([head[2], head[3]]) {
        SYN_STREAM => {
            let stream = word(0)? & 0x7fff_ffff;
            let headers = codec.decode_headers(body.get(10..).ok_or_else(|| protocol("short SYN_STREAM"))?)?;
            Frame::SynStream { stream, fin, headers }
        }
        SYN_REPLY => {
            let stream = word(0)? & 0x7fff_ffff;
            Frame::SynReply { stream, fin, headers: codec.decode_headers(&body[4..])? }
        }
        RST_STREAM => Frame::RstStream { stream: word(0)? & 0x7fff_ffff, status: word(4)? },
        SETTINGS => Frame::Settings,
        PING => Frame::Ping { id: word(0)? },
        GOAWAY => Frame::GoAway { last: word(0)? & 0x7fff_ffff },
        HEADERS => {
            let stream = word(0)? & 0x7fff_ffff;
            Frame::Headers { stream, headers: codec.decode_headers(&body[4..])? }
        }
        WINDOW_UPDATE => Frame::WindowUpdate { stream: word(0)? & 0x7fff_ffff, delta: word(4)? & 0x7fff_ffff },
        _ => Frame::Other,
    }))
}

/// A server's SPDY session over an upgraded connection: the read half with
/// its inflate context, the deflate context for what we send, and a writer
/// task that sends the frames queued on `out` in order (it shuts the
/// connection down once every sender is gone).
pub(crate) struct Session<S> {
    pub rd: tokio::io::ReadHalf<S>,
    pub rcodec: Codec,
    pub wcodec: Codec,
    pub out: tokio::sync::mpsc::Sender<Vec<u8>>,
    pub writer: tokio::task::JoinHandle<()>,
}

impl<S: AsyncRead + tokio::io::AsyncWrite + Send + 'static> Session<S> {
    pub(crate) fn start(conn: S) -> Result<Self, SpdyError> {
        use tokio::io::AsyncWriteExt;
        let (rd, mut wr) = tokio::io::split(conn);
        let (rcodec, wcodec) = (Codec::new()?, Codec::new()?);
        let (out, mut queued) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
        let writer = tokio::spawn(async move {
            while let Some(bytes) = queued.recv().await {
                if wr.write_all(&bytes).await.is_err() || wr.flush().await.is_err() {
                    break;
                }
            }
            let _ = wr.shutdown().await;
        });
        Ok(Session { rd, rcodec, wcodec, out, writer })
    }
}

fn control(kind: u16, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + body.len());
    f.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    f.extend_from_slice(&kind.to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(body);
    f
}

/// SYN_REPLY accepting `stream`.
pub(crate) fn syn_reply(codec: &mut Codec, stream: u32, headers: &[(&str, &str)]) -> Result<Vec<u8>, SpdyError> {
    let mut body = stream.to_be_bytes().to_vec();
    body.extend(codec.encode_headers(headers)?);
    Ok(control(SYN_REPLY, 0, &body))
}

/// SYN_STREAM opening `stream` (server-initiated streams are even).
#[cfg(test)]
pub(crate) fn syn_stream(
    codec: &mut Codec,
    stream: u32,
    headers: &[(&str, &str)],
    fin: bool,
) -> Result<Vec<u8>, SpdyError> {
    let mut body = stream.to_be_bytes().to_vec();
    body.extend_from_slice(&0u32.to_be_bytes());
    body.extend_from_slice(&[0, 0]);
    body.extend(codec.encode_headers(headers)?);
    Ok(control(SYN_STREAM, if fin { FLAG_FIN } else { 0 }, &body))
}

pub(crate) fn rst_stream(stream: u32, status: u32) -> Vec<u8> {
    control(RST_STREAM, 0, &[stream.to_be_bytes(), status.to_be_bytes()].concat())
}

pub(crate) fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

pub(crate) fn goaway(last: u32) -> Vec<u8> {
    control(GOAWAY, 0, &[last.to_be_bytes(), 0u32.to_be_bytes()].concat())
}

pub(crate) fn window_update(stream: u32, delta: u32) -> Vec<u8> {
    control(WINDOW_UPDATE, 0, &[stream.to_be_bytes(), delta.to_be_bytes()].concat())
}

/// Data frames for `data` on `stream` (split at the frame limit); `fin`
/// on the last one. Empty data with `fin` is a bare half-close.
pub(crate) fn data(stream: u32, fin: bool, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 8);
    let mut chunks: Vec<&[u8]> = data.chunks(MAX_FRAME).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let last = chunks.len() - 1;
    for (i, c) in chunks.into_iter().enumerate() {
        out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        out.push(if fin && i == last { FLAG_FIN } else { 0 });
        out.extend_from_slice(&(c.len() as u32).to_be_bytes()[1..]);
        out.extend_from_slice(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adler-32 as zlib computes it (the dictionary id in a zlib header).
    fn adler32(b: &[u8]) -> u32 {
        let (mut a, mut s) = (1u32, 0u32);
        for x in b {
            a = (a + u32::from(*x)) % 65521;
            s = (s + a) % 65521;
        }
        (s << 16) | a
    }

    #[test]
    fn the_dictionary_is_spdy3s() {
        assert_eq!(dictionary().len(), 1423);
        assert_eq!(adler32(dictionary()), 0xe3c6_a7c2);
    }

    #[tokio::test]
    async fn frames_round_trip_with_one_compression_context_per_direction() {
        let (mut ours, mut theirs) = (Codec::new().expect("codec"), Codec::new().expect("codec"));
        let mut wire = Vec::new();
        wire.extend(syn_stream(&mut ours, 1, &[("streamType", "error"), ("port", "80")], false).expect("syn"));
        wire.extend(syn_reply(&mut ours, 1, &[]).expect("reply"));
        wire.extend(syn_stream(&mut ours, 3, &[("streamtype", "stdout")], true).expect("syn"));
        wire.extend(data(3, true, b"hello"));
        wire.extend(ping(7));
        wire.extend(window_update(3, 100));
        wire.extend(rst_stream(5, REFUSED_STREAM));
        wire.extend(goaway(3));
        let mut r = wire.as_slice();
        let mut next = async || read_frame(&mut r, &mut theirs).await.expect("frame").expect("some");
        assert_eq!(
            next().await,
            Frame::SynStream {
                stream: 1,
                fin: false,
                headers: vec![("streamtype".into(), "error".into()), ("port".into(), "80".into())]
            }
        );
        assert_eq!(next().await, Frame::SynReply { stream: 1, fin: false, headers: vec![] });
        assert_eq!(
            next().await,
            Frame::SynStream { stream: 3, fin: true, headers: vec![("streamtype".into(), "stdout".into())] }
        );
        assert_eq!(next().await, Frame::Data { stream: 3, fin: true, data: b"hello".to_vec() });
        assert_eq!(next().await, Frame::Ping { id: 7 });
        assert_eq!(next().await, Frame::WindowUpdate { stream: 3, delta: 100 });
        assert_eq!(next().await, Frame::RstStream { stream: 5, status: REFUSED_STREAM });
        assert_eq!(next().await, Frame::GoAway { last: 3 });
        assert_eq!(read_frame(&mut r, &mut theirs).await.expect("eof"), None);
    }

    #[test]
    fn a_header_block_that_ends_the_zlib_stream_is_refused_not_looped_on() {
        // a complete zlib stream (final block) with the dictionary, then one more byte
        let mut c = Compress::new(Compression::default(), true);
        c.set_dictionary(dictionary()).expect("dict");
        let mut z = Vec::with_capacity(256);
        c.compress_vec(&[0, 0, 0, 0], &mut z, FlushCompress::Finish).expect("deflate");
        z.push(0);
        let mut codec = Codec::new().expect("codec");
        assert!(codec.decode_headers(&z).is_err());
    }

    #[tokio::test]
    async fn garbage_is_an_error_not_a_panic() {
        let mut codec = Codec::new().expect("codec");
        let bad_version = control(SYN_STREAM, 0, &[0u8; 12])
            .iter()
            .enumerate()
            .map(|(i, b)| if i == 1 { 2 } else { *b })
            .collect::<Vec<u8>>();
        assert!(read_frame(&mut bad_version.as_slice(), &mut codec).await.is_err());
        let short = control(RST_STREAM, 0, &[0u8; 2]);
        assert!(read_frame(&mut short.as_slice(), &mut codec).await.is_err());
        let mut codec = Codec::new().expect("codec");
        let junk_headers = control(SYN_STREAM, 0, &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]);
        assert!(read_frame(&mut junk_headers.as_slice(), &mut codec).await.is_err());
    }
}
