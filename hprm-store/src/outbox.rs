//! The outbox: each client's queue of one-way requests, in shared memory.
//!
//! Seal, redeliver, claim, release, abort and publish need no reply, and a
//! client sends one or more of them for every message it passes on. Over
//! the socket each would wake the daemon: on a virtualised machine that
//! wake-up (tens of microseconds) costs more than everything else a zero-copy
//! send does. So the client appends them to its outbox instead, a
//! single-producer single-consumer byte ring the daemon makes per
//! connection and hands over with the arena, and the daemon reads it when
//! what the posts carry can matter to anyone:
//!
//! - before it handles any frame from any client (so a claim, get, create
//!   or stats request sees every post made before it was sent: a receiver
//!   learns of an object only after its producer's seal was posted);
//! - when someone waits for what a post may bring (a get or claim of an
//!   unsealed object, a create waiting for space, a subscriber): the daemon
//!   then sets the outbox's *wake word*, and a client that finds it set
//!   after posting sends a `Flush` over the socket;
//! - on its expiry tick, and when the client disconnects (before the
//!   table cleans up after it).
//!
//! **Order.** Per client, requests take effect in the order they were sent,
//! whichever way each went: every entry records how many socket frames the
//! client had sent before it (`after`), and the daemon takes an entry only
//! once it has handled that many of the client's frames; it reads the
//! outbox before handling each frame. A client that finds its outbox full
//! simply sends over the socket.
//!
//! **Wake-ups.** The wake word and the ring's tail are a Dekker pair: the
//! daemon stores the word, then reads the outbox again; the client stores
//! the tail, then reads the word (both with a SeqCst fence between). So
//! either the daemon sees the post or the client sees the word.
//!
//! **Trust.** The daemon creates the memory (a sealed memfd: the client can
//! neither shrink nor grow it, so reading it never faults) and copies each
//! entry out before validating and decoding it, as it would a socket frame;
//! an outbox whose indices or entries make no sense closes that client's
//! connection with an error, as a malformed frame does.
//!
//! Layout (all integers little-endian, at the offsets below):
//!
//! ```text
//! 0       u64  tail: bytes ever appended (written by the client)
//! 64      u64  head: bytes ever taken (written by the daemon)
//! 128     u32  wake: 1 while the daemon wants a Flush after each post
//! 4096    ring of `capacity` bytes (a power of two), entries at 8-byte
//!         boundaries, wrapping at the end:
//!           u32 frame length, u32 reserved (0), u64 after, frame, padding
//! ```

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::protocol::frame::{HEADER_LEN, MAX_REQUEST_BODY};

/// The control words at the start of the mapping (the layout above), each
/// on its own cache line: the client writes `tail`, the daemon `head` and
/// `wake`, and a line written by one side is never the other's to write.
#[repr(C, align(64))]
struct Control {
    tail: AtomicU64,
    _tail_line: [u8; 56],
    head: AtomicU64,
    _head_line: [u8; 56],
    wake: AtomicU32,
}

// The layout is a contract between processes (client and daemon may be
// different builds): these offsets are the ones the module docs give.
const _: () = {
    assert!(std::mem::offset_of!(Control, tail) == 0);
    assert!(std::mem::offset_of!(Control, head) == 64);
    assert!(std::mem::offset_of!(Control, wake) == 128);
    assert!(std::mem::size_of::<Control>() as u64 <= RING);
};

/// Offset of the ring: one page of control words before it.
pub const RING: u64 = 4096;
const ENTRY_HEADER: u64 = 16;

/// Default ring size of a connection's outbox (`hprm-store --outbox`).
pub const DEFAULT_CAPACITY: u64 = 64 << 10;

/// Smallest and largest ring sizes the daemon makes and a client accepts.
pub const MIN_CAPACITY: u64 = 4 << 10;
pub const MAX_CAPACITY: u64 = 16 << 20;

/// Bytes an entry for a frame of `len` bytes takes in the ring.
fn entry_len(len: u64) -> u64 {
    (ENTRY_HEADER + len).next_multiple_of(8)
}

