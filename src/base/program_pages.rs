//! The daemon's mappings of its own program file. An idle daemon's RSS is
//! mostly these pages (issue 26: 11.8 MiB of code and 2.8 MiB of read-only
//! data of 21 MiB after `rktlet bench`), and the kernel maps them 64 KiB
//! at a time (fault-around), so whatever ran once stays mapped: the
//! start-up's argument and config parsing, logging and server set-up, the
//! recovery scan, and the 1.2 MB appexec program embedded in the binary,
//! read whole once to be hashed and written to the data directory.
//!
//! Such pages are let go once they are done with (`madvise(MADV_DONTNEED)`
//! on read-only private mappings of the program file): they stay in the
//! page cache, and a page touched again comes back as a minor fault. Only
//! mappings without private copies are touched (a relocated RELRO page, or a
//! debugger's breakpoint, is a private copy that must not be dropped).

use crate::base::fsutil::kib_field;
use std::ops::Range;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    range: Range<usize>,
    writable: bool,
    path: PathBuf,
    rss_kib: u64,
    /// KiB of private (anonymous) copies in it; `None` if smaps did not say.
    anonymous_kib: Option<u64>,
}

impl Mapping {
    /// A read-only mapping of `exe` holding nothing but file pages.
    fn droppable(&self, exe: &Path) -> bool {
        !self.writable && self.path == exe && self.anonymous_kib == Some(0)
    }
}

/// The mappings of a `/proc/PID/smaps` text.
fn parse_smaps(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            let perms = fields.next().unwrap_or("");
            // offset, device, inode, then the path (which may hold spaces)
            let path = line.splitn(6, char::is_whitespace).nth(5).unwrap_or("").trim();
            out.push(Mapping {
                range: start..end,
                writable: perms.contains('w'),
                path: PathBuf::from(path),
                rss_kib: 0,
                anonymous_kib: None,
            });
        } else if let Some(m) = out.last_mut() {
            if line.starts_with("Rss:") {
                m.rss_kib = kib_field(line, "Rss:").unwrap_or(0);
            } else if line.starts_with("Anonymous:") {
                m.anonymous_kib = kib_field(line, "Anonymous:");
            }
        }
    }
    out
}

fn own_mappings() -> Option<(PathBuf, Vec<Mapping>)> {
    let exe = std::fs::read_link("/proc/self/exe").ok()?;
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    Some((exe, parse_smaps(&smaps)))
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|n| *n > 0).unwrap_or(4096)
}

/// Lets go of the whole pages of `range` (rounded inwards); true if done.
fn drop_range(range: Range<usize>) -> bool {
    let page = page_size();
    let start = range.start.div_ceil(page) * page;
    let end = range.end / page * page;
    if end <= start {
        return false;
    }
    // SAFETY: the range lies in a read-only private file mapping without
    // private copies: dropping it only unmaps pages the file still holds
    unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) == 0 }
}

/// Lets go of every read-only page of the program mapped now (after the
/// daemon's start-up: the calls fault back what they run). Returns the KiB
/// that were mapped.
pub(crate) fn release_all() -> u64 {
    let Some((exe, maps)) = own_mappings() else { return 0 };
    maps.iter().filter(|m| m.droppable(&exe) && drop_range(m.range.clone())).map(|m| m.rss_kib).sum()
}

