//! The spill file's blocks (`--spill-dir`): which are free, and giving a
//! freed block's disk space back off the table's lock.
//!
//! Punching a freed spilled object's pages out of the file
//! (`FALLOC_FL_PUNCH_HOLE`, which also drops their page cache) takes
//! milliseconds for a few MB (`bench/results/store-spill-2026-11-28.md`).
//! Under the table's lock that would hold every other client's requests
//! as long, so a freed block goes to a punch thread instead, which hands
//! it back to the allocator once punched.
//!
//! Spilling comes in bursts (a slow receiver pins messages, the next many
//! spill, then the arena has room again), and a spilled send's cost is
//! mostly the creator populating fresh page-cache pages, which a punched
//! block gave back. So a freed block is first kept warm (not punched: its
//! disk space still reserved, its pages still in the page cache), up to a
//! budget ([`warm_budget`]), and the next spilled object takes the most
//! recently freed warm block that fits; what exceeds the budget, oldest
//! first, is punched. Once spilling has stopped for [`WARM_IDLE`], the warm
//! blocks are punched too ([`SpillBlocks::cool`]), so that a finished
//! burst leaves no disk held.
//!
//! Invariant: a block handed out for reuse is either warm and whole (freed
//! by its object, never punched since it was reserved: its disk space is
//! all reserved) or punched; never one with a punch still to come. A block
//! reused before its punch would have the punch zero its new owner's bytes
//! and drop the disk space reserved for them (so that a write there could
//! then fail, SIGBUS, on a full disk). Hence a block is free in
//! [`SpillBlocks::allocator`] only once its punch is done (the table picks
//! punched blocks up, [`SpillBlocks::collect`], rather than the freeing
//! code returning them to the allocator), and a warm block leaves the warm
//! list either to a new object or to the punch thread, never both.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hprm_store::allocator::{Allocator, Block};
use hprm_store::space::AddressSpace;
use hprm_store::spill::{SpillFile, GRANULE};

/// How long spilling must have stopped (no spilled object placed or freed)
/// before the warm blocks are punched. Long against the gaps within a
/// burst, which are a sender's period (a robot's streams run at 10 Hz or
/// faster: 100 ms at most) or a slow receiver's release; short enough that
/// a finished burst's disk and page cache are back within seconds (the
/// daemon looks at each expiry tick, at most 1 s apart, so the reserve goes
/// within `WARM_IDLE` + 1 s).
pub const WARM_IDLE: Duration = Duration::from_secs(2);

/// The most bytes of freed spill blocks kept warm for a spill file of
/// `capacity` bytes, unless `--spill-warm` says otherwise: an eighth of the file, at most 64 MiB, in whole
/// granules (at least one). Within a burst, frees and spilled creates
/// alternate (a receiver releases one, the sender sends the next), so a
/// few objects' worth suffices to make every spilled send land on warm
/// pages: 64 MiB holds six 10 MB camera frames. The bound is what a burst
/// can leave held (disk, and page cache the kernel may write back and
/// reclaim like any file's) for [`WARM_IDLE`] after it ends; an eighth of
/// the file keeps a small spill file mostly for objects.
pub fn warm_budget(capacity: u64) -> u64 {
    let budget = (capacity / 8).min(64 << 20);
    (budget / GRANULE * GRANULE).max(GRANULE).min(capacity)
}

/// The spill file's blocks, at offsets from the file's start.
pub struct SpillBlocks {
    space: Arc<AddressSpace>,
    allocator: Allocator,
    /// To the punch thread; `None` when it could not be started, and then
    /// blocks are punched inline (slower for other clients, still correct).
    to_punch: Option<mpsc::Sender<Block>>,
    /// Blocks back from the punch thread, punched.
    punched: mpsc::Receiver<Block>,
    /// Bytes sent to be punched and not yet picked up: still in use in
    /// `allocator`, by no object.
    punching: u64,
    /// Freed blocks kept warm (not punched, their disk space reserved),
    /// most recently freed last: in use in `allocator`, by no object.
    warm: VecDeque<Block>,
    /// Their bytes, at most `warm_budget`.
    warm_bytes: u64,
    warm_budget: u64,
    /// When a spilled object was last placed or freed.
    last_active: Instant,
    /// Spilled objects placed in a warm block, since the daemon started.
    warm_reuses: u64,
}