/// Why an outbox cannot be made or mapped, or what is wrong with one.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error("an outbox of {0} bytes is not a power of two between {MIN_CAPACITY} and {MAX_CAPACITY}")]
    BadCapacity(u64),
    #[error("cannot make the outbox: {0}")]
    Create(io::Error),
    #[error("cannot map the outbox: {0}")]
    Map(io::Error),
    #[error("the outbox descriptor holds {actual} bytes but the daemon announced a ring of {announced}; the daemon and client disagree, restart the client")]
    SizeMismatch { actual: u64, announced: u64 },
    /// The client broke the layout: its connection is closed.
    #[error("malformed outbox: {0}")]
    Corrupt(String),
}

/// An atomic word of the control block, as the protocol uses it.
pub trait Word<T> {
    fn load(&self, order: Ordering) -> T;
    fn store(&self, value: T, order: Ordering);
}

impl Word<u64> for AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    #[inline(always)]
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
}

impl Word<u32> for AtomicU32 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u32 {
        AtomicU32::load(self, order)
    }
    #[inline(always)]
    fn store(&self, value: u32, order: Ordering) {
        AtomicU32::store(self, value, order)
    }
}

/// Where an outbox's control words and ring bytes live: [`Mapped`], the
/// memfd mapping the daemon and a client share (every real outbox), or,
/// under `--cfg loom`, the tests' `loom_model::Heap`: heap memory whose
/// atomics and bytes the loom model checker tracks
/// (docs/src/reliability.md). A type parameter, not a trait object: each
/// is compiled on its own, and [`Mapped`]'s code is what it was before the
/// parameter existed.
pub trait Memory {
    type U64: Word<u64>;
    type U32: Word<u32>;
    fn tail(&self) -> &Self::U64;
    fn head(&self) -> &Self::U64;
    fn wake(&self) -> &Self::U32;
    /// A sequentially consistent fence (the Dekker pair's).
    fn fence_seq_cst(&self);
    /// Copies `src` into the ring at byte `at`.
    ///
    /// # Safety
    /// `at + src.len() <= capacity`, and the caller owns those bytes.
    unsafe fn copy_in(&self, at: usize, src: &[u8]);
    /// Copies the ring's bytes at `at` into `dst`.
    ///
    /// # Safety
    /// `at + dst.len() <= capacity`.
    unsafe fn copy_out(&self, at: usize, dst: &mut [u8]);
}

/// The shared mapping of a real outbox (the layout above).
pub struct Mapped {
    map: MmapRaw,
    file: File,
}

// SAFETY: only raw pointers into the mapping are handed out; the protocol
// (one writer of the ring's free space and the tail, one of the head and the
// wake word) decides who touches which bytes.
unsafe impl Send for Mapped {}
unsafe impl Sync for Mapped {}

impl Mapped {
    fn map(file: File, capacity: u64) -> Result<Mapped, OutboxError> {
        check_capacity(capacity)?;
        let map = MmapOptions::new().len((RING + capacity) as usize).map_raw(&file).map_err(OutboxError::Map)?;
        Ok(Mapped { map, file })
    }

    #[inline(always)]
    fn control(&self) -> &Control {
        // SAFETY: the mapping is page-aligned (so aligned for `Control`)
        // and at least RING >= size_of::<Control>() bytes long; it lives as
        // long as `self`. Every field is an atomic or padding, so the other
        // process writing it concurrently is no data race.
        unsafe { &*(self.map.as_mut_ptr() as *const Control) }
    }
}

