//! The arena: one shared-memory region per daemon, made once at start.
//!
//! The daemon makes it ([`Arena::create`]) as an anonymous `memfd` or, with
//! `--dir`, an unnamed `O_TMPFILE` file in that directory, so nothing with a
//! name ever exists in /dev/shm and nothing can be left behind however the
//! daemon exits: the memory goes when the last process holding the descriptor
//! goes. Every page is reserved up front with `fallocate`, so a client writing
//! into an object can never hit SIGBUS because tmpfs ran out of room later.
//!
//! Clients receive the descriptor once per connection (SCM_RIGHTS, see
//! `protocol`) and map it with [`Arena::map_fd`]. Unless the daemon runs
//! with `--populate`, a client maps the pages of each object it creates
//! as it creates it ([`Arena::prefault_for_write`], see `crate::prefault`),
//! and the daemon zeroes the arena's pages in the background
//! ([`Arena::zero_in_background`]).
//!
//! Ownership: an `Arena` owns its mapping; the bytes inside belong to whoever
//! the daemon's object table says owns the enclosing block (the creator while
//! an object is unsealed, nobody — read-only for all — once sealed).

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::bytesize::ByteSize;
use crate::mapping::{MapError, MappedFile};
use crate::prefault::{self, Prefault};

/// Size of the huge pages `--hugepages` asks for (the x86-64 and aarch64 default).
const HUGE_PAGE: u64 = 2 << 20;

/// How the daemon's arena is made.
#[derive(Debug, Clone)]
pub struct ArenaOptions {
    /// Bytes of shared memory.
    pub size: u64,
    /// Put the arena in an unnamed file in this directory (e.g. a hugetlbfs
    /// mount, or /dev/shm) instead of an anonymous memfd.
    pub dir: Option<PathBuf>,
    /// Back the memfd with huge pages (the size is rounded up to 2 MiB).
    pub hugepages: bool,
    /// Pre-fault the daemon's own mapping (MAP_POPULATE).
    pub populate: bool,
}

/// Why the arena could not be made or mapped.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    #[error("the arena size must be more than 0 bytes")]
    Empty,
    #[error("an arena of {requested} cannot be had: {place} has only {available} free; pass a smaller --memory, or free or enlarge {place}")]
    NotEnoughRoom { requested: ByteSize, available: ByteSize, place: String },
    #[error("cannot create the arena in {place}: {source}")]
    Create { place: String, source: io::Error },
    #[error("cannot reserve {requested} for the arena in {place}: {source}; pass a smaller --memory{hint}")]
    Reserve { requested: ByteSize, place: String, hint: &'static str, source: io::Error },
    #[error("cannot map the arena ({size}): {source}")]
    Map { size: ByteSize, source: io::Error },
    #[error("the arena descriptor holds {actual} bytes but the daemon announced {announced}; the daemon and client disagree, restart the client")]
    SizeMismatch { actual: u64, announced: u64 },
}

/// A mapped arena. The mapping is `MAP_SHARED`, readable and writable.
#[derive(Debug)]
pub struct Arena {
    mapping: MappedFile,
    /// Which pages this process has mapped for writing.
    prefault: Prefault,
}

impl Arena {
    /// Makes and reserves a new arena (the daemon's side).
    pub fn create(opts: &ArenaOptions) -> Result<Arena, ArenaError> {
        if opts.size == 0 {
            return Err(ArenaError::Empty);
        }
        let size = if opts.hugepages { opts.size.div_ceil(HUGE_PAGE) * HUGE_PAGE } else { opts.size };
        let (file, place) = match &opts.dir {
            Some(dir) => {
                let place = dir.display().to_string();
                check_room_in_dir(dir, size, &place)?;
                // O_TMPFILE where the filesystem has it; otherwise create and
                // unlink at once. Either way no name outlives this call.
                let file =
                    tempfile::tempfile_in(dir).map_err(|source| ArenaError::Create { place: place.clone(), source })?;
                (file, place)
            }
            None => {
                let place = "memory (memfd)".to_string();
                check_room_in_memory(size, &place)?;
                let file = create_memfd(opts.hugepages)
                    .map_err(|source| ArenaError::Create { place: place.clone(), source })?;
                (file, place)
            }
        };
        file.set_len(size).map_err(|source| ArenaError::Create { place: place.clone(), source })?;
        // The kernel may refuse to back the whole size (a tmpfs quota, a
        // cgroup limit, too few huge pages): better to learn it now, as an
        // error, than later as a SIGBUS in a client.
        let hint = if opts.hugepages { " or reserve more huge pages (vm.nr_hugepages)" } else { "" };
        nix::fcntl::fallocate(file.as_raw_fd(), nix::fcntl::FallocateFlags::empty(), 0, size as i64)
            .map_err(|errno| ArenaError::Reserve { requested: ByteSize(size), place, hint, source: errno.into() })?;
        Self::map(file, size, opts.populate)
    }

