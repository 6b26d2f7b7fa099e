//! Pre-faulting: mapping arena pages into a process's page table before the
//! process writes them, in one system call instead of one page fault per page.
//!
//! Why: a store started without `--populate` (the default) is mapped
//! without `MAP_POPULATE`, since filling every client's page table for the
//! whole arena at connect costs time and page-table memory in proportion to
//! the arena, not to what the client uses. Then the first write of a
//! process to each page of an object faults, even when the page is
//! resident because another process, or this one earlier, wrote it: page
//! tables are per process, and a write fault on a shared mapping maps one
//! page at a time. Measured on the 2-core VM of `bench/results/`: a 10 MB
//! copy into pages resident but not yet mapped by the writer took 8-9 ms
//! (2,442 faults), against 0.6 ms for `MADV_POPULATE_WRITE` over the same
//! pages followed by a 1.1 ms copy. The first touch of a page by any
//! process also zeroes it (the arena is reserved with `fallocate`, whose
//! pages are cleared on first use): [`zero_in_background`] lets the daemon
//! do that ahead of the clients.
//!
//! Reads are left to fault: a read fault maps up to 16 resident pages at
//! once (the kernel's fault-around), and a receiver that passes an object on
//! by reference never touches its bytes, so populating on receipt could be
//! pure cost.
//!
//! Invariants:
//! - a bit set in [`Prefault`]'s map means this process has asked the kernel
//!   to map that page for writing (or a thread of it is asking right now);
//!   bits are never cleared, so each page is populated at most once per
//!   process and an object written again costs one load per 64 pages;
//! - a set bit is a hint and nothing relies on it for correctness: the
//!   kernel may drop the entry later (swap, migration), the population may
//!   have failed, or another thread's may still be under way; the page then
//!   faults as it would have without this module.

use std::ffi::c_void;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Which pages of one mapping of the arena this process has populated.
#[derive(Debug)]
pub(crate) struct Prefault {
    page: u64,
    /// Arena bytes: the last page may be partial.
    size: u64,
    /// One bit per page, 64 pages a word.
    populated: Box<[AtomicU64]>,
    /// Cleared once the kernel refuses `MADV_POPULATE_WRITE` (EINVAL:
    /// Linux before 5.14, or a mapping it does not populate this way):
    /// from then on pages fault as they did before this module.
    enabled: AtomicBool,
}

impl Prefault {
    /// The state of a fresh mapping of `size` bytes; `mapped_already`: the
    /// mapping was made with `MAP_POPULATE`, so there is nothing to do.
    pub(crate) fn new(size: u64, mapped_already: bool) -> Prefault {
        let page = page_size();
        let words = if mapped_already { 0 } else { size.div_ceil(page).div_ceil(64) as usize };
        Prefault {
            page,
            size,
            populated: (0..words).map(|_| AtomicU64::new(0)).collect(),
            enabled: AtomicBool::new(!mapped_already),
        }
    }

    /// Makes sure the pages of `[offset, offset + len)` are mapped for
    /// writing in the mapping that starts at `base`, populating those this
    /// process has not populated before.
    ///
    /// # Safety
    /// `base` must be the start of a live mapping of this arena, at least
    /// `size` bytes long (given to [`Prefault::new`]).
    pub(crate) unsafe fn for_write(&self, base: *mut u8, offset: u64, len: u64) {
        if !self.enabled.load(Ordering::Relaxed) || len == 0 {
            return;
        }
        self.claim(offset, len, |pages| {
            let start = pages.start * self.page;
            let end = (pages.end * self.page).min(self.size);
            // SAFETY: `start..end` lies within the arena (`claim` keeps to
            // its pages, `end` is capped at its size) and so within the
            // mapping; `start` is page-aligned as madvise requires.
            // MADV_POPULATE_WRITE does not change the bytes of a page that
            // already holds data: it only maps (and, the first time, zeroes)
            // it, so it is safe on pages other processes are using.
            let rc = unsafe {
                libc::madvise(
                    base.add(start as usize).cast::<c_void>(),
                    (end - start) as usize,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EINVAL) {
                    self.enabled.store(false, Ordering::Relaxed);
                    tracing::debug!(error = %err, "MADV_POPULATE_WRITE refused: arena pages will fault on first write");
                }
                // Any other failure (EINTR, ENOMEM, EFAULT) leaves the pages
                // to fault on first touch, as they would have without this.
            }
        });
    }