impl Memory for Mapped {
    type U64 = AtomicU64;
    type U32 = AtomicU32;
    #[inline(always)]
    fn tail(&self) -> &AtomicU64 {
        &self.control().tail
    }
    #[inline(always)]
    fn head(&self) -> &AtomicU64 {
        &self.control().head
    }
    #[inline(always)]
    fn wake(&self) -> &AtomicU32 {
        &self.control().wake
    }
    #[inline(always)]
    fn fence_seq_cst(&self) {
        fence(Ordering::SeqCst);
    }
    #[inline(always)]
    unsafe fn copy_in(&self, at: usize, src: &[u8]) {
        // SAFETY: inside the ring (the caller's contract), which starts at
        // RING in a mapping of RING + capacity bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.map.as_mut_ptr().add(RING as usize + at), src.len()) }
    }
    #[inline(always)]
    unsafe fn copy_out(&self, at: usize, dst: &mut [u8]) {
        // SAFETY: as in `copy_in`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.map.as_mut_ptr().add(RING as usize + at), dst.as_mut_ptr(), dst.len())
        }
    }
}

/// An outbox's memory and its ring's size.
struct Ring<M> {
    mem: M,
    capacity: u64,
}

impl<M: Memory> Ring<M> {
    /// Copies `buf.len()` bytes into the ring at position `pos` (taken
    /// modulo the capacity), wrapping at the end.
    ///
    /// # Safety
    /// The caller owns those bytes of the ring (free space, for the writer).
    #[inline(always)]
    unsafe fn write_at(&self, pos: u64, buf: &[u8]) {
        let at = pos % self.capacity;
        let first = buf.len().min((self.capacity - at) as usize);
        // SAFETY: both parts lie inside the ring (at < capacity, first <=
        // capacity - at, and the rest <= at since len <= capacity).
        unsafe {
            self.mem.copy_in(at as usize, &buf[..first]);
            self.mem.copy_in(0, &buf[first..]);
        }
    }

    /// Copies bytes out of the ring at `pos` into `buf`, wrapping.
    ///
    /// # Safety
    /// `buf.len() <= capacity`. The bytes may be changed concurrently by a
    /// misbehaving client; the copy is what gets validated.
    #[inline(always)]
    unsafe fn read_at(&self, pos: u64, buf: &mut [u8]) {
        let at = pos % self.capacity;
        let first = buf.len().min((self.capacity - at) as usize);
        let (front, back) = buf.split_at_mut(first);
        // SAFETY: as in `write_at`.
        unsafe {
            self.mem.copy_out(at as usize, front);
            self.mem.copy_out(0, back);
        }
    }
}

/// Whether a ring of `capacity` bytes may be made (`hprm-store --outbox`).
pub fn check_capacity(capacity: u64) -> Result<(), OutboxError> {
    if capacity.is_power_of_two() && (MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
        Ok(())
    } else {
        Err(OutboxError::BadCapacity(capacity))
    }
}

/// The client's end: appends entries and reads the wake word. Not
/// thread-safe by itself: the connection holds it under the lock that also
/// orders its socket writes (the `after` of an entry must count every frame
/// sent before it).
pub struct OutboxWriter<M = Mapped> {
    ring: Ring<M>,
    /// Our copy of the tail (only we write it).
    tail: u64,
}

impl OutboxWriter<Mapped> {
    /// Maps the outbox the daemon handed over with its Hello.
    pub fn map(fd: OwnedFd, capacity: u64) -> Result<OutboxWriter, OutboxError> {
        let file = File::from(fd);
        let actual = file.metadata().map_err(OutboxError::Map)?.len();
        if actual != RING + capacity {
            return Err(OutboxError::SizeMismatch { actual, announced: capacity });
        }
        let ring = Ring { mem: Mapped::map(file, capacity)?, capacity };
        let tail = ring.mem.tail().load(Ordering::Relaxed);
        Ok(OutboxWriter { ring, tail })
    }
}

impl<M: Memory> OutboxWriter<M> {
    /// Appends `frame` (one encoded request frame), sent after `after`
    /// socket frames. False if it does not fit now: send it over the
    /// socket instead.
    pub fn push(&mut self, after: u64, frame: &[u8]) -> bool {
        let need = entry_len(frame.len() as u64);
        let head = self.ring.mem.head().load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > self.ring.capacity || need > self.ring.capacity - used {
            return false;
        }
        let mut header = [0u8; ENTRY_HEADER as usize];
        header[..4].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        header[8..].copy_from_slice(&after.to_le_bytes());
        // SAFETY: [tail, tail + need) is free space (checked above), which
        // only the writer touches until the tail is published.
        unsafe {
            self.ring.write_at(self.tail, &header);
            self.ring.write_at(self.tail + ENTRY_HEADER, frame);
        }
        self.tail += need;
        self.ring.mem.tail().store(self.tail, Ordering::Release);
        true
    }

