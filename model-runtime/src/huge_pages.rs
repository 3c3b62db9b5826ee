//! Back a loaded model's weights with transparent huge pages.
//!
//! A decode step reads every weight once: a few hundred MiB for the 0.5B SLM at int4, spread
//! over ~100,000 pages of 4 KiB, far more than the TLB holds, so the matrix kernels stall on
//! page walks. With 2 MiB pages the same weights are a few hundred entries. Most
//! distributions set transparent huge pages to `madvise` (only memory a process asks for is
//! backed by them), and ONNX Runtime does not ask: its prepacked weights sit on 4 KiB pages in
//! both this runtime and onnxruntime-genai. Asking makes decoding faster than genai on the
//! same files (docs/src/benchmarks/device-decode.md).
//!
//! ONNX Runtime allocates the weights while the session loads. Right after, every anonymous
//! writable mapping of at least 2 MiB that is at least half resident is advised
//! (`MADV_HUGEPAGE`) and collapsed into huge pages at once (`MADV_COLLAPSE`, Linux 6.1+;
//! where that is refused, the kernel's `khugepaged` collapses advised memory in the
//! background). Only mappings at least half resident, so that a thread's reserved stack or an
//! arena's untouched reserve does not become resident 2 MiB at a time; half, not all, because
//! the heap that holds the KV caches keeps some freed pages at its top. Nothing changes where
//! transparent huge pages are off (`never`) or on other systems. The choice of mappings is a
//! pure function of `/proc/self/smaps` ([`candidates`]), tested on its text.
//!
//! Memory allocated after the load is worth the same: the KV caches (a step reads every cached
//! position of every layer) and the arena's buffers for a longer prompt than any before (a
//! prefill writes every layer's activations for every position). A later pass skips what is
//! already on huge pages, but collapsing new memory can still take the kernel tens to hundreds
//! of milliseconds (it compacts memory to find free 2 MiB blocks). So a later pass runs only once
//! the process has grown by [`REGROWTH`] since the last one ([`Regrowth`], a pure rule on
//! resident sizes: a statm read per check), one at a time, on a thread of its own, never on
//! the step that found it due (`CausalLm` starts it; the kernel collapses memory under
//! running threads as its own `khugepaged` does).

/// The huge page size on x86-64 and most aarch64 kernels.
const HUGE: u64 = 2 << 20;

/// A mapping is advised when at least this share of it is resident: collapsing it can make
/// the rest resident too, so advising never more than doubles what a mapping holds.
const MIN_RESIDENT: f64 = 0.5;

/// Growth in resident memory since the last pass that makes another pass worth its cost:
/// less than one 0.5B KV cache of 1,024 positions (24 MiB).
pub const REGROWTH: u64 = 16 << 20;

/// When to advise again, from the resident size when the last pass started (see the module
/// docs).
#[derive(Debug, Default)]
pub struct Regrowth {
    /// Resident bytes when the last pass started, or the lowest seen since (memory given back
    /// and taken again is new memory to advise).
    baseline: std::sync::atomic::AtomicU64,
    /// A pass is running: no second one beside it.
    running: std::sync::atomic::AtomicBool,
}

impl Regrowth {
    /// Start from the resident size after the first pass.
    pub fn after_pass(resident: u64) -> Self {
        Self { baseline: resident.into(), running: false.into() }
    }

    /// Whether the process, now `resident` bytes, has grown enough since the last pass to
    /// advise again and no pass is running; if so, the pass is counted as started from
    /// `resident` and the caller runs it, then calls [`Regrowth::finished`]. Shrinking lowers
    /// the baseline.
    pub fn start_if_due(&self, resident: u64) -> bool {
        use std::sync::atomic::Ordering::{AcqRel, Relaxed};
        let base = self.baseline.fetch_min(resident, Relaxed).min(resident);
        if resident < base + REGROWTH || self.running.swap(true, AcqRel) {
            return false;
        }
        self.baseline.store(resident, Relaxed);
        true
    }

    /// The pass started by [`Regrowth::start_if_due`] is over (done or given up).
    pub fn finished(&self) {
        self.running.store(false, std::sync::atomic::Ordering::Release);
    }

    /// Whether a pass is running now.
    pub fn running(&self) -> bool {
        self.running.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// This process's resident bytes (`/proc/self/statm`); `None` where that cannot be read.
#[cfg(target_os = "linux")]
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok().filter(|&p| p > 0)?)
}