    /// Maps an arena received from the daemon (the client's side).
    pub fn map_fd(fd: OwnedFd, announced_size: u64, populate: bool) -> Result<Arena, ArenaError> {
        let mapping = MappedFile::received(fd, announced_size, populate).map_err(|e| match e {
            MapError::Map(source) => ArenaError::Map { size: ByteSize(announced_size), source },
            MapError::SizeMismatch { actual } => ArenaError::SizeMismatch { actual, announced: announced_size },
        })?;
        Ok(Self::over(mapping, populate))
    }

    fn map(file: File, size: u64, populate: bool) -> Result<Arena, ArenaError> {
        let mapping =
            MappedFile::map(file, size, populate).map_err(|source| ArenaError::Map { size: ByteSize(size), source })?;
        Ok(Self::over(mapping, populate))
    }

    fn over(mapping: MappedFile, populate: bool) -> Arena {
        let prefault = Prefault::new(mapping.size(), populate);
        Arena { mapping, prefault }
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.mapping.size()
    }

    /// The descriptor to pass to clients.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.mapping.fd()
    }

    /// Pointer to byte `offset` of the arena.
    ///
    /// # Safety
    /// `offset + len` must lie within the arena for whatever `len` the caller
    /// then reads or writes, and the caller must own those bytes per the
    /// module doc.
    pub unsafe fn ptr_at(&self, offset: u64) -> *mut u8 {
        // SAFETY: the caller's contract.
        unsafe { self.mapping.ptr_at(offset) }
    }

    /// Maps the pages of `[offset, offset + len)` for writing in this
    /// process, those not mapped before, in one system call: the creator of
    /// an object calls it before writing, so that its writes do not fault
    /// page by page (`crate::prefault`). Nothing to do in a mapping made
    /// with `populate`. The range is clipped to the arena.
    pub fn prefault_for_write(&self, offset: u64, len: u64) {
        // SAFETY: `map` is this arena's live mapping of `size` bytes.
        unsafe { self.prefault.for_write(self.mapping.base(), offset, len) }
    }

    /// Starts zeroing the arena's pages ahead of the clients, on a thread
    /// of the lowest priority (`crate::prefault::zero_in_background`): the
    /// daemon's side, for an arena in a memfd that is not pre-faulted.
    pub fn zero_in_background(self: &std::sync::Arc<Self>) -> io::Result<()> {
        self.zero_in_background_held_by(self.clone())
    }

    /// [`Arena::zero_in_background`], with the thread holding `owner`,
    /// which must keep this arena's mapping alive (an `Arc` of it, or of
    /// what holds it).
    pub(crate) fn zero_in_background_held_by<T: Send + 'static>(&self, owner: T) -> io::Result<()> {
        let base = self.mapping.base() as usize;
        prefault::zero_in_background(base, self.mapping.size(), owner).map(drop)
    }

    /// Whether `[offset, offset + len)` lies inside the arena.
    pub fn contains_range(&self, offset: u64, len: u64) -> bool {
        self.mapping.contains_range(offset, len)
    }
}

fn create_memfd(hugepages: bool) -> io::Result<File> {
    use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
    const NAME: &CStr = c"hprm-store-arena";
    let mut flags = MemFdCreateFlag::MFD_CLOEXEC;
    if hugepages {
        flags |= MemFdCreateFlag::MFD_HUGETLB;
    }
    let fd = memfd_create(NAME, flags)?;
    Ok(File::from(fd))
}

fn check_room_in_dir(dir: &Path, size: u64, place: &str) -> Result<(), ArenaError> {
    let vfs = nix::sys::statvfs::statvfs(dir)
        .map_err(|errno| ArenaError::Create { place: place.to_owned(), source: errno.into() })?;
    let available = vfs.blocks_available() as u64 * vfs.fragment_size() as u64;
    if available < size {
        return Err(ArenaError::NotEnoughRoom {
            requested: ByteSize(size),
            available: ByteSize(available),
            place: place.to_owned(),
        });
    }
    Ok(())
}