    /// Whether the daemon wants a `Flush` now. Call after the pushes.
    pub fn wake_wanted(&self) -> bool {
        // The client's half of the Dekker pair (module docs): the tail
        // store above must be ordered before this load.
        self.ring.mem.fence_seq_cst();
        self.ring.mem.wake().load(Ordering::Relaxed) != 0
    }
}

/// The daemon's end: owns the memory, takes entries, sets the wake word.
pub struct OutboxReader<M = Mapped> {
    ring: Ring<M>,
    /// Our copy of the head (only we write it).
    head: u64,
    wake: bool,
}

impl OutboxReader<Mapped> {
    /// Makes an outbox with a ring of `capacity` bytes: an anonymous memfd
    /// sealed at its size.
    pub fn create(capacity: u64) -> Result<OutboxReader, OutboxError> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
        const NAME: &CStr = c"hprm-store-outbox";
        check_capacity(capacity)?;
        let create = |e: nix::errno::Errno| OutboxError::Create(e.into());
        let fd =
            memfd_create(NAME, MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING).map_err(create)?;
        let file = File::from(fd);
        file.set_len(RING + capacity).map_err(OutboxError::Create)?;
        // Sealed against shrinking, so that no client can make the daemon's
        // reads of it fault.
        let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
        fcntl(file.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals)).map_err(create)?;
        let ring = Ring { mem: Mapped::map(file, capacity)?, capacity };
        Ok(OutboxReader { ring, head: 0, wake: false })
    }

    /// The descriptor to hand to the client.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ring.mem.file.as_fd()
    }
}

impl<M: Memory> OutboxReader<M> {
    /// Ring bytes, as announced in the Hello.
    pub fn capacity(&self) -> u64 {
        self.ring.capacity
    }

    /// Whether the client has appended anything not taken yet.
    pub fn has_entries(&self) -> bool {
        self.ring.mem.tail().load(Ordering::Acquire) != self.head
    }

    /// The client's append position: every entry it has posted so far
    /// lies before it. Positions only grow.
    pub fn written(&self) -> u64 {
        self.ring.mem.tail().load(Ordering::Acquire)
    }

    /// Whether every entry before `position` (an earlier
    /// [`OutboxReader::written`]) has been taken.
    pub fn taken_past(&self, position: u64) -> bool {
        // Positions are byte counts that never come near 2^63 apart.
        self.head.wrapping_sub(position) as i64 >= 0
    }

    /// Takes the next entry into `frame` (cleared first) if there is one
    /// and it was sent after no more than `handled` socket frames of the
    /// client. Ok(false): nothing to take now.
    pub fn take(&mut self, handled: u64, frame: &mut Vec<u8>) -> Result<bool, OutboxError> {
        let tail = self.ring.mem.tail().load(Ordering::Acquire);
        let avail = tail.wrapping_sub(self.head);
        if avail == 0 {
            return Ok(false);
        }
        let corrupt = |what: String| Err(OutboxError::Corrupt(what));
        if avail > self.ring.capacity || avail % 8 != 0 || avail < ENTRY_HEADER {
            return corrupt(format!(
                "the tail ({tail}) is {avail} bytes past the head ({}) in a ring of {}",
                self.head, self.ring.capacity
            ));
        }
        let mut header = [0u8; ENTRY_HEADER as usize];
        // SAFETY: 16 <= capacity.
        unsafe { self.ring.read_at(self.head, &mut header) };
        let len = u64::from(u32::from_le_bytes(header[..4].try_into().expect("4 bytes")));
        let reserved = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        let after = u64::from_le_bytes(header[8..].try_into().expect("8 bytes"));
        if reserved != 0 {
            return corrupt(format!("entry at {} has reserved bits set ({reserved:#x})", self.head));
        }
        if len < HEADER_LEN as u64 || len > (HEADER_LEN + MAX_REQUEST_BODY) as u64 || entry_len(len) > avail {
            return corrupt(format!(
                "entry at {} claims a frame of {len} bytes with {avail} bytes in the ring",
                self.head
            ));
        }
        if after > handled {
            return Ok(false);
        }
        frame.clear();
        frame.resize(len as usize, 0);
        // SAFETY: len <= avail <= capacity.
        unsafe { self.ring.read_at(self.head + ENTRY_HEADER, frame) };
        self.head += entry_len(len);
        self.ring.mem.head().store(self.head, Ordering::Release);
        Ok(true)
    }

