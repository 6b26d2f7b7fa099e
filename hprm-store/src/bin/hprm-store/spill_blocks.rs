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
//! Invariant: a block is free in [`SpillBlocks::allocator`] only once its
//! punch is done. A block reused before would have the punch, still to
//! come, zero its new owner's bytes and drop the disk space reserved for
//! them (so that a write there could then fail, SIGBUS, on a full disk).
//! Hence the table picks punched blocks up ([`SpillBlocks::collect`])
//! rather than the freeing code returning them to the allocator.

use std::sync::mpsc;
use std::sync::Arc;

use hprm_store::allocator::{Allocator, Block};
use hprm_store::space::AddressSpace;
use hprm_store::spill::{SpillFile, GRANULE};

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
    /// The blocks of `space`'s spill file, with a punch thread; `None`
    /// without a spill file.
    pub fn new(space: Arc<AddressSpace>) -> Option<SpillBlocks> {
        let (mut blocks, puncher) = SpillBlocks::unstarted(space)?;
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
        let blocks =
            SpillBlocks { space, allocator: Allocator::new(capacity), to_punch: Some(to_punch), punched, punching: 0 };
        Some((blocks, puncher))
    }

    pub fn capacity(&self) -> u64 {
        self.allocator.capacity()
    }

    /// Bytes held by objects (not those still being punched, which no
    /// object holds and which are not free yet either).
    pub fn in_use(&self) -> u64 {
        self.allocator.in_use() - self.punching
    }

    pub fn largest_free(&self) -> u64 {
        self.allocator.largest_free()
    }

    /// Allocates a block of whole granules ([`GRANULE`]) for `len` bytes
    /// and reserves its disk space, so its owner's writes cannot fail
    /// (SIGBUS) on a full disk: a disk that cannot hold it fails the
    /// allocation instead. Takes the punched blocks back first; when they
    /// leave no room and punches are under way, waits for those (the file
    /// is full: better the wait than refusing a create that fits).
    pub fn allocate(&mut self, len: u64) -> Option<Block> {
        let granules = len.checked_add(GRANULE - 1)? / GRANULE * GRANULE;
        let space = self.space.clone();
        let file = space.spill()?;
        self.collect();
        let block = match self.allocator.allocate(granules) {
            Some(b) => b,
            None if self.punching > 0 => {
                self.settle();
                self.allocator.allocate(granules)?
            }
            None => return None,
        };
        if let Err(e) = file.reserve(block.offset, block.len) {
            tracing::warn!(error = %e, bytes = block.len, "cannot reserve disk space in the spill file; the object is refused as if the spill file were full");
            self.allocator.free(block);
            return None;
        }
        Some(block)
    }

    /// Frees `block`: to the punch thread, which hands it back punched.
    pub fn free(&mut self, block: Block) {
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

    /// Waits for every punch under way and takes those blocks back: after
    /// it, the file's disk space is that of live objects alone.
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

    #[test]
    fn a_freed_block_is_reused_only_once_punched() {
        let dir = tempfile::tempdir().unwrap();
        let arena =
            Arena::create(&ArenaOptions { size: 1 << 16, dir: None, hugepages: false, populate: false }).unwrap();
        let spill = SpillFile::create(dir.path(), 2 * GRANULE).unwrap();
        let space = Arc::new(AddressSpace::new(arena, Some(spill)));
        let file = || space.spill().unwrap();
        let (mut blocks, puncher) = SpillBlocks::unstarted(space.clone()).unwrap();
        let a = blocks.allocate(GRANULE).unwrap();
        let b = blocks.allocate(1).unwrap();
        assert_eq!(blocks.in_use(), 2 * GRANULE);
        // SAFETY: in the file, and this test owns the block.
        unsafe { *file().ptr_at(a.offset + 10) = 7 };
        blocks.free(a);
        // The punch thread has not run: the block is not free yet, however
        // often the table looks.
        blocks.collect();
        assert_eq!(blocks.largest_free(), 0, "a block is free only once punched");
        assert_eq!(blocks.in_use(), GRANULE, "and no object holds it");
        // SAFETY: as above.
        assert_eq!(unsafe { *file().ptr_at(a.offset + 10) }, 7);
        let thread = std::thread::spawn(move || puncher.run());
        // The file is full, a punch is under way: allocating waits for it.
        let again = blocks.allocate(GRANULE).unwrap();
        assert_eq!(again, a);
        // SAFETY: as above.
        assert_eq!(unsafe { *file().ptr_at(a.offset + 10) }, 0, "reused after its punch, not before");
        blocks.free(again);
        blocks.free(b);
        blocks.settle();
        assert_eq!(blocks.in_use(), 0);
        assert_eq!(file().disk_bytes(), 0, "every freed block's disk space is given back");
        drop(blocks);
        thread.join().unwrap();
    }
}