    /// Whether this mapping still populates (false: `--populate` did it at
    /// map time, or the kernel refused).
    #[cfg(test)]
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Marks the pages of `[offset, offset + len)` populated and calls
    /// `populate` with each run of them that was not marked before.
    fn claim(&self, offset: u64, len: u64, mut populate: impl FnMut(Range<u64>)) {
        let pages = self.size.div_ceil(self.page);
        let first = offset / self.page;
        let end = offset.saturating_add(len).div_ceil(self.page).min(pages);
        if first >= end {
            return;
        }
        let mut run: Option<Range<u64>> = None;
        for w in first / 64..=(end - 1) / 64 {
            let lo = first.max(w * 64) - w * 64;
            let hi = end.min(w * 64 + 64) - w * 64;
            let mask = bits(lo, hi);
            let word = &self.populated[w as usize];
            // A load first: the common case (all populated) then never
            // writes the shared cache line.
            if word.load(Ordering::Relaxed) & mask == mask {
                continue;
            }
            let mut fresh = mask & !word.fetch_or(mask, Ordering::Relaxed);
            while fresh != 0 {
                let start = u64::from(fresh.trailing_zeros());
                let stop = start + u64::from((fresh >> start).trailing_ones());
                let (a, b) = (w * 64 + start, w * 64 + stop);
                run = match run {
                    Some(r) if r.end == a => Some(r.start..b),
                    Some(r) => {
                        populate(r);
                        Some(a..b)
                    }
                    None => Some(a..b),
                };
                fresh &= !bits(0, stop);
            }
        }
        if let Some(r) = run {
            populate(r);
        }
    }
}

/// Bits `lo..hi` of a word (`hi` <= 64).
fn bits(lo: u64, hi: u64) -> u64 {
    let upto = |n: u64| if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    upto(hi) & !upto(lo)
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

/// How much of the arena [`zero_in_background`] zeroes at normal priority
/// before it drops to `SCHED_IDLE` (a multiple of its 2 MiB step).
pub(crate) const EAGER_ZEROING: u64 = 256 << 20;

/// Zeroes the arena's pages ahead of the clients, on a thread of its own,
/// from the start of the arena up, where the allocator places objects first.
///
/// The first [`EAGER_ZEROING`] bytes are zeroed at normal time-sharing
/// priority (`SCHED_OTHER`, also when the daemon's threads run real-time
/// with `--realtime-priority`: those must not spin on zeroing): 0.1-0.2 s
/// of one CPU on the 2-core VM of `bench/results/`, spent while the
/// program's processes start (a Python federate takes a second or more to
/// import), which is what gets it done before the first messages. At the
/// lowest priority (`SCHED_IDLE`) it was not: with the CPUs busy starting
/// the program, 256 MiB took 5.3 s. The rest of a larger arena
/// is zeroed at `SCHED_IDLE`, only on otherwise idle CPUs, so that a large
/// arena costs no one time.
///
/// Each 2 MiB is mapped with `MADV_POPULATE_WRITE` (which zeroes a page
/// reserved by `fallocate` and not yet used) and then unmapped from the
/// daemon again with `MADV_DONTNEED`, which on a shared mapping drops only
/// the daemon's page-table entries, never the pages or their bytes: the
/// daemon does not keep page tables for the whole arena. Safe while clients
/// use the arena: neither call changes a page's bytes once it has any.
/// Stops at the first refusal (a kernel before 5.14): clients' first
/// touches then zero the pages, as before.
///
/// `base..base + size` must be a shared mapping of the arena that `owner`
/// keeps alive: the thread holds `owner` until it is done.
pub(crate) fn zero_in_background<T: Send + 'static>(
    base: usize,
    size: u64,
    owner: T,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    const STEP: u64 = 2 << 20;
    std::thread::Builder::new().name("hprm-store-zero".into()).spawn(move || {
        let _owner = owner;
        set_thread_policy(libc::SCHED_OTHER);
        let started = std::time::Instant::now();
        let mut at = 0;
        while at < size {
            if at == EAGER_ZEROING {
                set_thread_policy(libc::SCHED_IDLE);
            }
            let len = STEP.min(size - at) as usize;
            let ptr = (base + at as usize) as *mut c_void;
            // SAFETY: `base..base + size` is a mapping of the arena that
            // `_owner` keeps alive; see the doc above for why neither call
            // can change what clients see.
            let rc = unsafe { libc::madvise(ptr, len, libc::MADV_POPULATE_WRITE) };
            if rc != 0 {
                tracing::debug!(error = %std::io::Error::last_os_error(), "not zeroing the arena ahead of clients");
                return;
            }
            // SAFETY: as above.
            unsafe { libc::madvise(ptr, len, libc::MADV_DONTNEED) };
            at += len as u64;
        }
        tracing::debug!(elapsed = ?started.elapsed(), "arena zeroed ahead of clients");
    })
}

