//! The arena allocator: which byte ranges of the arena hold which object.
//!
//! Best fit over a free list indexed two ways: by size (to find the smallest
//! block that fits) and by offset (to merge a freed block with its free
//! neighbours at once). Both operations are O(log n) in the number of free
//! blocks. Best fit with immediate coalescing keeps fragmentation low under
//! mixed object sizes (the randomized test below measures it); the
//! allocator's bookkeeping lives in the daemon's heap, never in the arena, so a
//! client scribbling over shared memory cannot corrupt it.
//!
//! Invariants (checked by `Allocator::check` in tests):
//! - every block offset and length is a multiple of [`ALIGN`];
//! - free blocks never overlap, never touch (touching ones are merged), and
//!   `by_size` and `by_offset` describe the same set;
//! - free bytes + bytes in use == capacity.
//!
//! Warm placement (issue 23): a process's first write to an arena page it
//! has not mapped costs a page fault, or its share of an
//! `MADV_POPULATE_WRITE` (`prefault.rs`), even when the page is resident:
//! page tables are per process. Plain best fit hands a freed block to
//! whichever client creates first, so when several processes each write a
//! fresh large object every round, each keeps landing on blocks it has never
//! written until it has mapped the whole region in use. [`WarmRanges`]
//! records what one client has written, and
//! [`Allocator::allocate_preferring`] places its next large object inside
//! that when a free block there fits, else outside what other clients have
//! written. It is a preference only: it never fails a request that best
//! fit would serve, since the caller falls back to [`Allocator::allocate`].

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

/// Alignment of every object in the arena (a cache line; also what SIMD loads
/// and numpy want).
pub const ALIGN: u64 = 64;

/// A range of the arena handed out by [`Allocator::allocate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Offset from the arena's start; a multiple of [`ALIGN`].
    pub offset: u64,
    /// Length in bytes; a multiple of [`ALIGN`], at least the requested size.
    pub len: u64,
}

/// Best-fit allocator over `[0, capacity)`.
#[derive(Debug)]
pub struct Allocator {
    capacity: u64,
    in_use: u64,
    by_offset: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
}

/// Rounds `size` up to a whole number of [`ALIGN`] units, at least one
/// (zero-sized objects still need a distinct offset). `None` on overflow.
pub fn block_len(size: u64) -> Option<u64> {
    size.max(1).checked_add(ALIGN - 1).map(|s| s & !(ALIGN - 1))
}

impl Allocator {
    /// An allocator for an arena of `capacity` bytes (rounded down to [`ALIGN`]).
    pub fn new(capacity: u64) -> Allocator {
        let capacity = capacity & !(ALIGN - 1);
        let mut a = Allocator { capacity, in_use: 0, by_offset: BTreeMap::new(), by_size: BTreeSet::new() };
        if capacity > 0 {
            a.insert_free(0, capacity);
        }
        a
    }

    /// Bytes the allocator manages.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes currently handed out (block lengths, so including alignment padding).
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// The largest request that would succeed right now.
    pub fn largest_free(&self) -> u64 {
        self.by_size.last().map_or(0, |&(len, _)| len)
    }

    /// Number of free blocks (1 means no fragmentation at all).
    pub fn free_blocks(&self) -> usize {
        self.by_offset.len()
    }

    /// The smallest free block that holds `size` bytes, or `None` if no free
    /// block is large enough.
    pub fn allocate(&mut self, size: u64) -> Option<Block> {
        let len = block_len(size)?;
        let &(free_len, offset) = self.by_size.range((len, 0)..).next()?;
        Some(self.carve(offset, free_len, offset, len))
    }