/// A memfd is charged to RAM (or swap); refusing sizes beyond what is
/// available avoids an fallocate that would wake the OOM killer.
fn check_room_in_memory(size: u64, place: &str) -> Result<(), ArenaError> {
    let Ok(meminfo) = std::fs::read_to_string("/proc/meminfo") else { return Ok(()) };
    let available_kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    match available_kib {
        Some(kib) if kib.saturating_mul(1024) < size => Err(ArenaError::NotEnoughRoom {
            requested: ByteSize(size),
            available: ByteSize(kib * 1024),
            place: place.to_owned(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_arena_is_shared_between_mappings() {
        let a = Arena::create(&ArenaOptions { size: 1 << 20, dir: None, hugepages: false, populate: true }).unwrap();
        let fd = a.fd().try_clone_to_owned().unwrap();
        let b = Arena::map_fd(fd, a.size(), false).unwrap();
        unsafe {
            *a.ptr_at(4096) = 42;
            assert_eq!(*b.ptr_at(4096), 42);
        }
    }

    /// This thread's minor page faults so far.
    fn minor_faults() -> i64 {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `usage` is valid for getrusage to write.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) }, 0);
        // SAFETY: initialised by the successful call.
        unsafe { usage.assume_init() }.ru_minflt
    }

    /// A second process's view, as a client has it: pages another mapping
    /// wrote are resident, but writing them through this mapping faults
    /// page by page unless they were pre-faulted for writing.
    #[test]
    fn prefaulted_pages_take_no_faults_on_write() {
        const LEN: usize = 4 << 20;
        let a = Arena::create(&ArenaOptions { size: 2 * LEN as u64, dir: None, hugepages: false, populate: false })
            .unwrap();
        // SAFETY: the whole arena is this test's.
        unsafe { std::ptr::write_bytes(a.ptr_at(0), 1, 2 * LEN) };
        let b = Arena::map_fd(a.fd().try_clone_to_owned().unwrap(), a.size(), false).unwrap();
        let write = |offset: u64| {
            let before = minor_faults();
            // SAFETY: as above.
            unsafe { std::ptr::write_bytes(b.ptr_at(offset), 2, LEN) };
            minor_faults() - before
        };
        // Not pre-faulted: one fault a page (what shows that this test can fail).
        let cold = write(0);
        if cold < (LEN / 4096) as i64 / 2 {
            eprintln!(
                "{cold} faults writing {LEN} bytes of a fresh mapping: this kernel maps large folios, nothing to check"
            );
            return;
        }
        b.prefault_for_write(LEN as u64, LEN as u64);
        if !b.prefault.enabled() {
            eprintln!("MADV_POPULATE_WRITE unsupported here (Linux < 5.14): nothing to check");
            return;
        }
        let warm = write(LEN as u64);
        assert!(warm < 16, "{warm} faults writing {LEN} pre-faulted bytes ({cold} without)");
    }

    /// The daemon zeroes the arena while clients use it: that must never
    /// change a byte a client wrote.
    #[test]
    fn zeroing_in_the_background_keeps_what_clients_wrote() {
        const SIZE: u64 = 8 << 20;
        let a = std::sync::Arc::new(
            Arena::create(&ArenaOptions { size: SIZE, dir: None, hugepages: false, populate: false }).unwrap(),
        );
        let client = Arena::map_fd(a.fd().try_clone_to_owned().unwrap(), SIZE, false).unwrap();
        let pattern = |i: u64| (i % 251) as u8 + 1;
        for offset in (0..SIZE).step_by(4096 * 3) {
            // SAFETY: in bounds; the arena is this test's.
            unsafe { *client.ptr_at(offset) = pattern(offset) };
        }
        let base = a.mapping.base() as usize;
        crate::prefault::zero_in_background(base, SIZE, a.clone()).unwrap().join().unwrap();
        for offset in (0..SIZE).step_by(4096) {
            let want = if offset % (4096 * 3) == 0 { pattern(offset) } else { 0 };
            // SAFETY: as above.
            assert_eq!(unsafe { *a.ptr_at(offset) }, want, "byte at {offset} through the daemon's mapping");
            assert_eq!(unsafe { *client.ptr_at(offset) }, want, "byte at {offset} through the client's mapping");
        }
    }

    #[test]
    fn dir_arena_leaves_no_name() {
        let dir = tempfile::tempdir().unwrap();
        let _a = Arena::create(&ArenaOptions {
            size: 1 << 20,
            dir: Some(dir.path().into()),
            hugepages: false,
            populate: false,
        })
        .unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn refuses_more_than_the_directory_holds() {
        let dir = tempfile::tempdir().unwrap();
        let err = Arena::create(&ArenaOptions {
            size: u64::MAX / 2,
            dir: Some(dir.path().into()),
            hugepages: false,
            populate: false,
        })
        .unwrap_err();
        assert!(matches!(err, ArenaError::NotEnoughRoom { .. }), "{err}");
        assert!(err.to_string().contains("--memory"));
    }

    #[test]
    fn refuses_a_mismatched_descriptor() {
        let a = Arena::create(&ArenaOptions { size: 1 << 16, dir: None, hugepages: false, populate: false }).unwrap();
        let fd = a.fd().try_clone_to_owned().unwrap();
        assert!(matches!(Arena::map_fd(fd, 1 << 20, false), Err(ArenaError::SizeMismatch { .. })));
    }
}