/// The punch thread's side of the channels (see [`SpillBlocks::unstarted`]).
pub struct Puncher {
    space: Arc<AddressSpace>,
    to_punch: mpsc::Receiver<Block>,
    punched: mpsc::Sender<Block>,
}

impl Puncher {
    /// Punches blocks as they come and hands each back; ends when the
    /// table (the sender) is gone. At time-sharing priority even when the
    /// daemon runs real-time (`--realtime-priority`, inherited from the
    /// thread that made the table): a punch at the request threads' FIFO
    /// priority would hold a CPU they share as long as the lock did.
    pub fn run(self) {
        hprm_store::set_thread_policy(libc::SCHED_OTHER);
        while let Ok(block) = self.to_punch.recv() {
            if let Some(file) = self.space.spill() {
                punch(file, block);
            }
            if self.punched.send(block).is_err() {
                return;
            }
        }
    }
}

/// Gives back `block`'s disk space. On failure the space stays taken until
/// the daemon exits (the file has no name): a leak of disk, never of data.
fn punch(file: &SpillFile, block: Block) {
    if let Err(e) = file.release(block.offset, block.len) {
        tracing::warn!(error = %e, bytes = block.len, "cannot give back a spilled object's disk space");
    }
}

impl SpillBlocks {
    /// The blocks of `space`'s spill file, with a punch thread, keeping up
    /// to `warm` bytes of freed blocks warm (`None`: [`warm_budget`]);
    /// `None` without a spill file.
    pub fn new(space: Arc<AddressSpace>, warm: Option<u64>) -> Option<SpillBlocks> {
        let (mut blocks, puncher) = SpillBlocks::unstarted(space)?;
        if let Some(warm) = warm {
            // Whole granules, as the blocks are; 0 punches every freed block.
            blocks.warm_budget = warm / GRANULE * GRANULE;
        }
        let spawned = std::thread::Builder::new().name("hprm-spill-punch".into()).spawn(move || puncher.run());
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the spill file's punch thread: freed spilled objects are punched under the table's lock");
            blocks.to_punch = None;
        }
        Some(blocks)
    }

    /// The blocks and the punch thread's side, not yet running: a test
    /// runs it when it chooses.
    pub fn unstarted(space: Arc<AddressSpace>) -> Option<(SpillBlocks, Puncher)> {
        let capacity = space.spill()?.size();
        let (to_punch, punch_rx) = mpsc::channel();
        let (punched_tx, punched) = mpsc::channel();
        let puncher = Puncher { space: space.clone(), to_punch: punch_rx, punched: punched_tx };
        let blocks = SpillBlocks {
            space,
            allocator: Allocator::new(capacity),
            to_punch: Some(to_punch),
            punched,
            punching: 0,
            warm: VecDeque::new(),
            warm_bytes: 0,
            warm_budget: warm_budget(capacity),
            last_active: Instant::now(),
            warm_reuses: 0,
        };
        Some((blocks, puncher))
    }

    pub fn capacity(&self) -> u64 {
        self.allocator.capacity()
    }

    /// Bytes held by objects (not those still being punched or kept warm,
    /// which no object holds and which are not free yet either).
    pub fn in_use(&self) -> u64 {
        self.allocator.in_use() - self.punching - self.warm_bytes
    }

    pub fn largest_free(&self) -> u64 {
        self.allocator.largest_free()
    }

    /// Bytes of freed blocks kept warm now (disk held by no object).
    #[cfg(test)]
    pub fn warm_bytes(&self) -> u64 {
        self.warm_bytes
    }

    /// Spilled objects placed in a warm block so far.
    #[cfg(test)]
    pub fn warm_reuses(&self) -> u64 {
        self.warm_reuses
    }

    /// Allocates a block of whole granules ([`GRANULE`]) for `len` bytes:
    /// the most recently freed warm block that fits (its disk space still
    /// reserved, its pages likely in the page cache; the rest of a larger
    /// one stays warm), else a free block whose disk space it reserves, so
    /// its owner's writes cannot fail (SIGBUS) on a full disk: a disk that
    /// cannot hold it fails the allocation instead. Takes the punched
    /// blocks back first; when they leave no room, punches the warm blocks
    /// and waits for every punch under way (the file is full: better the
    /// wait than refusing a create that fits).
    pub fn allocate(&mut self, len: u64) -> Option<Block> {
        let granules = len.checked_add(GRANULE - 1)? / GRANULE * GRANULE;
        let space = self.space.clone();
        let file = space.spill()?;
        self.last_active = Instant::now();
        if let Some(block) = self.take_warm(granules) {
            self.warm_reuses += 1;
            return Some(block);
        }
        self.collect();
        let block = match self.allocator.allocate(granules) {
            Some(b) => b,
            None if self.punching > 0 || !self.warm.is_empty() => {
                self.punch_warm();
                self.settle();
                self.allocator.allocate(granules)?
            }
            None => return None,
        };
        let block = match file.reserve(block.offset, block.len) {
            Ok(()) => block,
            // The disk is full (ENOSPC) while warm blocks, or blocks still
            // being punched, hold disk space for no object (none of the
            // warm ones fit the object, e.g. a 10 MB object against
            // scattered 2 MiB warm blocks): give that space back and try
            // once more before refusing the create. `block` goes to be
            // punched with them: nothing was written there, but a
            // fallocate that fails for want of space may keep the extents
            // it did allocate (ext4, XFS; tmpfs rolls them back).
            // (Test: tests/spill.rs, a spill dir on a 12 MiB tmpfs.)
            Err(e) if self.punching > 0 || !self.warm.is_empty() => {
                tracing::debug!(error = %e, bytes = block.len, warm = self.warm_bytes, "cannot reserve disk space in the spill file: giving back the warm blocks and retrying");
                self.punch(block);
                self.punch_warm();
                self.settle();
                let block = self.allocator.allocate(granules)?;
                match file.reserve(block.offset, block.len) {
                    Ok(()) => block,
                    Err(e) => return self.refuse(block, &e),
                }
            }
            Err(e) => return self.refuse(block, &e),
        };
        Some(block)
    }

    /// Gives back `block`, whose disk space could not be reserved (`e`),
    /// through the punch thread (a failed fallocate may keep part of its
    /// extents), and refuses the create as if the spill file were full.
    fn refuse(&mut self, block: Block, e: &std::io::Error) -> Option<Block> {
        tracing::warn!(error = %e, bytes = block.len, "cannot reserve disk space in the spill file; the object is refused as if the spill file were full");
        self.punch(block);
        None
    }

    /// Takes `len` bytes (whole granules) from the most recently freed warm
    /// block that holds them; the rest of that block stays warm, in its
    /// place (granule-aligned, so it shares no folio with the new object).
    fn take_warm(&mut self, len: u64) -> Option<Block> {
        let i = self.warm.iter().rposition(|b| b.len >= len)?;
        let found = self.warm[i];
        let taken = Block { offset: found.offset, len };
        if found.len == len {
            self.warm.remove(i);
        } else {
            self.warm[i] = Block { offset: found.offset + len, len: found.len - len };
        }
        self.warm_bytes -= len;
        Some(taken)
    }

    /// Frees `block`: kept warm (most recently freed last), and what then
    /// exceeds the warm budget, oldest first, to the punch thread, which
    /// hands it back punched.
    pub fn free(&mut self, block: Block) {
        self.last_active = Instant::now();
        self.warm.push_back(block);
        self.warm_bytes += block.len;
        while self.warm_bytes > self.warm_budget {
            let Some(oldest) = self.warm.pop_front() else { break };
            self.warm_bytes -= oldest.len;
            self.punch(oldest);
        }
    }

    /// Punches the warm blocks once no spilled object has been placed or
    /// freed for [`WARM_IDLE`] (the burst is over): called on the daemon's
    /// expiry tick. Returns the bytes sent to be punched.
    pub fn cool(&mut self, now: Instant) -> u64 {
        if self.warm.is_empty() || now.saturating_duration_since(self.last_active) < WARM_IDLE {
            return 0;
        }
        let bytes = self.warm_bytes;
        tracing::debug!(
            bytes,
            reused = self.warm_reuses,
            "spilling stopped: giving back the warm spill blocks' disk space"
        );
        self.punch_warm();
        bytes
    }

    /// Sends every warm block to be punched.
    fn punch_warm(&mut self) {
        while let Some(block) = self.warm.pop_front() {
            self.warm_bytes -= block.len;
            self.punch(block);
        }
    }

    /// Sends `block` (no longer warm, held by no object) to the punch
    /// thread; punches it here if there is none.
    fn punch(&mut self, block: Block) {
        if let Some(tx) = &self.to_punch {
            match tx.send(block) {
                Ok(()) => {
                    self.punching += block.len;
                    return;
                }
                Err(_) => {
                    tracing::warn!("the spill file's punch thread is gone: freed spilled objects are punched under the table's lock");
                    self.to_punch = None;
                }
            }
        }
        if let Some(file) = self.space.spill() {
            punch(file, block);
        }
        self.allocator.free(block);
    }

    /// Takes back the blocks punched so far, without waiting.
    pub fn collect(&mut self) {
        while let Ok(block) = self.punched.try_recv() {
            self.take_back(block);
        }
    }

    /// Punches the warm blocks at once and waits for every punch: after
    /// it, the file's disk space is that of live objects alone.
    #[cfg(test)]
    pub fn give_back_all(&mut self) {
        self.punch_warm();
        self.settle();
    }

    /// Waits for every punch under way and takes those blocks back: after
    /// it, the file's disk space is that of live objects and warm blocks.
    pub fn settle(&mut self) {
        self.collect();
        while self.punching > 0 {
            match self.punched.recv() {
                Ok(block) => self.take_back(block),
                Err(_) => {
                    // Only if the thread panicked: its blocks stay lost to
                    // the allocator (never handed out unpunched).
                    tracing::warn!(
                        bytes = self.punching,
                        "the spill file's punch thread is gone with blocks it had not handed back"
                    );
                    self.punching = 0;
                    return;
                }
            }
        }
    }

    fn take_back(&mut self, block: Block) {
        self.punching -= block.len;
        self.allocator.free(block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_store::arena::{Arena, ArenaOptions};
    use hprm_store::spill::SpillFile;

    fn blocks(granules: u64) -> (Arc<AddressSpace>, SpillBlocks, Puncher) {
        let dir = tempfile::tempdir().unwrap();
        let arena =
            Arena::create(&ArenaOptions { size: 1 << 16, dir: None, hugepages: false, populate: false }).unwrap();
        // The file has no name: the directory may go at once.
        let spill = SpillFile::create(dir.path(), granules * GRANULE).unwrap();
        let space = Arc::new(AddressSpace::new(arena, Some(spill)));
        let (blocks, puncher) = SpillBlocks::unstarted(space.clone()).unwrap();
        (space, blocks, puncher)
    }

    #[test]
    fn a_freed_block_is_reused_warm_most_recent_first_and_the_rest_only_once_punched() {
        let (space, mut blocks, puncher) = blocks(2);
        let file = || space.spill().unwrap();
        assert_eq!(blocks.warm_budget, GRANULE, "a small file keeps one granule warm");
        let a = blocks.allocate(GRANULE).unwrap();
        let b = blocks.allocate(1).unwrap();
        assert_eq!(blocks.in_use(), 2 * GRANULE);
        // SAFETY: in the file, and this test owns the blocks.
        unsafe {
            *file().ptr_at(a.offset + 10) = 7;
            *file().ptr_at(b.offset + 10) = 8;
        }
        blocks.free(a);
        blocks.free(b);
        // Both freed: the newest (b) warm, the oldest (a, past the budget)
        // sent to be punched; the punch thread has not run, so a is not
        // free yet however often the table looks.
        blocks.collect();
        assert_eq!((blocks.warm_bytes(), blocks.in_use(), blocks.largest_free()), (GRANULE, 0, 0));
        let warm = blocks.allocate(GRANULE).unwrap();
        assert_eq!((warm, blocks.warm_reuses()), (b, 1), "the warm block first");
        // SAFETY: as above.
        assert_eq!(unsafe { *file().ptr_at(b.offset + 10) }, 8, "warm: never punched");
        assert!(file().disk_bytes() >= GRANULE, "a warm block keeps its disk space reserved");
        let thread = std::thread::spawn(move || puncher.run());
        // The file is full, a punch is under way: allocating waits for it.
        let again = blocks.allocate(GRANULE).unwrap();
        assert_eq!(again, a);
        // SAFETY: as above.
        assert_eq!(unsafe { *file().ptr_at(a.offset + 10) }, 0, "reused after its punch, not before");
        blocks.free(again);
        blocks.free(warm);
        blocks.settle();
        assert_eq!((blocks.in_use(), blocks.warm_bytes()), (0, GRANULE));
        assert!(file().disk_bytes() >= GRANULE, "the warm block's disk space is held");
        // Spilling has not stopped long: the warm block stays.
        assert_eq!(blocks.cool(Instant::now()), 0);
        assert_eq!(blocks.cool(Instant::now() + WARM_IDLE), GRANULE);
        blocks.settle();
        assert_eq!((blocks.in_use(), blocks.warm_bytes(), blocks.largest_free()), (0, 0, 2 * GRANULE));
        assert_eq!(file().disk_bytes(), 0, "every freed block's disk space is given back");
        drop(blocks);
        thread.join().unwrap();
    }

    #[test]
    fn a_warm_block_is_split_and_a_full_file_punches_the_warm_blocks_to_make_room() {
        let (space, mut blocks, puncher) = blocks(16);
        let file = || space.spill().unwrap();
        assert_eq!(blocks.warm_budget, 2 * GRANULE, "an eighth of the file");
        let thread = std::thread::spawn(move || puncher.run());
        let big = blocks.allocate(2 * GRANULE).unwrap();
        let rest = blocks.allocate(14 * GRANULE).unwrap();
        // Over the budget: punched, and free once taken back.
        blocks.free(rest);
        blocks.settle();
        assert_eq!((blocks.warm_bytes(), blocks.largest_free()), (0, 14 * GRANULE));
        blocks.free(big);
        // A small object takes the warm block's first granule, though free
        // space lies beside it; the second granule stays warm.
        let small = blocks.allocate(1).unwrap();
        assert_eq!(small, Block { offset: big.offset, len: GRANULE });
        assert_eq!((blocks.warm_bytes(), blocks.warm_reuses()), (GRANULE, 1));
        // Fifteen granules fit only with the warm one: it is punched to
        // make room, and the allocation waits for that punch.
        let whole = blocks.allocate(15 * GRANULE).unwrap();
        assert_eq!(whole, Block { offset: big.offset + GRANULE, len: 15 * GRANULE });
        assert_eq!(blocks.warm_bytes(), 0);
        blocks.free(whole);
        blocks.free(small);
        blocks.give_back_all();
        assert_eq!(file().disk_bytes(), 0);
        drop(blocks);
        thread.join().unwrap();
    }

    #[test]
    fn a_warm_budget_of_zero_punches_every_freed_block() {
        let dir = tempfile::tempdir().unwrap();
        let arena =
            Arena::create(&ArenaOptions { size: 1 << 16, dir: None, hugepages: false, populate: false }).unwrap();
        let space = Arc::new(AddressSpace::new(arena, Some(SpillFile::create(dir.path(), 4 * GRANULE).unwrap())));
        // 3 MiB is rounded down to whole granules: one.
        let blocks = SpillBlocks::new(space.clone(), Some(3 << 20)).unwrap();
        assert_eq!(blocks.warm_budget, GRANULE);
        let mut blocks0 = SpillBlocks::new(space.clone(), Some(0)).unwrap();
        assert_eq!(blocks0.warm_budget, 0);
        let a = blocks0.allocate(1).unwrap();
        blocks0.free(a);
        blocks0.settle();
        assert_eq!((blocks0.warm_bytes(), blocks0.largest_free()), (0, 4 * GRANULE), "punched at once");
        assert_eq!(space.spill().unwrap().disk_bytes(), 0);
    }
}
