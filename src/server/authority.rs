//! Any HTTP/2 `:authority` on the CRI socket.
//!
//! kubelet up to 1.29 (and crictl and critest v1.29, gRPC C-core 1.57+,
//! grpc-java) send a unix socket's path, percent-encoded, as the HTTP/2
//! `:authority` of every call. h2, under tonic, refuses such a value with
//! RST_STREAM PROTOCOL_ERROR before a handler sees the call; containerd and
//! CRI-O accept it. [`AuthorityFix`] sits between the accepted socket and the
//! server:
//!
//! - Client to server: the frames pass through, except header blocks
//!   (HEADERS and its CONTINUATIONs), which are decoded with an HPACK decoder
//!   of the layer's own so that it follows the client's dynamic table. A block
//!   is forwarded byte for byte until one carries an `:authority` the server
//!   would refuse; from that block on, every block of the connection is
//!   re-encoded with the layer's own HPACK encoder (whose table is then the
//!   one h2's decoder follows), that `:authority` replaced by `localhost`.
//!   Clients that send a valid authority pay one HPACK decode per call.
//! - Server to client: the bytes pass through untouched; RST_STREAM and
//!   GOAWAY frames that carry an error code are logged at warn, so a call
//!   the server refuses before any handler runs is seen at the default level.

use bytes::{Buf, BufMut, BytesMut};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest frame payload the server accepts without a SETTINGS change
/// (SETTINGS_MAX_FRAME_SIZE's initial value; tonic keeps it).
const MAX_FRAME: usize = 16_384;
/// A header block larger than this ends the connection (h2's own limit on a
/// header list is smaller).
const MAX_BLOCK: usize = 1 << 20;
/// What a refused `:authority` becomes.
const REPLACEMENT: &[u8] = b"localhost";
const READ_CHUNK: usize = 16_384;

/// The accepted socket `S`, with the client's header blocks made acceptable
/// to h2 (see the module documentation).
pub(crate) struct AuthorityFix<S> {
    inner: S,
    raw: BytesMut,
    out: BytesMut,
    eof: bool,
    inbound: Inbound,
    outbound: OutboundScan,
}

