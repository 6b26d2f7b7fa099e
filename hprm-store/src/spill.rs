//! The spill file: a file-backed overflow arena (`hprm-store --spill-dir`).
//!
//! When the shared-memory arena has no room for an object (after eviction
//! of settled cache), the daemon places it here instead of refusing it or
//! making its sender wait: typically messages pinned by a slow consumer.
//! The file lies in the operator's directory (a disk, so spilled objects
//! cost page cache and writeback rather than locked shared memory), and
//! extends the arena's offsets: see [`crate::space`] for how an offset
//! resolves to one or the other.
//!
//! Like the arena, the file has no name once made (`O_TMPFILE`, or created
//! and unlinked at once), so nothing is left behind however the daemon
//! exits, and it reaches clients as a descriptor in the Hello.
//!
//! Disk space follows the objects: the file is sparse; the daemon reserves
//! (`fallocate`) a block's pages when it places an object there, so a
//! client writing into it can never hit SIGBUS for a full disk (the create
//! is refused instead), and punches them out (`FALLOC_FL_PUNCH_HOLE`) once
//! the object is freed and its block is not kept warm for the next spilled
//! object, off its table's lock (the daemon's `spill_blocks` module). Spilled blocks are whole granules ([`GRANULE`]),
//! so reserving and punching for one object never touch another's bytes.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::fcntl::{fallocate, FallocateFlags};

use crate::bytesize::ByteSize;
use crate::mapping::{MapError, MappedFile};

/// A page: the spill file's offsets in the address space are page-aligned
/// (`crate::space::spill_base`).
pub const PAGE: u64 = 4096;

/// Granule of spilled blocks: their offsets and lengths in the spill file
/// are multiples of it. Not a page: the page cache holds a file in folios
/// of up to 2 MiB (a PMD; ext4 and xfs make large folios), and writing into
/// a folio dirties all of it, so an object ending inside one would have
/// the filesystem allocate disk for the hole beside it (delayed
/// allocation: space never reserved, and never punched when that object
/// goes; the spill test saw 7 such pages past a block's end). Blocks of
/// whole, aligned 2 MiB never share a folio. The cost is up to 2 MiB of
/// disk per spilled object; a small object spills only when the arena is
/// full, one block at a time (the daemon's `reserve`).
pub const GRANULE: u64 = 2 << 20;

/// Why the spill file could not be made, mapped or used.
#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    #[error("the spill size must be at least {}", ByteSize(GRANULE))]
    TooSmall,
    #[error("--spill-dir {dir} is not a directory that exists; create it, or pass another")]
    NotADirectory { dir: String },
    #[error("cannot create the spill file in {dir}: {source}; pass a --spill-dir this user can write")]
    Create { dir: String, source: io::Error },
    #[error("the filesystem of --spill-dir {dir} cannot reserve and release a file's space (fallocate: {source}); pass a directory on ext4, xfs, btrfs or tmpfs")]
    NoFallocate { dir: String, source: io::Error },
    #[error("cannot map the spill file ({size}): {source}")]
    Map { size: ByteSize, source: io::Error },
    #[error("the spill file descriptor holds {actual} bytes but the daemon announced {announced}; the daemon and client disagree, restart the client")]
    SizeMismatch { actual: u64, announced: u64 },
}

/// A mapped spill file (`MAP_SHARED`, readable and writable). Who may
/// touch which bytes is decided by the daemon's object table, as for the
/// arena.
#[derive(Debug)]
pub struct SpillFile {
    mapping: MappedFile,
}

impl SpillFile {
    /// Makes a spill file of `size` bytes (rounded down to [`GRANULE`]) in
    /// `dir`, sparse: it takes no disk space until objects are placed in it
    /// (the daemon's side). Checks at once that `dir` takes a file and
    /// that its filesystem can reserve and punch space, so that a bad
    /// `--spill-dir` is one error at start, not a failure under load.
    pub fn create(dir: &Path, size: u64) -> Result<SpillFile, SpillError> {
        let size = size / GRANULE * GRANULE;
        if size == 0 {
            return Err(SpillError::TooSmall);
        }
        let shown = dir.display().to_string();
        if !dir.is_dir() {
            return Err(SpillError::NotADirectory { dir: shown });
        }
        let file = tempfile::tempfile_in(dir).map_err(|source| SpillError::Create { dir: shown.clone(), source })?;
        file.set_len(size).map_err(|source| SpillError::Create { dir: shown.clone(), source })?;
        let spill = Self::map(file, size)?;
        spill.reserve(0, PAGE).map_err(|source| SpillError::NoFallocate { dir: shown.clone(), source })?;
        spill.release(0, PAGE).map_err(|source| SpillError::NoFallocate { dir: shown, source })?;
        Ok(spill)
    }