/// Elsewhere nothing is advised, so nothing is measured.
#[cfg(not(target_os = "linux"))]
pub fn resident_bytes() -> Option<u64> {
    None
}

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
/// `/proc/self/smaps`) that are at least 2 MiB, at least half resident and not yet all on
/// huge pages (a later pass leaves the weights collapsed by the first one alone: asking again
/// costs the kernel a walk of every page).
pub fn candidates(smaps: &str) -> Vec<Range> {
    let mut out = Vec::new();
    let mut current: Option<Mapping> = None;
    for line in smaps.lines() {
        if let Some(header) = mapping_header(line) {
            out.extend(current.take().and_then(Mapping::candidate));
            current = header.map(|(start, end)| Mapping { start, end, rss: 0, huge: 0 });
            continue;
        }
        let Some(m) = current.as_mut() else { continue };
        if let Some(kib) = field_kib(line, "Rss:") {
            m.rss = kib << 10;
        } else if let Some(kib) = field_kib(line, "AnonHugePages:") {
            m.huge = kib << 10;
        }
    }
    out.extend(current.and_then(Mapping::candidate));
    out
}

/// One anonymous writable mapping of `smaps` and what of it is resident.
struct Mapping {
    start: u64,
    end: u64,
    /// Resident bytes.
    rss: u64,
    /// Of those, bytes on huge pages already.
    huge: u64,
}

impl Mapping {
    fn candidate(self) -> Option<Range> {
        let (lo, hi) = (self.start.div_ceil(HUGE) * HUGE, self.end / HUGE * HUGE);
        let resident = self.rss as f64 >= MIN_RESIDENT * (self.end - self.start) as f64;
        (hi > lo && resident && self.huge < hi - lo).then_some(Range { start: lo, end: hi })
    }
}

/// The value of a `Name:   123 kB` line of `smaps`, when `line` is that field.
fn field_kib(line: &str, name: &str) -> Option<u64> {
    line.strip_prefix(name)?.trim().strip_suffix("kB")?.trim().parse().ok()
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
        // One huge page at a time: the kernel reports only the last failure of a range, so a
        // range with one page it cannot collapse (part of a split huge page, say) would
        // count as none collapsed.
        for page in (r.start..r.end).step_by(HUGE as usize) {
            // SAFETY: as above; a refused collapse leaves the pages as they were.
            if unsafe { libc::madvise(page as usize as *mut libc::c_void, HUGE as usize, libc::MADV_COLLAPSE) } == 0 {
                done.collapsed += HUGE;
            }
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
7f0050000000-7f0050400000 rw-p 00000000 00:00 0 
Size:               4096 kB
Rss:                2600 kB
AnonHugePages:      2048 kB
7f0060000000-7f0060400000 rw-p 00000000 00:00 0 
Size:               4096 kB
Rss:                4096 kB
AnonHugePages:      4096 kB
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
                // 63 % resident, as a heap with freed pages at its top, half on huge pages: advised.
                Range { start: 0x7f0050000000, end: 0x7f0050400000 },
            ]
        );
    }

    #[test]
    fn reserved_small_file_backed_read_only_stack_and_already_huge_mappings_are_left_alone() {
        let got = candidates(SMAPS);
        for skipped in [0x7f0010000000u64, 0x7f0020000000, 0x7f0030000000, 0x7f0040000000, 0x7f0060000000, 0x7ffd00000000, 0x55d0c0000000] {
            assert!(got.iter().all(|r| r.start != skipped), "{skipped:#x} advised: {got:?}");
        }
    }

    #[test]
    fn another_pass_is_due_only_after_the_process_grows_by_the_regrowth() {
        let r = Regrowth::after_pass(500 << 20);
        assert!(!r.start_if_due((500 << 20) + REGROWTH - 1), "short of the regrowth");
        assert!(r.start_if_due((500 << 20) + REGROWTH), "grown by the regrowth");
        r.finished();
        assert!(!r.start_if_due((500 << 20) + REGROWTH + (8 << 20)), "counted from the last pass's start");
    }

    #[test]
    fn no_second_pass_starts_while_one_runs() {
        let r = Regrowth::after_pass(100 << 20);
        assert!(r.start_if_due(200 << 20));
        assert!(!r.start_if_due(400 << 20), "one pass at a time");
        assert!(r.running());
        r.finished();
        assert!(!r.running());
        assert!(r.start_if_due(400 << 20), "due again once it is over");
    }

    #[test]
    fn memory_given_back_and_taken_again_is_due() {
        let r = Regrowth::after_pass(600 << 20);
        assert!(!r.start_if_due(560 << 20), "shrinking is never due");
        assert!(r.start_if_due((560 << 20) + REGROWTH), "the regrowth from the lowest size since");
    }

    #[test]
    fn this_process_has_a_resident_size() {
        let kib = resident_bytes().expect("statm on Linux") >> 10;
        assert!(kib > 100, "{kib} KiB");
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