impl<S> AuthorityFix<S> {
    pub(crate) fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            raw: BytesMut::new(),
            out: BytesMut::new(),
            eof: false,
            inbound: Inbound::new(),
            outbound: OutboundScan::default(),
        }
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for AuthorityFix<S> {
    type ConnectInfo = S::ConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The client's side of the connection: where the frame parser stands and
/// the HPACK state.
struct Inbound {
    /// Bytes of the connection preface still to pass.
    preface: usize,
    /// Payload bytes of the current (non-header) frame still to pass.
    skip: usize,
    block: Option<Block>,
    decoder: loona_hpack::Decoder<'static>,
    /// Set once a block had to be rewritten: every later block is re-encoded.
    encoder: Option<loona_hpack::Encoder<'static>>,
}

/// A header block being collected: HEADERS, then CONTINUATIONs up to the one
/// with END_HEADERS.
struct Block {
    stream: u32,
    end_stream: bool,
    fragment: Vec<u8>,
    /// The frames as received, forwarded when nothing needs rewriting.
    original: BytesMut,
}

fn malformed(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

impl Inbound {
    fn new() -> Self {
        Inbound { preface: PREFACE.len(), skip: 0, block: None, decoder: loona_hpack::Decoder::new(), encoder: None }
    }

    /// Moves what can be decided of `raw` into `out`; a partial header frame
    /// stays in `raw` until the rest arrives.
    fn process(&mut self, raw: &mut BytesMut, out: &mut BytesMut) -> io::Result<()> {
        loop {
            if self.preface > 0 || self.skip > 0 {
                let pending = if self.preface > 0 { &mut self.preface } else { &mut self.skip };
                let n = (*pending).min(raw.len());
                out.extend_from_slice(&raw.split_to(n));
                *pending -= n;
                if *pending > 0 {
                    return Ok(());
                }
                continue;
            }
            if raw.len() < FRAME_HEADER {
                return Ok(());
            }
            let len = usize::from(raw[0]) << 16 | usize::from(raw[1]) << 8 | usize::from(raw[2]);
            let kind = raw[3];
            if kind != HEADERS && kind != CONTINUATION {
                out.extend_from_slice(&raw.split_to(FRAME_HEADER));
                self.skip = len;
                continue;
            }
            // nothing larger is buffered (the server would refuse it anyway)
            if len > MAX_FRAME {
                return Err(malformed(format!("a header frame of {len} bytes, over {MAX_FRAME}")));
            }
            if raw.len() < FRAME_HEADER + len {
                return Ok(());
            }
            let frame = raw.split_to(FRAME_HEADER + len);
            self.header_frame(frame, out)?;
        }
    }

    fn header_frame(&mut self, frame: BytesMut, out: &mut BytesMut) -> io::Result<()> {
        let (kind, flags) = (frame[3], frame[4]);
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = &frame[FRAME_HEADER..];
        if kind == HEADERS {
            if self.block.is_some() {
                return Err(malformed("HEADERS frame inside another header block"));
            }
            let mut start = 0;
            let mut pad = 0;
            if flags & PADDED != 0 {
                pad = usize::from(*payload.first().ok_or_else(|| malformed("empty padded HEADERS frame"))?);
                start = 1;
            }
            if flags & PRIORITY != 0 {
                start += 5;
            }
            let end = payload
                .len()
                .checked_sub(pad)
                .filter(|end| *end >= start)
                .ok_or_else(|| malformed("HEADERS frame shorter than its padding and priority"))?;
            self.block = Some(Block {
                stream,
                end_stream: flags & END_STREAM != 0,
                fragment: payload[start..end].to_vec(),
                original: BytesMut::new(),
            });
        } else {
            let block = self
                .block
                .as_mut()
                .filter(|b| b.stream == stream)
                .ok_or_else(|| malformed("CONTINUATION frame outside its header block"))?;
            block.fragment.extend_from_slice(payload);
        }
        let Some(block) = self.block.as_mut() else {
            return Ok(());
        };
        if block.fragment.len() > MAX_BLOCK {
            return Err(malformed(format!("header block over {MAX_BLOCK} bytes")));
        }
        block.original.extend_from_slice(&frame);
        if flags & END_HEADERS == 0 {
            return Ok(());
        }
        let Some(block) = self.block.take() else {
            return Ok(());
        };
        self.finish(block, out)
    }

    /// Decodes a complete block and forwards it, as received or re-encoded.
    fn finish(&mut self, block: Block, out: &mut BytesMut) -> io::Result<()> {
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut refused = false;
        // decoded size as HPACK counts it (name + value + 32): a small block
        // of references to a large table entry must not decode to gigabytes
        let mut decoded = 0usize;
        self.decoder
            .decode_with_cb(&block.fragment, |name, value| {
                decoded += name.len() + value.len() + 32;
                if decoded > MAX_BLOCK {
                    return;
                }
                if name.as_ref() == b":authority" && !authority_is_valid(&value) {
                    refused = true;
                    tracing::debug!(
                        authority = %String::from_utf8_lossy(&value),
                        "client sent an :authority h2 refuses (a socket path); read as localhost"
                    );
                    fields.push((name.into_owned(), REPLACEMENT.to_vec()));
                } else {
                    fields.push((name.into_owned(), value.into_owned()));
                }
            })
            .map_err(|e| malformed(format!("undecodable header block from the client: {e:?}")))?;
        if decoded > MAX_BLOCK {
            return Err(malformed(format!("a header list over {MAX_BLOCK} bytes decoded")));
        }
        if !refused && self.encoder.is_none() {
            out.extend_from_slice(&block.original);
            return Ok(());
        }
        let encoder = self.encoder.get_or_insert_with(loona_hpack::Encoder::new);
        let encoded = encoder.encode(fields.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        write_block(block.stream, block.end_stream, &encoded, out);
        Ok(())
    }
}

/// Whether h2 takes `value` as an `:authority` (it parses it with `http`).
fn authority_is_valid(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// Writes a header block as one HEADERS frame and as many CONTINUATIONs as
/// the frame size needs.
fn write_block(stream: u32, end_stream: bool, block: &[u8], out: &mut BytesMut) {
    let mut chunks = block.chunks(MAX_FRAME).peekable();
    let mut first = true;
    if block.is_empty() {
        write_frame_header(out, 0, HEADERS, END_HEADERS | if end_stream { END_STREAM } else { 0 }, stream);
        return;
    }
    while let Some(chunk) = chunks.next() {
        let mut flags = if chunks.peek().is_none() { END_HEADERS } else { 0 };
        let kind = if first { HEADERS } else { CONTINUATION };
        if first && end_stream {
            flags |= END_STREAM;
        }
        write_frame_header(out, chunk.len(), kind, flags, stream);
        out.extend_from_slice(chunk);
        first = false;
    }
}

fn write_frame_header(out: &mut BytesMut, len: usize, kind: u8, flags: u8, stream: u32) {
    // a chunk is at most MAX_FRAME long, so it fits 24 bits
    out.put_uint(len as u64, 3);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream);
}

/// Follows the server's frames across writes to log the errors it sends.
#[derive(Default)]
struct OutboundScan {
    header: [u8; FRAME_HEADER],
    have: usize,
    remaining: usize,
    body: [u8; 8],
    body_have: usize,
    /// The last error sent: frame type and error code.
    last_error: Option<(u8, u32)>,
}

impl OutboundScan {
    fn scan(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.have < FRAME_HEADER {
                let n = (FRAME_HEADER - self.have).min(data.len());
                self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
                self.have += n;
                data = &data[n..];
                if self.have == FRAME_HEADER {
                    let h = &self.header;
                    self.remaining = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                    self.body_have = 0;
                    if self.remaining == 0 {
                        self.frame_done();
                    }
                }
                continue;
            }
            let n = self.remaining.min(data.len());
            let keep = n.min(self.body.len() - self.body_have);
            self.body[self.body_have..self.body_have + keep].copy_from_slice(&data[..keep]);
            self.body_have += keep;
            self.remaining -= n;
            data = &data[n..];
            if self.remaining == 0 {
                self.frame_done();
            }
        }
    }

    fn frame_done(&mut self) {
        self.have = 0;
        let kind = self.header[3];
        let stream = u32::from_be_bytes([self.header[5], self.header[6], self.header[7], self.header[8]]) & 0x7fff_ffff;
        let b = &self.body;
        match kind {
            RST_STREAM if self.body_have >= 4 => {
                let code = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                // NO_ERROR and CANCEL end calls the client no longer waits for
                if code != 0 && code != 0x8 {
                    self.last_error = Some((RST_STREAM, code));
                    tracing::warn!(stream, error = error_name(code), "CRI socket: the server reset a call");
                }
            }
            GOAWAY if self.body_have >= 8 => {
                let code = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                if code != 0 {
                    self.last_error = Some((GOAWAY, code));
                    tracing::warn!(error = error_name(code), "CRI socket: the server closed a connection");
                }
            }
            _ => {}
        }
    }
}

/// The names of HTTP/2's error codes (RFC 9113, section 7).
fn error_name(code: u32) -> &'static str {
    match code {
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => "unknown error code",
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.out.is_empty() {
                let n = buf.remaining().min(this.out.len());
                buf.put_slice(&this.out[..n]);
                this.out.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let start = this.raw.len();
            this.raw.resize(start + READ_CHUNK, 0);
            let mut chunk = ReadBuf::new(&mut this.raw[start..]);
            let polled = Pin::new(&mut this.inner).poll_read(cx, &mut chunk);
            let n = chunk.filled().len();
            this.raw.truncate(start + n);
            ready!(polled)?;
            if n == 0 {
                // a frame cut short is the server's to report
                this.eof = true;
                let rest = this.raw.split();
                this.out.extend_from_slice(&rest);
                continue;
            }
            if let Err(e) = this.inbound.process(&mut this.raw, &mut this.out) {
                tracing::warn!(error = %e, "CRI socket: closing a connection");
                return Poll::Ready(Err(e));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        this.outbound.scan(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut n = ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs))?;
        let written = n;
        for b in bufs {
            let take = n.min(b.len());
            this.outbound.scan(&b[..take]);
            n -= take;
            if n == 0 {
                break;
            }
        }
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(stream: u32, end_stream: bool, block: &[u8]) -> BytesMut {
        let mut out = BytesMut::new();
        write_block(stream, end_stream, block, &mut out);
        out
    }

    /// Splits forwarded bytes into (kind, flags, stream, payload) frames.
    fn parse(mut b: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut v = Vec::new();
        while !b.is_empty() {
            let len = usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]);
            let stream = u32::from_be_bytes([b[5], b[6], b[7], b[8]]);
            v.push((b[3], b[4], stream, b[9..9 + len].to_vec()));
            b = &b[9 + len..];
        }
        v
    }

    fn request(authority: &str, path: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
    }

    fn encode(enc: &mut loona_hpack::Encoder<'static>, fields: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        enc.encode(fields.iter().map(|(n, v)| (n.as_slice(), v.as_slice())))
    }

    /// Feeds `input` one byte at a time (the worst segmentation) and returns
    /// what is forwarded.
    fn feed(inbound: &mut Inbound, input: &[u8]) -> BytesMut {
        let (mut raw, mut out) = (BytesMut::new(), BytesMut::new());
        for b in input {
            raw.extend_from_slice(&[*b]);
            inbound.process(&mut raw, &mut out).expect("process");
        }
        assert!(raw.is_empty(), "bytes left unforwarded");
        out
    }

    fn authority_of(dec: &mut loona_hpack::Decoder<'static>, block: &[u8]) -> Vec<u8> {
        let fields = dec.decode(block).expect("the server's decoder reads the block");
        fields.into_iter().find(|(n, _)| n == b":authority").map(|(_, v)| v).expect(":authority")
    }

    #[test]
    fn a_socket_path_authority_becomes_localhost_and_later_blocks_stay_consistent() {
        let socket = "%2Ftmp%2Fcri%2Frktlet.sock";
        let mut client = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        // SETTINGS from the client passes through as it is
        input.extend_from_slice(&[0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 0x3, 0, 0, 0, 100]);
        input.extend_from_slice(&frames(1, false, &encode(&mut client, &request(socket, "/a"))));
        // a DATA frame
        input.extend_from_slice(&[0, 0, 3, 0x0, END_STREAM, 0, 0, 0, 1, 7, 8, 9]);
        // the second call names the authority from the client's dynamic table
        input.extend_from_slice(&frames(3, true, &encode(&mut client, &request(socket, "/b"))));
        let out = feed(&mut Inbound::new(), &input);

        assert_eq!(&out[..PREFACE.len()], PREFACE);
        let parsed = parse(&out[PREFACE.len()..]);
        let kinds: Vec<u8> = parsed.iter().map(|f| f.0).collect();
        assert_eq!(kinds, vec![0x4, HEADERS, 0x0, HEADERS]);
        assert_eq!(parsed[2].3, vec![7, 8, 9]);
        assert_eq!(parsed[3].1, END_HEADERS | END_STREAM);
        let mut server = loona_hpack::Decoder::new();
        assert_eq!(authority_of(&mut server, &parsed[1].3), b"localhost");
        assert_eq!(authority_of(&mut server, &parsed[3].3), b"localhost");
    }

    #[test]
    fn valid_authorities_pass_byte_for_byte_until_one_is_refused() {
        let mut client = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        let first = frames(1, true, &encode(&mut client, &request("localhost", "/a")));
        input.extend_from_slice(&first);
        input.extend_from_slice(&frames(3, true, &encode(&mut client, &request("/run/x.sock", "/b"))));
        input.extend_from_slice(&frames(5, true, &encode(&mut client, &request("localhost", "/c"))));
        let out = feed(&mut Inbound::new(), &input);
        assert_eq!(&out[PREFACE.len()..PREFACE.len() + first.len()], &first[..]);
        let parsed = parse(&out[PREFACE.len()..]);
        let mut server = loona_hpack::Decoder::new();
        let paths: Vec<(Vec<u8>, Vec<u8>)> = parsed
            .iter()
            .map(|f| {
                let fields = server.decode(&f.3).expect("decodes");
                let get = |n: &[u8]| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()).unwrap_or_default();
                (get(b":path"), get(b":authority"))
            })
            .collect();
        assert_eq!(
            paths,
            vec![
                (b"/a".to_vec(), b"localhost".to_vec()),
                (b"/b".to_vec(), b"localhost".to_vec()),
                (b"/c".to_vec(), b"localhost".to_vec())
            ]
        );
    }

    #[test]
    fn continuation_padding_and_priority_are_read_and_large_blocks_are_split() {
        let mut client = loona_hpack::Encoder::new();
        let mut fields = request("%2Fa.sock", "/big");
        fields.push((b"x-big".to_vec(), vec![b'v'; 40_000]));
        let block = encode(&mut client, &fields);
        // HEADERS with padding and priority carrying the first 100 bytes, the rest in a CONTINUATION
        let mut input = PREFACE.to_vec();
        let mut payload = vec![3u8, 0, 0, 0, 0, 16];
        payload.extend_from_slice(&block[..100]);
        payload.extend_from_slice(&[0, 0, 0]);
        let mut head = BytesMut::new();
        write_frame_header(&mut head, payload.len(), HEADERS, PADDED | PRIORITY | END_STREAM, 7);
        input.extend_from_slice(&head);
        input.extend_from_slice(&payload);
        let rest: Vec<&[u8]> = block[100..].chunks(MAX_FRAME).collect();
        for (i, chunk) in rest.iter().enumerate() {
            let mut cont = BytesMut::new();
            let flags = if i + 1 == rest.len() { END_HEADERS } else { 0 };
            write_frame_header(&mut cont, chunk.len(), CONTINUATION, flags, 7);
            input.extend_from_slice(&cont);
            input.extend_from_slice(chunk);
        }
        let out = feed(&mut Inbound::new(), &input);
        let parsed = parse(&out[PREFACE.len()..]);
        assert!(parsed.len() >= 3, "40 kB is split into frames of at most 16 kB");
        assert!(parsed.iter().all(|f| f.3.len() <= MAX_FRAME && f.2 == 7));
        assert_eq!(parsed[0].0, HEADERS);
        assert_eq!(parsed[0].1, END_STREAM);
        assert!(parsed[1..].iter().all(|f| f.0 == CONTINUATION));
        assert_eq!(parsed.last().map(|f| f.1), Some(END_HEADERS));
        let joined: Vec<u8> = parsed.iter().flat_map(|f| f.3.clone()).collect();
        let decoded = loona_hpack::Decoder::new().decode(&joined).expect("decodes");
        assert!(decoded.contains(&(b":authority".to_vec(), b"localhost".to_vec())));
        assert!(decoded.contains(&(b"x-big".to_vec(), vec![b'v'; 40_000])));
    }

    #[test]
    fn a_continuation_without_headers_and_garbage_hpack_end_the_connection() {
        let mut input = PREFACE.to_vec();
        let mut cont = BytesMut::new();
        write_frame_header(&mut cont, 1, CONTINUATION, END_HEADERS, 1);
        input.extend_from_slice(&cont);
        input.push(0x82);
        let (mut raw, mut out) = (BytesMut::from(&input[..]), BytesMut::new());
        assert!(Inbound::new().process(&mut raw, &mut out).is_err());

        let mut input = PREFACE.to_vec();
        input.extend_from_slice(&frames(1, true, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]));
        let (mut raw, mut out) = (BytesMut::from(&input[..]), BytesMut::new());
        let err = Inbound::new().process(&mut raw, &mut out).expect_err("garbage");
        assert!(err.to_string().contains("undecodable header block"), "{err}");
    }

    #[test]
    fn oversized_frames_and_header_bombs_end_the_connection() {
        // a frame longer than the server takes is refused before it is buffered
        let mut input = PREFACE.to_vec();
        let mut head = BytesMut::new();
        write_frame_header(&mut head, MAX_FRAME + 1, HEADERS, END_HEADERS, 1);
        input.extend_from_slice(&head);
        let (mut raw, mut out) = (BytesMut::from(&input[..]), BytesMut::new());
        assert!(Inbound::new().process(&mut raw, &mut out).is_err());
        // a 4000-byte table entry named 300 times decodes to over 1 MiB
        // (a literal with incremental indexing: name "x", a 4000-byte value; then index 62, 300 times)
        let mut block = vec![0x40, 1, b'x'];
        loona_hpack::encoder::encode_integer_into(4000, 7, 0, &mut block).expect("length");
        block.extend_from_slice(&[b'v'; 4000]);
        block.extend(std::iter::repeat_n(0x80 | 62, 300));
        let mut input = PREFACE.to_vec();
        input.extend_from_slice(&frames(1, true, &block));
        let (mut raw, mut out) = (BytesMut::from(&input[..]), BytesMut::new());
        let err = Inbound::new().process(&mut raw, &mut out).expect_err("bomb");
        assert!(err.to_string().contains("decoded"), "{err}");
    }

    #[test]
    fn server_errors_are_found_across_split_writes() {
        let mut scan = OutboundScan::default();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&[0, 0, 0, 0x4, 0x1, 0, 0, 0, 0]); // SETTINGS ack
        bytes.extend_from_slice(&[0, 0, 4, RST_STREAM, 0, 0, 0, 0, 3, 0, 0, 0, 8]); // CANCEL: not an error
        bytes.extend_from_slice(&[0, 0, 4, RST_STREAM, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
        for b in &bytes {
            scan.scan(std::slice::from_ref(b));
        }
        assert_eq!((scan.have, scan.remaining, scan.last_error), (0, 0, Some((RST_STREAM, 1))));
        scan.scan(&[0, 0, 8, GOAWAY, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9]);
        assert_eq!(scan.last_error, Some((GOAWAY, 9)));
        assert_eq!(error_name(9), "COMPRESSION_ERROR");
    }
}
