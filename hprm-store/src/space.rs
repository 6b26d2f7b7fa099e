//! The store's address space: one range of offsets, two backings.
//!
//! Offsets below the arena's size lie in the shared-memory arena
//! ([`crate::arena`]); offsets from [`spill_base`] on lie in the spill file
//! ([`crate::spill`], `hprm-store --spill-dir`), at `offset - spill_base`.
//! So a [`crate::Placement`] stays one offset whichever backing holds the
//! object, and every wire layout that carries one (messages, replies, the
//! outbox, peers' and links' references) is unchanged.
//!
//! [`AddressSpace`] is the one place an offset becomes a pointer, for the
//! daemon (writing metadata) and for every client (the Rust client, and
//! through it hprm-node, hprm-py's native module, hprm-link and the ROS 2
//! bridge, none of which maps the arena itself).

use crate::arena::Arena;
use crate::spill::{SpillFile, PAGE};

/// The first offset of the spill file: past the arena's size rounded up to
/// a [`PAGE`], so that spilled offsets are page-aligned as the spill file's
/// blocks are; and a page further, so that the arena's end (where an empty
/// range of an object at the arena's end lies) is never a spill offset.
pub fn spill_base(arena_size: u64) -> u64 {
    arena_size.div_ceil(PAGE) * PAGE + PAGE
}

/// The arena and, with `--spill-dir`, the spill file, both mapped.
#[derive(Debug)]
pub struct AddressSpace {
    arena: Arena,
    spill: Option<SpillFile>,
    /// [`spill_base`] of the arena.
    base: u64,
}

impl AddressSpace {
    pub fn new(arena: Arena, spill: Option<SpillFile>) -> AddressSpace {
        let base = spill_base(arena.size());
        AddressSpace { arena, spill, base }
    }

    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    pub fn spill(&self) -> Option<&SpillFile> {
        self.spill.as_ref()
    }

    /// The first offset of the spill file.
    pub fn spill_base(&self) -> u64 {
        self.base
    }

    /// Whether `offset` lies in the spill file's part of the space (every
    /// offset below [`spill_base`] is the arena's).
    pub fn is_spilled(&self, offset: u64) -> bool {
        offset >= self.base
    }

    /// Whether `[offset, offset + len)` lies wholly in the arena or wholly
    /// in the spill file.
    pub fn contains_range(&self, offset: u64, len: u64) -> bool {
        if !self.is_spilled(offset) {
            return self.arena.contains_range(offset, len);
        }
        self.spill.as_ref().is_some_and(|spill| spill.contains_range(offset - self.base, len))
    }

    /// Pointer to byte `offset` of the space.
    ///
    /// # Safety
    /// `[offset, offset + len)` must satisfy [`AddressSpace::contains_range`]
    /// for whatever `len` the caller then reads or writes, and the caller
    /// must own those bytes (see `crate::arena`).
    pub unsafe fn ptr_at(&self, offset: u64) -> *mut u8 {
        if !self.is_spilled(offset) {
            // SAFETY: the caller's contract, for the arena.
            return unsafe { self.arena.ptr_at(offset) };
        }
        let spill = self
            .spill
            .as_ref()
            .expect("ptr_at: a spilled offset in a space without a spill file; the caller skipped contains_range");
        // SAFETY: the caller's contract, for the spill file.
        unsafe { spill.ptr_at(offset - self.base) }
    }

    /// Starts zeroing the arena's pages ahead of the clients
    /// ([`Arena::zero_in_background`]); the thread holds the space, so the
    /// mapping outlives it.
    pub fn zero_arena_in_background(self: &std::sync::Arc<Self>) -> std::io::Result<()> {
        self.arena.zero_in_background_held_by(self.clone())
    }

    /// The addresses of the mapping `offset` lies in, the arena's or the
    /// spill file's, in this process: what a view over an object's bytes
    /// points inside (how a test tells a zero-copy view from a copy).
    pub fn mapping_of(&self, offset: u64) -> std::ops::Range<usize> {
        // SAFETY: offset 0 of either mapping is in bounds of it.
        let (start, len) = match &self.spill {
            Some(spill) if self.is_spilled(offset) => (unsafe { spill.ptr_at(0) }, spill.size()),
            _ => (unsafe { self.arena.ptr_at(0) }, self.arena.size()),
        };
        start as usize..start as usize + len as usize
    }

    /// Maps `[offset, offset + len)` for writing in this process before
    /// the creator writes an object there ([`Arena::prefault_for_write`],
    /// [`SpillFile::prefault_for_write`]).
    pub fn prefault_for_write(&self, offset: u64, len: u64) {
        match &self.spill {
            Some(spill) if self.is_spilled(offset) => spill.prefault_for_write(offset - self.base, len),
            _ => self.arena.prefault_for_write(offset, len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::ArenaOptions;

    #[test]
    fn offsets_resolve_to_the_arena_or_the_spill_file() {
        let dir = tempfile::tempdir().unwrap();
        let arena =
            Arena::create(&ArenaOptions { size: 10_000, dir: None, hugepages: false, populate: false }).unwrap();
        let spill = SpillFile::create(dir.path(), 4 << 20).unwrap();
        let space = AddressSpace::new(arena, Some(spill));
        assert_eq!(space.spill_base(), 4 * PAGE);
        assert!(space.contains_range(0, 10_000));
        assert!(!space.contains_range(9_000, 2_000), "a range may not run from the arena into the gap");
        assert!(!space.contains_range(10_000, 100), "the gap before the spill file is no one's");
        assert!(space.contains_range(10_000, 0), "an empty range at the arena's end is the arena's");
        assert!(space.contains_range(4 * PAGE, 4 << 20));
        assert!(!space.contains_range(4 * PAGE + 1, 4 << 20));
        space.spill().unwrap().reserve(0, PAGE).unwrap();
        // SAFETY: in bounds, this test's bytes.
        unsafe {
            *space.ptr_at(4 * PAGE + 5) = 9;
            *space.ptr_at(5) = 4;
            assert_eq!(*space.spill().unwrap().ptr_at(5), 9);
            assert_eq!(*space.arena().ptr_at(5), 4);
        }
        let no_spill = AddressSpace::new(
            Arena::create(&ArenaOptions { size: 1 << 16, dir: None, hugepages: false, populate: false }).unwrap(),
            None,
        );
        assert!(!no_spill.contains_range(1 << 16, 1));
        assert!(no_spill.contains_range(1 << 16, 0));
        assert!(!no_spill.contains_range(spill_base(1 << 16), 0));
    }
}