    /// Returns `block` to the free list, merged with free neighbours.
    ///
    /// The caller must pass a block this allocator handed out and has not
    /// taken back; the daemon's object table is the single owner of blocks.
    pub fn free(&mut self, block: Block) {
        debug_assert!(block.offset + block.len <= self.capacity);
        debug_assert!(self.in_use >= block.len);
        self.in_use -= block.len;
        let mut offset = block.offset;
        let mut len = block.len;
        if let Some((&prev_off, &prev_len)) = self.by_offset.range(..offset).next_back() {
            debug_assert!(prev_off + prev_len <= offset, "double free of {block:?}");
            if prev_off + prev_len == offset {
                self.remove_free(prev_off, prev_len);
                offset = prev_off;
                len += prev_len;
            }
        }
        if let Some(&next_len) = self.by_offset.get(&(block.offset + block.len)) {
            self.remove_free(block.offset + block.len, next_len);
            len += next_len;
        }
        self.insert_free(offset, len);
    }

    /// A block for a large object of a client that has written `own` and
    /// shares the arena with clients that have written `others`: inside
    /// `own` if a free block there fits; else outside every range of
    /// `others` (on pages nobody maps yet, rather than another writer's
    /// block, which would push that writer onto new pages in turn: a
    /// writer sometimes has all its own blocks live, as replies are
    /// released a little late, and taking others' blocks then cascaded
    /// through every writer, round after round); else `None`, and the
    /// caller places it by best fit ([`Allocator::allocate`]), so nothing
    /// best fit would serve fails for this.
    pub fn allocate_preferring(&mut self, size: u64, own: &WarmRanges, others: &[&WarmRanges]) -> Option<Block> {
        self.allocate_warm(size, own)
            .or_else(|| self.allocate_within(size, WarmRanges::outside(others, self.capacity).into_iter()))
    }

    /// A block of `size` bytes lying wholly inside one of `warm`'s ranges,
    /// or `None` if no free block there has room (the caller then falls
    /// back to [`Allocator::allocate`]). See [`Allocator::allocate_within`].
    pub fn allocate_warm(&mut self, size: u64, warm: &WarmRanges) -> Option<Block> {
        self.allocate_within(size, warm.ranges())
    }

    /// A block of `size` bytes lying wholly inside one of `ranges` (sorted,
    /// disjoint), or `None` if no free block there has room.
    ///
    /// Among the places that fit, it picks one that starts a free block
    /// (no hole left before it), then the smallest such free block (best
    /// fit), then the lowest offset: a client that writes objects of one
    /// size in a stream settles on the same few blocks, and carving from
    /// inside a free block, which splits it, is the last choice. Looks at
    /// [`WARM_SCAN_LIMIT`] free blocks at most, so the cost stays bounded
    /// however fragmented the arena is.
    pub fn allocate_within(&mut self, size: u64, ranges: impl Iterator<Item = Range<u64>>) -> Option<Block> {
        let len = block_len(size)?;
        // (splits a free block, free block's length, offset; free block's offset)
        let mut best: Option<((bool, u64, u64), u64)> = None;
        let mut scanned = 0;
        'ranges: for r in ranges {
            if r.end - r.start < len {
                continue;
            }
            // The free block holding r.start, if any, then those starting inside r.
            let first = self.by_offset.range(..=r.start).next_back().filter(|(&o, &l)| o + l > r.start);
            for (&free_off, &free_len) in first.into_iter().chain(self.by_offset.range(r.start + 1..r.end)) {
                scanned += 1;
                if scanned > WARM_SCAN_LIMIT {
                    break 'ranges;
                }
                let lo = align_up(free_off.max(r.start));
                let hi = (free_off + free_len).min(r.end);
                if hi < lo || hi - lo < len {
                    continue;
                }
                let key = (lo != free_off, free_len, lo);
                if best.map_or(true, |(k, _)| key < k) {
                    best = Some((key, free_off));
                }
            }
        }
        let ((_, free_len, offset), free_off) = best?;
        Some(self.carve(free_off, free_len, offset, len))
    }

    /// Takes `[offset, offset + len)` out of the free block at `free_off`
    /// (of `free_len` bytes), which must contain it; what is left on either
    /// side stays free. The one place a block leaves the free lists.
    fn carve(&mut self, free_off: u64, free_len: u64, offset: u64, len: u64) -> Block {
        let end = free_off + free_len;
        debug_assert!(free_off <= offset && offset + len <= end);
        self.remove_free(free_off, free_len);
        if offset > free_off {
            self.insert_free(free_off, offset - free_off);
        }
        if offset + len < end {
            self.insert_free(offset + len, end - offset - len);
        }
        self.in_use += len;
        Block { offset, len }
    }

    fn insert_free(&mut self, offset: u64, len: u64) {
        self.by_offset.insert(offset, len);
        self.by_size.insert((len, offset));
    }

    fn remove_free(&mut self, offset: u64, len: u64) {
        self.by_offset.remove(&offset);
        self.by_size.remove(&(len, offset));
    }

    /// Panics if an invariant of the module doc does not hold.
    #[cfg(test)]
    pub fn check(&self) {
        assert_eq!(self.by_offset.len(), self.by_size.len());
        let mut free = 0;
        let mut prev_end = None;
        for (&off, &len) in &self.by_offset {
            assert!(self.by_size.contains(&(len, off)));
            assert_eq!(off % ALIGN, 0);
            assert_eq!(len % ALIGN, 0);
            assert!(len > 0);
            if let Some(end) = prev_end {
                assert!(off > end, "free blocks overlap or touch at {off}");
            }
            prev_end = Some(off + len);
            free += len;
        }
        assert_eq!(free + self.in_use, self.capacity);
    }
}