    /// Sets or clears the wake word. Setting it returns true: the caller
    /// must then read the outbox again (the daemon's half of the Dekker
    /// pair in the module docs).
    pub fn set_wake(&mut self, on: bool) -> bool {
        if self.wake == on {
            return false;
        }
        self.wake = on;
        self.ring.mem.wake().store(u32::from(on), Ordering::Relaxed);
        self.ring.mem.fence_seq_cst();
        on
    }
}

/// The outbox over heap memory that the loom model checker tracks (its
/// atomics, and each ring byte as a loom cell, so that a read of a byte
/// the other side may be writing is reported as a data race): built under
/// `--cfg loom` only, for the models in `outbox_loom` below.
#[cfg(all(test, loom))]
mod loom_model {
    use super::{Memory, OutboxReader, OutboxWriter, Ring, Word};
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    use loom::sync::Arc;

    struct Shared {
        tail: AtomicU64,
        head: AtomicU64,
        wake: AtomicU32,
        bytes: Box<[UnsafeCell<u8>]>,
    }

    // SAFETY: as for `Mapped`: the protocol decides who touches which
    // bytes, and here loom checks that it does.
    unsafe impl Send for Shared {}
    unsafe impl Sync for Shared {}

    /// One outbox's memory, shared by its two ends.
    pub struct Heap(Arc<Shared>);

    impl Word<u64> for AtomicU64 {
        fn load(&self, order: Ordering) -> u64 {
            AtomicU64::load(self, order)
        }
        fn store(&self, value: u64, order: Ordering) {
            AtomicU64::store(self, value, order)
        }
    }

    impl Word<u32> for AtomicU32 {
        fn load(&self, order: Ordering) -> u32 {
            AtomicU32::load(self, order)
        }
        fn store(&self, value: u32, order: Ordering) {
            AtomicU32::store(self, value, order)
        }
    }

    impl Memory for Heap {
        type U64 = AtomicU64;
        type U32 = AtomicU32;
        fn tail(&self) -> &AtomicU64 {
            &self.0.tail
        }
        fn head(&self) -> &AtomicU64 {
            &self.0.head
        }
        fn wake(&self) -> &AtomicU32 {
            &self.0.wake
        }
        fn fence_seq_cst(&self) {
            loom::sync::atomic::fence(Ordering::SeqCst);
        }
        unsafe fn copy_in(&self, at: usize, src: &[u8]) {
            for (cell, &b) in self.0.bytes[at..at + src.len()].iter().zip(src) {
                // SAFETY: loom checks that no other access races with it.
                cell.with_mut(|p| unsafe { *p = b });
            }
        }
        unsafe fn copy_out(&self, at: usize, dst: &mut [u8]) {
            for (cell, d) in self.0.bytes[at..at + dst.len()].iter().zip(dst) {
                // SAFETY: as in `copy_in`.
                *d = cell.with(|p| unsafe { *p });
            }
        }
    }