    /// Maps a spill file received from the daemon (the client's side).
    ///
    /// Mapped at connect rather than when the client first meets a spilled
    /// object: mapping a sparse file costs one mapping and no memory, and
    /// resolving an offset then never takes a lock or fails.
    pub fn map_fd(fd: OwnedFd, announced_size: u64) -> Result<SpillFile, SpillError> {
        let mapping = MappedFile::received(fd, announced_size, false).map_err(|e| match e {
            MapError::Map(source) => SpillError::Map { size: ByteSize(announced_size), source },
            MapError::SizeMismatch { actual } => SpillError::SizeMismatch { actual, announced: announced_size },
        })?;
        Ok(SpillFile { mapping })
    }

    fn map(file: File, size: u64) -> Result<SpillFile, SpillError> {
        let mapping =
            MappedFile::map(file, size, false).map_err(|source| SpillError::Map { size: ByteSize(size), source })?;
        Ok(SpillFile { mapping })
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.mapping.size()
    }

    /// The descriptor to pass to clients.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.mapping.fd()
    }

    /// Whether `[offset, offset + len)` lies inside the file.
    pub fn contains_range(&self, offset: u64, len: u64) -> bool {
        self.mapping.contains_range(offset, len)
    }

    /// Pointer to byte `offset` of the file.
    ///
    /// # Safety
    /// As [`crate::arena::Arena::ptr_at`]: `offset + len` within the file
    /// for what the caller then touches, bytes the caller owns.
    pub unsafe fn ptr_at(&self, offset: u64) -> *mut u8 {
        // SAFETY: the caller's contract.
        unsafe { self.mapping.ptr_at(offset) }
    }

    /// Maps the pages of `[offset, offset + len)` for writing in this
    /// process, in one system call (`MADV_POPULATE_WRITE`), before the
    /// creator of a spilled object writes it: a fault per 4 KiB page of a
    /// file mapping costs several times the copy itself (`store-bench
    /// --spill-dir`). Done at every create, unlike the arena's
    /// (`crate::prefault`, which remembers what it mapped): a spilled block
    /// is punched (its pages gone) unless the daemon kept it warm, and even
    /// then this process may never have mapped it; for warm pages, in the
    /// page cache already, this costs little. Best effort: a kernel that
    /// refuses leaves the writes to fault.
    pub fn prefault_for_write(&self, offset: u64, len: u64) {
        let start = offset / PAGE * PAGE;
        let end = offset.saturating_add(len).min(self.mapping.size());
        if end <= start {
            return;
        }
        // SAFETY: `[start, end)` lies in this live mapping, and `start` is
        // page-aligned as madvise requires; MADV_POPULATE_WRITE maps pages
        // without changing their bytes.
        let rc = unsafe {
            libc::madvise(
                self.mapping.base().add(start as usize).cast(),
                (end - start) as usize,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if rc != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "MADV_POPULATE_WRITE refused on the spill file: its pages will fault on first write");
        }
    }

    /// Reserves disk space for `[offset, offset + len)`: after this, writes
    /// there cannot fail for want of space. An error (ENOSPC) means the
    /// object cannot be placed here.
    pub fn reserve(&self, offset: u64, len: u64) -> io::Result<()> {
        fallocate(self.mapping.file().as_raw_fd(), FallocateFlags::FALLOC_FL_KEEP_SIZE, offset as i64, len as i64)
            .map_err(io::Error::from)
    }

    /// Gives back the disk space of `[offset, offset + len)`; the range
    /// reads as zeros afterwards.
    pub fn release(&self, offset: u64, len: u64) -> io::Result<()> {
        let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
        fallocate(self.mapping.file().as_raw_fd(), flags, offset as i64, len as i64).map_err(io::Error::from)
    }

    /// Disk space the file takes now.
    pub fn disk_bytes(&self) -> u64 {
        self.mapping.file().metadata().map(|m| m.blocks() * 512).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_follows_reserve_and_release_and_no_name_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let spill = SpillFile::create(dir.path(), 64 << 20).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(spill.disk_bytes(), 0, "a new spill file is sparse");
        spill.reserve(PAGE, 1 << 20).unwrap();
        assert!(spill.disk_bytes() >= 1 << 20);
        let client = SpillFile::map_fd(spill.fd().try_clone_to_owned().unwrap(), spill.size()).unwrap();
        // SAFETY: in bounds; the file is this test's.
        unsafe {
            *spill.ptr_at(PAGE + 10) = 7;
            assert_eq!(*client.ptr_at(PAGE + 10), 7);
        }
        spill.release(PAGE, 1 << 20).unwrap();
        assert_eq!(spill.disk_bytes(), 0);
        // SAFETY: as above.
        assert_eq!(unsafe { *client.ptr_at(PAGE + 10) }, 0, "a punched range reads as zeros");
    }

    #[test]
    fn a_missing_directory_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let err = SpillFile::create(&dir.path().join("nope"), 64 << 20).unwrap_err();
        assert!(matches!(err, SpillError::NotADirectory { .. }), "{err}");
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(SpillFile::create(&file, 64 << 20), Err(SpillError::NotADirectory { .. })));
        assert!(matches!(SpillFile::create(dir.path(), GRANULE - 1), Err(SpillError::TooSmall)));
    }
}
