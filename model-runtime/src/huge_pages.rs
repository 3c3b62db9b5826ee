//! Back a loaded model's weights with transparent huge pages.
//!
//! A decode step reads every weight once: a few hundred MiB for the 0.5B SLM at int4, spread
//! over ~100,000 pages of 4 KiB, far more than the TLB holds, so the matrix kernels stall on
//! page walks. With 2 MiB pages the same weights are a few hundred entries. Most
//! distributions set transparent huge pages to `madvise` (only memory a process asks for is
//! backed by them), and ONNX Runtime does not ask: its prepacked weights sit on 4 KiB pages in
//! both this runtime and onnxruntime-genai. Asking makes decoding faster than genai on the
//! same files (BENCHMARKS.md, "Edge SLM decoding").
//!
//! ONNX Runtime allocates the weights while the session loads. Right after, every anonymous
//! writable mapping of at least 2 MiB that is almost all resident is advised
//! (`MADV_HUGEPAGE`) and collapsed into huge pages at once (`MADV_COLLAPSE`, Linux 6.1+;
//! where that is refused, the kernel's `khugepaged` collapses advised memory in the
//! background). Only mostly-resident mappings, so that a thread's reserved stack or an arena's
//! untouched reserve does not become resident 2 MiB at a time. Nothing changes where
//! transparent huge pages are off (`never`) or on other systems. The choice of mappings is a
//! pure function of `/proc/self/smaps` ([`candidates`]), tested on its text.

/// The huge page size on x86-64 and most aarch64 kernels.
const HUGE: u64 = 2 << 20;

/// A mapping is advised when at least this share of it is resident.
const MIN_RESIDENT: f64 = 0.9;

/// An address range to advise, 2 MiB aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

/// What advising did, for the load log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Advised {
    /// Bytes advised (`MADV_HUGEPAGE` accepted).
    pub advised: u64,
    /// Of those, bytes collapsed into huge pages at once (`MADV_COLLAPSE` accepted).
    pub collapsed: u64,
}

/// The 2 MiB-aligned insides of the anonymous writable mappings in `smaps` (the text of
/// `/proc/self/smaps`) that are at least 2 MiB and mostly resident.
pub fn candidates(smaps: &str) -> Vec<Range> {
    let mut out = Vec::new();
    let mut current: Option<(u64, u64)> = None;
    for line in smaps.lines() {
        if let Some(header) = mapping_header(line) {
            current = header;
            continue;
        }
        let Some((start, end)) = current else { continue };
        let Some(rss_kib) = line.strip_prefix("Rss:").and_then(|v| v.trim().strip_suffix("kB")).and_then(|v| v.trim().parse::<u64>().ok()) else {
            continue;
        };
        current = None;
        let (lo, hi) = (start.div_ceil(HUGE) * HUGE, end / HUGE * HUGE);
        if hi > lo && (rss_kib * 1024) as f64 >= MIN_RESIDENT * (end - start) as f64 {
            out.push(Range { start: lo, end: hi });
        }
    }
    out
}

/// `Some(Some(range))` for the header line of an anonymous writable mapping (or the heap),
/// `Some(None)` for any other mapping's header, `None` for a field line.
fn mapping_header(line: &str) -> Option<Option<(u64, u64)>> {
    let mut parts = line.split_whitespace();
    let range = parts.next()?;
    let (start, end) = range.split_once('-')?;
    let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16)) else { return None };
    let perms = parts.next()?;
    let (_offset, _dev, inode) = (parts.next()?, parts.next()?, parts.next()?);
    let path = parts.next();
    let anonymous = inode == "0" && matches!(path, None | Some("[heap]"));
    Some((anonymous && perms.starts_with("rw")).then_some((start, end)))
}

/// Advise and collapse the current candidates (see the module docs); what it managed.
#[cfg(target_os = "linux")]
pub fn back_with_huge_pages() -> Advised {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else { return Advised::default() };
    let mut done = Advised::default();
    for r in candidates(&smaps) {
        let (addr, len) = (r.start as usize as *mut libc::c_void, (r.end - r.start) as usize);
        // SAFETY: madvise only changes how the kernel backs this process's own mapped pages;
        // their contents and addresses stay as they are, whoever owns them.
        if unsafe { libc::madvise(addr, len, libc::MADV_HUGEPAGE) } != 0 {
            continue;
        }
        done.advised += len as u64;
        // SAFETY: as above; a refused collapse leaves the pages as they were.
        if unsafe { libc::madvise(addr, len, libc::MADV_COLLAPSE) } == 0 {
            done.collapsed += len as u64;
        }
    }
    done
}

/// Elsewhere there is nothing to advise.
#[cfg(not(target_os = "linux"))]
pub fn back_with_huge_pages() -> Advised {
    Advised::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0c0000000-55d0c0400000 r-xp 00000000 fd:01 1234 /usr/bin/edge-node
Size:               4096 kB
Rss:                4096 kB
55d0c1000000-55d0c1a00000 rw-p 00000000 00:00 0 [heap]
Size:              10240 kB
Rss:               10000 kB
7f0000100000-7f0008100000 rw-p 00000000 00:00 0 
Size:             131072 kB
Rss:              131072 kB
Anonymous:        131072 kB
7f0010000000-7f0010800000 rw-p 00000000 00:00 0 
Size:               8192 kB
Rss:                  64 kB
7f0020000000-7f0020100000 rw-p 00000000 00:00 0 
Size:               1024 kB
Rss:                1024 kB
7f0030000000-7f0031000000 rw-p 00000000 fd:01 99 /models/model.onnx.data
Size:              16384 kB
Rss:               16384 kB
7f0040000000-7f0041000000 r--p 00000000 00:00 0 
Size:              16384 kB
Rss:               16384 kB
7ffd00000000-7ffd00800000 rw-p 00000000 00:00 0 [stack]
Size:               8192 kB
Rss:                8192 kB
";

    #[test]
    fn resident_anonymous_writable_mappings_are_advised_inside_their_2_mib_boundaries() {
        let got = candidates(SMAPS);
        assert_eq!(
            got,
            vec![
                // The heap, 97.6 % resident: its aligned inside.
                Range { start: 0x55d0c1000000, end: 0x55d0c1a00000 },
                // A 128 MiB anonymous mapping starting 1 MiB past a boundary: the whole 2 MiB pages inside it.
                Range { start: 0x7f0000200000, end: 0x7f0008000000 },
            ]
        );
    }

    #[test]
    fn reserved_small_file_backed_read_only_and_stack_mappings_are_left_alone() {
        let got = candidates(SMAPS);
        for skipped in [0x7f0010000000u64, 0x7f0020000000, 0x7f0030000000, 0x7f0040000000, 0x7ffd00000000, 0x55d0c0000000] {
            assert!(got.iter().all(|r| r.start != skipped), "{skipped:#x} advised: {got:?}");
        }
    }

    #[test]
    fn text_that_is_not_smaps_gives_nothing() {
        assert!(candidates("").is_empty());
        assert!(candidates("Rss: 100 kB\nnot a header\n7f00-zz rw-p 0 0 0\nRss: 5 kB\n").is_empty());
    }

    #[test]
    fn advising_this_process_never_fails_loudly() {
        let buf = vec![1u8; 8 << 20];
        let done = back_with_huge_pages();
        assert!(done.collapsed <= done.advised);
        assert_eq!(buf.iter().map(|&b| u64::from(b)).sum::<u64>(), 8 << 20, "contents unchanged");
    }
}
