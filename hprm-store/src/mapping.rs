//! A file mapped `MAP_SHARED`, readable and writable, into this process:
//! what the arena ([`crate::arena`]) and the spill file ([`crate::spill`])
//! both are. The one place a received descriptor is checked against the
//! size the daemon announced, and an offset becomes a pointer.
//!
//! Ownership: a [`MappedFile`] owns its descriptor and its mapping, which
//! live as long as it does; the bytes inside belong to whoever the daemon's
//! object table says owns the enclosing block, not to Rust's borrow rules,
//! which is why it hands out only raw pointers.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use memmap2::{MmapOptions, MmapRaw};

/// Why a received descriptor could not be mapped.
#[derive(Debug)]
pub(crate) enum MapError {
    /// The system refused the mapping (or the size exceeds the address
    /// space).
    Map(io::Error),
    /// A received descriptor is smaller than the daemon announced (or the
    /// announcement was 0).
    SizeMismatch { actual: u64 },
}

#[derive(Debug)]
pub(crate) struct MappedFile {
    file: File,
    map: MmapRaw,
    size: u64,
}

// SAFETY: `MappedFile` hands out only raw pointers; who may touch which
// bytes is decided by the object table (see the module doc).
unsafe impl Send for MappedFile {}
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps the first `size` bytes of `file`; `populate` maps every page at
    /// once (`MAP_POPULATE`).
    pub(crate) fn map(file: File, size: u64, populate: bool) -> io::Result<MappedFile> {
        let len = usize::try_from(size)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "larger than the address space"))?;
        let mut opts = MmapOptions::new();
        opts.len(len);
        if populate {
            opts.populate();
        }
        let map = opts.map_raw(&file)?;
        Ok(MappedFile { file, map, size })
    }

    /// Maps a descriptor received from the daemon, which announced it holds
    /// `announced` bytes (the client's side).
    pub(crate) fn received(fd: OwnedFd, announced: u64, populate: bool) -> Result<MappedFile, MapError> {
        let file = File::from(fd);
        let actual = file.metadata().map_err(MapError::Map)?.len();
        if actual < announced || announced == 0 {
            return Err(MapError::SizeMismatch { actual });
        }
        Self::map(file, announced, populate).map_err(MapError::Map)
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The mapping's first byte.
    pub(crate) fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// Pointer to byte `offset`.
    ///
    /// # Safety
    /// `offset + len` must lie within the file for whatever `len` the
    /// caller then reads or writes ([`MappedFile::contains_range`]), and
    /// the caller must own those bytes (the module doc).
    pub(crate) unsafe fn ptr_at(&self, offset: u64) -> *mut u8 {
        debug_assert!(offset <= self.size);
        // SAFETY: the caller keeps offset within the mapping.
        unsafe { self.map.as_mut_ptr().add(offset as usize) }
    }

    /// Whether `[offset, offset + len)` lies inside the file.
    pub(crate) fn contains_range(&self, offset: u64, len: u64) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.size)
    }
}