    /// The daemon's and the client's ends of one outbox with a ring of
    /// `capacity` bytes, a power of two of at least 32 (smaller than a real
    /// one's, so that a few entries wrap around).
    pub fn pair(capacity: u64) -> (OutboxReader<Heap>, OutboxWriter<Heap>) {
        assert!(capacity.is_power_of_two() && capacity >= 32);
        let shared = Arc::new(Shared {
            tail: AtomicU64::new(0),
            head: AtomicU64::new(0),
            wake: AtomicU32::new(0),
            bytes: (0..capacity).map(|_| UnsafeCell::new(0)).collect(),
        });
        let reader = OutboxReader { ring: Ring { mem: Heap(shared.clone()), capacity }, head: 0, wake: false };
        let writer = OutboxWriter { ring: Ring { mem: Heap(shared), capacity }, tail: 0 };
        (reader, writer)
    }
}

/// Models of the outbox protocol (module docs) under every interleaving
/// and every reordering the memory orderings allow (loom):
/// `scripts/loom.sh outbox_loom` (docs/src/reliability.md).
#[cfg(all(test, loom))]
mod outbox_loom {
    use super::loom_model::pair;
    use super::HEADER_LEN;
    use loom::thread;

    fn frame(len: usize, fill: u8) -> Vec<u8> {
        vec![fill; len]
    }

    /// One writer, one reader, a 64-byte ring and entries of 24, 32 and 24
    /// bytes: the third lies across the end of the ring (its header split)
    /// and fits only once the reader has taken the first. The reader gets
    /// every frame whole, in order, and no byte is read while written.
    #[test]
    fn entries_cross_the_wrap_whole_and_in_order() {
        loom::model(|| {
            let (mut reader, mut writer) = pair(64);
            let frames = [frame(HEADER_LEN, 1), frame(2 * HEADER_LEN, 2), frame(HEADER_LEN, 3)];
            let sent = frames.clone();
            let client = thread::spawn(move || {
                for f in &sent {
                    while !writer.push(0, f) {
                        thread::yield_now();
                    }
                }
            });
            let mut out = Vec::new();
            for f in &frames {
                while !reader.take(0, &mut out).expect("a well-formed outbox") {
                    thread::yield_now();
                }
                assert_eq!(&out, f);
            }
            client.join().expect("the client");
            assert!(!reader.has_entries());
        });
    }

    /// The wake word and the tail are a Dekker pair: when the daemon sets
    /// the word while the client posts, the daemon's second read sees the
    /// post or the client sees the word (or both): a post is never left
    /// unnoticed with nobody sending a Flush.
    #[test]
    fn the_wake_word_or_the_post_is_seen() {
        loom::model(|| {
            let (mut reader, mut writer) = pair(64);
            let client = thread::spawn(move || {
                assert!(writer.push(0, &frame(HEADER_LEN, 9)));
                writer.wake_wanted()
            });
            assert!(reader.set_wake(true), "setting the word asks for a second read");
            let post_seen = reader.has_entries();
            let flush_sent = client.join().expect("the client");
            assert!(post_seen || flush_sent, "a post that neither side noticed");
        });
    }