/// Sets the calling thread's scheduling policy, at priority 0:
/// `SCHED_OTHER` or `SCHED_IDLE`, the policies that lower a thread, which
/// needs no privilege. What the daemon's background threads (the arena's
/// zeroing, the spill file's punches) run at, so that with
/// `--realtime-priority` they never hold a CPU from the threads that
/// answer requests. Best effort: a refusal is logged.
pub fn set_thread_policy(policy: libc::c_int) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is valid for the call.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
        let error = std::io::Error::last_os_error();
        tracing::debug!(%error, policy, "cannot set a background thread's scheduling policy");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(p: &Prefault, offset: u64, len: u64) -> Vec<Range<u64>> {
        let mut got = Vec::new();
        p.claim(offset, len, |r| got.push(r));
        got
    }

    #[test]
    fn claims_each_page_once_in_runs() {
        let p = Prefault {
            page: 4096,
            size: 1 << 20,
            populated: (0..4).map(|_| AtomicU64::new(0)).collect(),
            enabled: AtomicBool::new(true),
        };
        // Pages 1..3 (a 64-byte object straddling pages 1 and 2).
        assert_eq!(runs(&p, 4096 + 4000, 200), vec![1..3]);
        assert_eq!(runs(&p, 4096 + 4000, 200), vec![]);
        // Pages 0..100 across two words: the claimed 1..3 split it in two.
        assert_eq!(runs(&p, 0, 100 * 4096), vec![0..1, 3..100]);
        assert_eq!(runs(&p, 0, 100 * 4096), vec![]);
        // A run across a word boundary stays one run.
        assert_eq!(runs(&p, 120 * 4096, 20 * 4096), vec![120..140]);
        // Past the end of the arena: capped at its last page.
        assert_eq!(runs(&p, 250 * 4096, 100 * 4096), vec![250..256]);
        assert_eq!(runs(&p, 1 << 30, 4096), vec![]);
        assert_eq!(runs(&p, 200 * 4096, 0), vec![]);
    }

    #[test]
    fn a_populated_mapping_has_nothing_to_do() {
        let p = Prefault::new(1 << 20, true);
        // SAFETY: disabled, so the pointer is never used.
        unsafe { p.for_write(std::ptr::null_mut(), 0, 1 << 20) };
        assert!(p.populated.is_empty());
    }

    #[test]
    fn bits_of_a_word() {
        assert_eq!(bits(0, 64), u64::MAX);
        assert_eq!(bits(1, 3), 0b110);
        assert_eq!(bits(63, 64), 1 << 63);
        assert_eq!(bits(5, 5), 0);
    }
}
