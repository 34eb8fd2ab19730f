//! HTTP/1.1 request heads as the metrics listener reads them (hand-written,
//! not hyper): never panics, never reads past the blank line that ends the
//! head, nor more than its limit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rktlet::base::http_head::{Head, MAX_HEAD, read_head};

fuzz_target!(|data: &[u8]| {
    if let Some(head) = Head::parse(&String::from_utf8_lossy(data)) {
        let _ = head.has_token("connection", "upgrade");
    }
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else { return };
    rt.block_on(async {
        let mut r = data;
        let read = read_head(&mut r).await.expect("reading a slice");
        let consumed = data.len() - r.len();
        assert!(consumed <= MAX_HEAD);
        match data.windows(4).position(|w| w == b"\r\n\r\n") {
            Some(end) if end + 4 <= MAX_HEAD => assert_eq!(consumed, end + 4, "only the head is read"),
            _ => assert!(read.is_none()),
        }
    });
});