    /// An entry posted after socket frames the daemon has not handled yet
    /// stays in the ring until it has, whatever the interleaving.
    #[test]
    fn an_entry_waits_for_the_frames_sent_before_it() {
        loom::model(|| {
            let (mut reader, mut writer) = pair(32);
            let client = thread::spawn(move || assert!(writer.push(1, &frame(HEADER_LEN, 5))));
            let mut out = Vec::new();
            assert!(!reader.take(0, &mut out).expect("a well-formed outbox"));
            client.join().expect("the client");
            assert!(!reader.take(0, &mut out).expect("a well-formed outbox"));
            assert!(reader.take(1, &mut out).expect("a well-formed outbox"));
            assert_eq!(out, frame(HEADER_LEN, 5));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(capacity: u64) -> (OutboxReader, OutboxWriter) {
        let r = OutboxReader::create(capacity).unwrap();
        let w = OutboxWriter::map(r.fd().try_clone_to_owned().unwrap(), capacity).unwrap();
        (r, w)
    }

    fn frame(n: usize, fill: u8) -> Vec<u8> {
        vec![fill; n.max(HEADER_LEN)]
    }

    #[test]
    fn entries_come_out_in_order_across_the_wrap() {
        let (mut r, mut w) = pair(MIN_CAPACITY);
        let mut out = Vec::new();
        // 300 entries of odd sizes through a 4 KiB ring: wraps many times.
        for i in 0..300u64 {
            let f = frame(9 + (i as usize * 37) % 700, i as u8);
            assert!(w.push(i, &f));
            assert!(r.take(i, &mut out).unwrap());
            assert_eq!(out, f);
            assert!(!r.take(i, &mut out).unwrap());
        }
    }

    #[test]
    fn a_full_ring_refuses_until_the_daemon_takes() {
        let (mut r, mut w) = pair(MIN_CAPACITY);
        let f = frame(1000, 7);
        let mut pushed = 0;
        while w.push(0, &f) {
            pushed += 1;
        }
        assert_eq!(pushed, MIN_CAPACITY / entry_len(1000));
        let mut out = Vec::new();
        assert!(r.take(0, &mut out).unwrap());
        assert!(w.push(0, &f));
        assert!(!w.push(0, &frame(MIN_CAPACITY as usize, 1)), "larger than the ring");
    }

    #[test]
    fn an_entry_waits_for_the_socket_frames_sent_before_it() {
        let (mut r, mut w) = pair(MIN_CAPACITY);
        let mut out = Vec::new();
        assert!(w.push(3, &frame(20, 1)));
        assert!(!r.take(2, &mut out).unwrap());
        assert!(r.has_entries());
        assert!(r.take(3, &mut out).unwrap());
        assert!(!r.has_entries());
    }

    #[test]
    fn the_wake_word_reaches_the_client() {
        let (mut r, w) = pair(MIN_CAPACITY);
        assert!(!w.wake_wanted());
        assert!(r.set_wake(true));
        assert!(!r.set_wake(true), "unchanged: no second read needed");
        assert!(w.wake_wanted());
        assert!(!r.set_wake(false));
        assert!(!w.wake_wanted());
    }

    #[test]
    fn nonsense_from_the_client_is_an_error() {
        let (mut r, w) = pair(MIN_CAPACITY);
        let mut out = Vec::new();
        // A tail beyond the ring.
        w.ring.mem.tail().store(MIN_CAPACITY + 8, Ordering::Release);
        assert!(matches!(r.take(u64::MAX, &mut out), Err(OutboxError::Corrupt(_))));
        // A length beyond what was appended.
        let (mut r, mut w) = pair(MIN_CAPACITY);
        assert!(w.push(0, &frame(16, 0)));
        unsafe { w.ring.write_at(0, &4000u32.to_le_bytes()) };
        let err = r.take(0, &mut out).unwrap_err();
        assert!(err.to_string().contains("claims a frame of 4000 bytes"), "{err}");
        // Reserved bits.
        let (mut r, mut w) = pair(MIN_CAPACITY);
        assert!(w.push(0, &frame(16, 0)));
        unsafe { w.ring.write_at(4, &1u32.to_le_bytes()) };
        assert!(matches!(r.take(0, &mut out), Err(OutboxError::Corrupt(_))));
    }

    #[test]
    fn the_client_cannot_shrink_the_memory() {
        let r = OutboxReader::create(MIN_CAPACITY).unwrap();
        let f = File::from(r.fd().try_clone_to_owned().unwrap());
        assert!(f.set_len(0).is_err());
    }

    #[test]
    fn capacities_are_checked() {
        assert!(matches!(OutboxReader::create(5000), Err(OutboxError::BadCapacity(5000))));
        let r = OutboxReader::create(MIN_CAPACITY).unwrap();
        let fd = r.fd().try_clone_to_owned().unwrap();
        assert!(matches!(OutboxWriter::map(fd, 2 * MIN_CAPACITY), Err(OutboxError::SizeMismatch { .. })));
    }
}
