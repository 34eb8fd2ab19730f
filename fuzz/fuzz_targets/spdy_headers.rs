//! SPDY/3.1 header blocks, the hand-written part of the framing: inflating
//! a block (zlib with SPDY's dictionary, one stream per session) and parsing
//! the name/value block never panic nor allocate past the limit; what one
//! codec encodes, another decodes back (names lowercased), block after
//! block on the same zlib streams.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rktlet::stream::spdy;

fuzz_target!(|data: &[u8]| {
    let Some((mode, data)) = data.split_first() else { return };
    match mode % 3 {
        // a peer's compressed blocks: the input cut in blocks at 0xff bytes
        0 => {
            let Ok(mut codec) = spdy::Codec::new() else { return };
            for block in data.split(|b| *b == 0xff) {
                if codec.decode_headers(block).is_err() {
                    break;
                }
            }
        }
        // an inflated block as the peer could make it
        1 => {
            if let Ok(headers) = spdy::parse_block(data) {
                assert!(headers.len() <= data.len() / 8, "each header takes 8 bytes at least");
            }
        }
        // round trips: headers are NUL-separated names and values, blocks
        // separated by 0xff bytes
        _ => {
            let (Ok(mut ours), Ok(mut theirs)) = (spdy::Codec::new(), spdy::Codec::new()) else { return };
            for block in data.split(|b| *b == 0xff) {
                let Ok(text) = std::str::from_utf8(block) else { return };
                let fields: Vec<&str> = text.split('\0').collect();
                let headers: Vec<(&str, &str)> = fields.chunks_exact(2).map(|p| (p[0], p[1])).collect();
                let encoded = ours.encode_headers(&headers).expect("encoding");
                let decoded = theirs.decode_headers(&encoded).expect("what we encode decodes");
                let want: Vec<(String, String)> =
                    headers.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.to_string())).collect();
                assert_eq!(decoded, want);
            }
        }
    }
});