/// Lets go of the pages of `bytes`, data embedded in the program that has
/// been used (nothing, if it does not lie in a droppable mapping).
pub(crate) fn release_bytes(bytes: &'static [u8]) -> bool {
    let start = bytes.as_ptr() as usize;
    let range = start..start + bytes.len();
    let Some((exe, maps)) = own_mappings() else { return false };
    maps.iter().any(|m| m.droppable(&exe) && m.range.start <= range.start && range.end <= m.range.end)
        && drop_range(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0a0000000-55d0a0400000 r--p 00000000 fe:01 123 /usr/bin/rk let
Size:               4096 kB
Rss:                2816 kB
Anonymous:             0 kB
55d0a0400000-55d0a1200000 r-xp 00400000 fe:01 123 /usr/bin/rk let
Rss:               11832 kB
Anonymous:             0 kB
55d0a1200000-55d0a1260000 r--p 01200000 fe:01 123 /usr/bin/rk let
Rss:                 408 kB
Anonymous:           396 kB
55d0a1260000-55d0a1270000 rw-p 01260000 fe:01 123 /usr/bin/rk let
Rss:                  64 kB
Anonymous:            64 kB
7f0000000000-7f0000100000 r-xp 00000000 fe:01 9 /usr/lib/libc.so.6
Rss:                1228 kB
Anonymous:             0 kB
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]
Rss:                 132 kB
Anonymous:           132 kB
";

    #[test]
    fn only_the_programs_unmodified_read_only_mappings_are_droppable() {
        let maps = parse_smaps(SMAPS);
        assert_eq!(maps.len(), 6);
        let exe = Path::new("/usr/bin/rk let");
        let droppable: Vec<u64> = maps.iter().filter(|m| m.droppable(exe)).map(|m| m.rss_kib).collect();
        // rodata and code; not the relocated RELRO pages, the data, libc or the stack
        assert_eq!(droppable, vec![2816, 11832]);
        assert_eq!(maps[1].range, 0x55d0a0400000..0x55d0a1200000);
    }

    /// How many of the pages of `bytes` are mapped now (/proc/self/pagemap's
    /// present bit): only this test touches its data, whatever other tests
    /// running beside it map.
    fn mapped_pages(bytes: &[u8]) -> usize {
        use std::io::{Read, Seek, SeekFrom};
        let page = page_size();
        let first = (bytes.as_ptr() as usize).div_ceil(page);
        let last = (bytes.as_ptr() as usize + bytes.len()) / page;
        let mut f = std::fs::File::open("/proc/self/pagemap").expect("pagemap");
        f.seek(SeekFrom::Start(first as u64 * 8)).expect("seek");
        let mut buf = vec![0u8; (last - first) * 8];
        f.read_exact(&mut buf).expect("read pagemap");
        buf.chunks(8).filter(|e| u64::from_le_bytes(<[u8; 8]>::try_from(*e).expect("8 bytes")) >> 63 == 1).count()
    }

    fn sum(bytes: &[u8]) -> u64 {
        // a read the compiler cannot fold: the data's value is known to it
        std::hint::black_box(bytes).iter().map(|b| u64::from(*b)).sum()
    }

    static DATA: [u8; 1 << 20] = [7; 1 << 20];

    /// Pages of [`DATA`] the kernel may map beside other faults: it maps a
    /// fault's aligned 64 KiB neighbourhood (fault-around), so a read of a
    /// constant next to the data maps up to 15 of its pages at either end.
    const NEIGHBOURS: usize = 2 * 15;

    #[test]
    fn released_pages_leave_the_mapping_and_come_back_when_used() {
        let whole = DATA.len() / page_size() - 1;
        // the embedded data read whole: mapped
        let total = sum(&DATA);
        assert!(mapped_pages(&DATA) >= whole, "{} of {whole} pages mapped after a read", mapped_pages(&DATA));
        assert!(release_bytes(&DATA), "the embedded data is in a droppable mapping");
        let left = mapped_pages(&DATA);
        assert!(left <= NEIGHBOURS, "{left} of {whole} pages still mapped after their release");
        // read again: the same bytes, back from the page cache
        assert_eq!(sum(&DATA), total);
        assert!(mapped_pages(&DATA) >= whole);
        // all of the program: this test's code goes too and comes back as it runs
        assert!(release_all() > 0, "nothing of the program was mapped");
        let left = mapped_pages(&DATA);
        assert!(left <= NEIGHBOURS, "{left} of {whole} pages still mapped after releasing all");
        assert_eq!(sum(&DATA), total);
    }
}