/// Free blocks [`Allocator::allocate_within`] looks at, at most, per request.
pub const WARM_SCAN_LIMIT: usize = 256;

/// Objects smaller than this are placed by best fit alone: their pages cost
/// little to map (and small objects mostly come from reserved blocks), so a
/// warm set of them would be bookkeeping for nothing.
pub const WARM_MIN_OBJECT: u64 = 64 << 10;

/// Ranges a [`WarmRanges`] keeps at most: with more, the smallest is
/// forgotten (a hint lost, nothing else).
pub const WARM_MAX_RANGES: usize = 32;

/// The granularity of page tables the ranges are widened to: a client maps
/// whole pages of what it writes, so the rest of a written block's first
/// and last pages are warm too. 4 KiB, the smallest page Linux uses: with
/// larger pages the ranges are only narrower than what is warm.
const WARM_PAGE: u64 = 4096;

fn align_up(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// The arena byte ranges one client has written (so has mapped for writing),
/// sorted, disjoint and not touching (touching ones are merged), at most
/// [`WARM_MAX_RANGES`] of them. A hint for placement only: the client's
/// mapping of a page may be gone again (the kernel may drop it) and the
/// placement is then merely no better than best fit.
#[derive(Debug, Default, Clone)]
pub struct WarmRanges {
    /// start -> end
    ranges: BTreeMap<u64, u64>,
}

impl WarmRanges {
    /// Records that the client wrote `block` (widened to whole pages).
    pub fn insert(&mut self, block: Block) {
        let mut start = block.offset / WARM_PAGE * WARM_PAGE;
        let mut end = (block.offset + block.len).div_ceil(WARM_PAGE) * WARM_PAGE;
        // Merge every range that overlaps or touches [start, end).
        let touching: Vec<(u64, u64)> =
            self.ranges.range(..=end).rev().take_while(|(_, &e)| e >= start).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in touching {
            self.ranges.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.ranges.insert(start, end);
        if self.ranges.len() > WARM_MAX_RANGES {
            let (&s, _) = self.ranges.iter().min_by_key(|(&s, &e)| (e - s, s)).expect("more than zero ranges");
            self.ranges.remove(&s);
        }
    }

    /// The ranges, ascending.
    pub fn ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.ranges.iter().map(|(&s, &e)| s..e)
    }

    /// The parts of `[0, capacity)` outside every range of `sets`: where a
    /// client may place an object without taking a block another client
    /// has written (and would find again only by mapping elsewhere).
    pub fn outside(sets: &[&WarmRanges], capacity: u64) -> Vec<Range<u64>> {
        let mut all: Vec<Range<u64>> = sets.iter().flat_map(|s| s.ranges()).collect();
        all.sort_by_key(|r| r.start);
        let mut gaps = Vec::new();
        let mut at = 0;
        for r in all {
            if r.start > at {
                gaps.push(at..r.start.min(capacity));
            }
            at = at.max(r.end);
        }
        if at < capacity {
            gaps.push(at..capacity);
        }
        gaps.retain(|g| g.start < g.end);
        gaps
    }

    /// Bytes covered.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn allocates_aligned_and_merges_on_free() {
        let mut a = Allocator::new(1 << 20);
        let x = a.allocate(1).unwrap();
        let y = a.allocate(100).unwrap();
        let z = a.allocate(0).unwrap();
        assert_eq!((x.offset, x.len), (0, 64));
        assert_eq!((y.offset, y.len), (64, 128));
        assert_eq!(z.len, 64);
        a.check();
        a.free(y);
        a.free(x);
        a.free(z);
        a.check();
        assert_eq!(a.free_blocks(), 1);
        assert_eq!(a.largest_free(), 1 << 20);
    }

    #[test]
    fn best_fit_picks_the_smallest_hole() {
        let mut a = Allocator::new(64 * 100);
        let blocks: Vec<_> = (0..10).map(|i| a.allocate(64 * (i % 3 + 1)).unwrap()).collect();
        // Free a 3-unit and a 1-unit hole, not adjacent; a 1-unit request
        // must take the 1-unit hole.
        a.free(blocks[2]);
        a.free(blocks[6]);
        let small = a.allocate(64).unwrap();
        assert_eq!(small.offset, blocks[6].offset);
        a.check();
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let mut a = Allocator::new(4096);
        assert!(a.allocate(4097).is_none());
        assert!(a.allocate(u64::MAX).is_none());
        let all = a.allocate(4096).unwrap();
        assert!(a.allocate(1).is_none());
        a.free(all);
        assert!(a.allocate(1).is_some());
    }

    /// Warm memory (issue 23): a freed block is what the next request of its
    /// size gets, so a stream of messages, each freed once delivered, keeps
    /// landing on the few blocks that processes have touched (their pages
    /// resident and mapped) instead of walking through the arena's cold
    /// pages. Best fit gives this: a freed block is either an exact-size
    /// hole (the smallest that fits) or merged into the free space after it,
    /// whose start is then handed out first.
    #[test]
    fn freed_blocks_are_reused_first() {
        const MB10: u64 = 10_000_000;
        let mut a = Allocator::new(256 << 20);
        // A source's message and the previous one live at once: two blocks
        // alternate, whatever order they are freed in.
        let mut live = vec![a.allocate(MB10).unwrap(), a.allocate(MB10).unwrap()];
        let mut touched: BTreeSet<u64> = live.iter().map(|b| b.offset).collect();
        for round in 0..100 {
            let old = live.remove(round % 2 * (live.len() - 1));
            a.free(old);
            live.push(a.allocate(MB10).unwrap());
            touched.insert(live[1].offset);
        }
        assert_eq!(touched.len(), 2, "100 rounds touched blocks at {touched:?}");
        // Bursts: up to 5 live at once (a message and 4 fresh replies), freed
        // in any order; the blocks used never go past the five first ones.
        let mut rng = SmallRng::seed_from_u64(23);
        let mut high_water = 0;
        for _ in 0..1000 {
            if live.len() < 5 && (live.len() < 2 || rng.gen_bool(0.5)) {
                let b = a.allocate(MB10).unwrap();
                high_water = high_water.max(b.offset + b.len);
                live.push(b);
            } else {
                a.free(live.swap_remove(rng.gen_range(0..live.len())));
            }
            a.check();
        }
        assert!(high_water <= 5 * block_len(MB10).unwrap(), "blocks reached {high_water}");
    }

    fn warm_of(blocks: &[Block]) -> WarmRanges {
        let mut w = WarmRanges::default();
        for &b in blocks {
            w.insert(b);
        }
        w
    }

    #[test]
    // A list of one range is meant: the ranges a set holds.
    #[allow(clippy::single_range_in_vec_init)]
    fn warm_ranges_widen_to_pages_merge_and_stay_bounded() {
        let mut w = WarmRanges::default();
        w.insert(Block { offset: 4096 + 64, len: 128 });
        assert_eq!(w.ranges().collect::<Vec<_>>(), [4096..8192]);
        // Touching on a page boundary merges; a gap does not.
        w.insert(Block { offset: 8192, len: 4096 });
        w.insert(Block { offset: 5 * 4096, len: 64 });
        assert_eq!(w.ranges().collect::<Vec<_>>(), [4096..3 * 4096, 5 * 4096..6 * 4096]);
        // One block bridging both merges all three.
        w.insert(Block { offset: 3 * 4096 - 64, len: 2 * 4096 });
        assert_eq!(w.ranges().collect::<Vec<_>>(), [4096..6 * 4096]);
        // Over the cap the smallest range is forgotten.
        let mut w = WarmRanges::default();
        for i in 0..WARM_MAX_RANGES as u64 + 1 {
            let len = if i == 7 { 4096 } else { 2 * 4096 };
            w.insert(Block { offset: i * 4 * 4096, len });
        }
        let kept: Vec<_> = w.ranges().collect();
        assert_eq!(kept.len(), WARM_MAX_RANGES);
        assert!(!kept.contains(&(7 * 4 * 4096..7 * 4 * 4096 + 4096)), "{kept:?}");
        assert_eq!(w.bytes(), WARM_MAX_RANGES as u64 * 2 * 4096);
    }

    #[test]
    // A list of one range is meant: the ranges a set holds.
    #[allow(clippy::single_range_in_vec_init)]
    fn outside_is_the_complement_of_every_set() {
        let a = warm_of(&[Block { offset: 4096, len: 4096 }, Block { offset: 5 * 4096, len: 4096 }]);
        let b = warm_of(&[Block { offset: 4096, len: 2 * 4096 }, Block { offset: 9 * 4096, len: 4096 }]);
        assert_eq!(WarmRanges::outside(&[&a, &b], 10 * 4096), [0..4096, 3 * 4096..5 * 4096, 6 * 4096..9 * 4096]);
        assert_eq!(WarmRanges::outside(&[], 4096), [0..4096]);
        // Ranges past the capacity (a page-widened last block) clip.
        assert_eq!(WarmRanges::outside(&[&b], 9 * 4096 + 64), [0..4096, 3 * 4096..9 * 4096]);
    }

    #[test]
    fn warm_placement_goes_inside_what_was_written_or_nowhere() {
        const MB: u64 = 1 << 20;
        let mut a = Allocator::new(16 * MB);
        let x = a.allocate(MB).unwrap(); // 0..1
        let y = a.allocate(MB).unwrap(); // 1..2
        let z = a.allocate(MB).unwrap(); // 2..3
        a.free(y);
        // Best fit takes the hole y left; a client that wrote z takes z's
        // place once free, although the hole is as good a fit.
        a.free(z);
        let w = warm_of(&[z]);
        let got = a.allocate_warm(MB, &w).unwrap();
        assert_eq!(got.offset, z.offset);
        a.check();
        // Nothing free inside the warm ranges: no placement (the caller
        // falls back to best fit).
        assert_eq!(a.allocate_warm(MB, &w), None);
        // Larger than any warm range: none either.
        assert_eq!(a.allocate_warm(2 * MB, &warm_of(&[x])), None);
        // A warm range inside a larger free block is carved out of its
        // middle, leaving both ends free.
        let far = Block { offset: 8 * MB, len: MB };
        let got = a.allocate_warm(MB, &warm_of(&[far])).unwrap();
        assert_eq!(got, far);
        a.check();
        assert_eq!(a.free_blocks(), 3); // y's hole, 3..8 MB, 9..16 MB
                                        // With a choice, a place starting a free block wins over carving.
        let both = warm_of(&[Block { offset: 12 * MB, len: MB }, Block { offset: MB, len: MB }]);
        assert_eq!(a.allocate_warm(MB, &both).unwrap().offset, MB);
        a.check();
    }

    /// Several processes each writing a fresh large object every round
    /// (the broadcast with fresh replies: a source and 4 receivers), each
    /// object living about two rounds, sometimes three (its release came
    /// late), freed and created in shuffled order. With warm placement each
    /// writer stops landing on bytes it has not written after a few
    /// rounds; with best fit alone (the same workload) it keeps meeting new
    /// ones, which is what the receivers paid for in page faults (issue 23).
    #[test]
    fn warm_placement_keeps_each_writer_on_its_own_written_blocks() {
        fn cold_bytes_after_warmup(warm_placement: bool) -> u64 {
            const WRITERS: usize = 5;
            let mut a = Allocator::new(256 << 20);
            let mut rng = SmallRng::seed_from_u64(23);
            let mut warm: Vec<WarmRanges> = vec![WarmRanges::default(); WRITERS];
            // Per writer: (round created, block)
            let mut live: Vec<Vec<(u32, Block)>> = vec![Vec::new(); WRITERS];
            let mut cold = 0;
            let shuffled = |rng: &mut SmallRng| {
                let mut order: Vec<usize> = (0..WRITERS).collect();
                for i in (1..WRITERS).rev() {
                    order.swap(i, rng.gen_range(0..=i));
                }
                order
            };
            for round in 0..300u32 {
                // Objects two rounds old are freed, one in five a round late.
                for w in shuffled(&mut rng) {
                    let late = rng.gen_bool(0.2);
                    live[w].retain(|&(made, b)| {
                        let free = round - made >= 3 || (round - made == 2 && !late);
                        if free {
                            a.free(b);
                        }
                        !free
                    });
                }
                for w in shuffled(&mut rng) {
                    let size = 10_000_000 + 64 * (w as u64);
                    let others: Vec<&WarmRanges> = (0..WRITERS).filter(|&o| o != w).map(|o| &warm[o]).collect();
                    let b = if warm_placement { a.allocate_preferring(size, &warm[w], &others) } else { None }
                        .or_else(|| a.allocate(size))
                        .unwrap();
                    if round >= 40 {
                        let page = |x: u64| x / WARM_PAGE;
                        cold += (page(b.offset)..=page(b.offset + b.len - 1))
                            .filter(|&p| !warm[w].ranges().any(|r| r.contains(&(p * WARM_PAGE))))
                            .count() as u64
                            * WARM_PAGE;
                    }
                    warm[w].insert(b);
                    live[w].push((round, b));
                }
                a.check();
            }
            cold
        }
        let best_fit = cold_bytes_after_warmup(false);
        let warm = cold_bytes_after_warmup(true);
        assert!(best_fit > 50 << 20, "best fit alone wrote only {best_fit} cold bytes: the workload is too easy");
        assert_eq!(warm, 0, "with warm placement writers still met {warm} bytes they had not written");
    }

    /// The mixed workload of the test below, from 8 clients placing their
    /// large objects by warm placement (carving inside free blocks is its
    /// last resort, but it does split them): no more failures than best
    /// fit alone, and everything merges back into one block at the end.
    #[test]
    fn warm_placement_does_not_fragment_mixed_sizes() {
        const CAPACITY: u64 = 256 << 20;
        const CLIENTS: usize = 8;
        let mut rng = SmallRng::seed_from_u64(0x57_41_52_4d);
        let mut a = Allocator::new(CAPACITY);
        let mut warm: Vec<WarmRanges> = vec![WarmRanges::default(); CLIENTS];
        let mut live: Vec<Block> = Vec::new();
        let (mut attempts, mut failures) = (0u32, 0u32);
        for step in 0..100_000 {
            if rng.gen_bool(0.5) && !live.is_empty() {
                a.free(live.swap_remove(rng.gen_range(0..live.len())));
                continue;
            }
            let size = (2f64.powf(rng.gen_range(6.0..22.0))) as u64;
            if a.in_use() + block_len(size).unwrap() > CAPACITY * 7 / 10 {
                a.free(live.swap_remove(rng.gen_range(0..live.len())));
                continue;
            }
            attempts += 1;
            let c = rng.gen_range(0..CLIENTS);
            let block = if size >= WARM_MIN_OBJECT {
                let others: Vec<&WarmRanges> = (0..CLIENTS).filter(|&o| o != c).map(|o| &warm[o]).collect();
                a.allocate_preferring(size, &warm[c], &others)
            } else {
                None
            }
            .or_else(|| a.allocate(size));
            match block {
                Some(b) => {
                    if b.len >= WARM_MIN_OBJECT {
                        warm[c].insert(b);
                    }
                    live.push(b);
                }
                None => failures += 1,
            }
            if step % 10_000 == 0 {
                a.check();
            }
        }
        end_of_workload(&mut a, live, attempts, failures);
    }

    /// Small objects freed among large ones do not scatter later small
    /// requests: they take the hole just freed, not fresh room.
    #[test]
    fn small_frees_are_reused_in_place() {
        let mut a = Allocator::new(64 << 20);
        let big = a.allocate(8 << 20).unwrap();
        let small: Vec<_> = (0..8).map(|_| a.allocate(4096).unwrap()).collect();
        let after = a.allocate(8 << 20).unwrap();
        a.free(small[3]);
        assert_eq!(a.allocate(4096).unwrap().offset, small[3].offset);
        a.free(small[5]);
        a.free(small[6]);
        assert_eq!(a.allocate(8192).unwrap().offset, small[5].offset);
        a.free(big);
        a.free(after);
        a.check();
    }

    /// A randomized steady-state workload of mixed sizes (64 B .. 4 MiB,
    /// log-uniform, like a robot's mix of small messages and camera frames)
    /// that keeps at most 70% of the arena live. A fragmenting allocator fails
    /// many requests here although the free total is ample; best fit with
    /// coalescing fails almost none.
    #[test]
    fn randomized_mixed_sizes_do_not_fragment_badly() {
        const CAPACITY: u64 = 256 << 20;
        let mut rng = SmallRng::seed_from_u64(0x48_50_52_4d);
        let mut a = Allocator::new(CAPACITY);
        let mut live: Vec<Block> = Vec::new();
        let (mut attempts, mut failures) = (0u32, 0u32);
        for step in 0..200_000 {
            let want_alloc = rng.gen_bool(0.5) || live.is_empty();
            if want_alloc {
                let size = (2f64.powf(rng.gen_range(6.0..22.0))) as u64;
                if a.in_use() + block_len(size).unwrap() > CAPACITY * 7 / 10 {
                    // Over the live-bytes budget: free instead.
                    let b = live.swap_remove(rng.gen_range(0..live.len()));
                    a.free(b);
                    continue;
                }
                attempts += 1;
                match a.allocate(size) {
                    Some(b) => live.push(b),
                    None => failures += 1,
                }
            } else {
                let b = live.swap_remove(rng.gen_range(0..live.len()));
                a.free(b);
            }
            if step % 10_000 == 0 {
                a.check();
            }
        }
        end_of_workload(&mut a, live, attempts, failures);
        assert_eq!(a.largest_free(), CAPACITY);
    }

    /// The end of a randomized workload that kept 30% of the arena free:
    /// almost no request failed, and freeing what is live gives back one
    /// block, the allocator's invariants holding throughout.
    fn end_of_workload(a: &mut Allocator, live: Vec<Block>, attempts: u32, failures: u32) {
        a.check();
        let failure_rate = failures as f64 / attempts as f64;
        assert!(failure_rate < 0.001, "{failures} of {attempts} allocations failed with 30% of the arena free");
        for b in live {
            a.free(b);
        }
        a.check();
        assert_eq!(a.free_blocks(), 1, "freeing everything must give back one block");
    }
}
