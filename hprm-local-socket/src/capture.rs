//! Saving what a daemon reads, to seed the fuzzers with real traffic.
//!
//! Why: the fuzz targets (`hprm-fuzz`, `fuzz/`) start from seeds, and
//! seeds that the real encoders write one message at a time miss what real
//! programs send: sessions of many messages, in the order and mix a real
//! federate or store client produces, split across reads as the kernel
//! split them. With `HPRM_FUZZ_CAPTURE=DIR` in its environment, a daemon
//! saves the bytes it reads from its peers under `DIR`; `fuzz/capture.sh`
//! runs real programs so, and `hprm-fuzz`'s `seeds --captured DIR` turns
//! the files into inputs of the fuzz targets (`fuzz/corpus/<target>/`).
//!
//! Off unless the variable is set (and not empty): it is read once per
//! process, and a connection that captures nothing holds `None`, so the
//! cost on each read is one branch.
//!
//! Layout: `DIR/<target>/<hash>`, where `<target>` names the fuzz target
//! whose decoder reads such bytes (`rti_frames`: the byte stream an RTI
//! connection received; `store_frames`: the request frames a store
//! connection sent, over its socket or through its outbox;
//! `store_handshake`: the store's greeting frame) and `<hash>` is the
//! first 20 bytes of the content's SHA-256, in hex: a rerun that sees the
//! same bytes writes the same file once.
//!
//! Bounds: a [`Stream`] keeps the first [`MAX_STREAM_BYTES`] of its
//! connection (one file, rewritten as it grows); a process writes at most
//! [`MAX_FILES`] files per target.
//! Each file is written to a temporary name in the same folder and then
//! renamed, so a reader never sees half of one. A failure to write is
//! logged once per process (a warning) and otherwise ignored: capturing
//! never changes what the daemon does.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use sha2::{Digest, Sha256};

/// The environment variable naming the capture folder.
pub const VAR: &str = "HPRM_FUZZ_CAPTURE";

/// How many bytes of a connection a [`Stream`] keeps: enough for a
/// session's handshake and its first exchanges, small enough for a fuzz
/// input.
pub const MAX_STREAM_BYTES: usize = 64 << 10;

/// How many files one process writes per target at most.
pub const MAX_FILES: usize = 256;

/// The capture folder, if capturing is on: read from [`VAR`] once.
fn folder() -> Option<&'static Path> {
    static FOLDER: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOLDER.get_or_init(|| std::env::var_os(VAR).filter(|v| !v.is_empty()).map(PathBuf::from)).as_deref()
}

/// Whether this process captures ([`VAR`] is set).
pub fn enabled() -> bool {
    folder().is_some()
}

/// The bytes one connection read, kept up to [`MAX_STREAM_BYTES`] and
/// saved as one file of `target`: when the stream is dropped (the
/// connection ended), and along the way each time it doubled from 4 KiB,
/// replacing the file saved before, so that a daemon killed without
/// dropping its connections (the launcher kills the store) leaves most
/// of each.
#[derive(Debug)]
pub struct Stream {
    target: &'static str,
    bytes: Vec<u8>,
    /// The length at which to save along the way.
    next_save: usize,
    /// The file saved last, and how many bytes it held.
    saved: Option<(PathBuf, usize)>,
}

impl Stream {
    /// A stream of `target` if capturing is on; `None` (nothing to do on
    /// each read) if not.
    pub fn start(target: &'static str) -> Option<Stream> {
        enabled().then(|| Stream::new(target))
    }

    fn new(target: &'static str) -> Stream {
        Stream { target, bytes: Vec::new(), next_save: 4 << 10, saved: None }
    }

    /// Keeps `bytes`, the next the connection read, up to the bound.
    pub fn record(&mut self, bytes: &[u8]) {
        let room = MAX_STREAM_BYTES - self.bytes.len();
        if room == 0 {
            return;
        }
        self.bytes.extend_from_slice(&bytes[..bytes.len().min(room)]);
        if self.bytes.len() >= self.next_save {
            self.next_save = 2 * self.bytes.len();
            self.save();
        }
    }

    fn save(&mut self) {
        if self.bytes.is_empty() || self.saved.as_ref().is_some_and(|(_, n)| *n == self.bytes.len()) {
            return;
        }
        let before = self.saved.take();
        // A stream counts as one file against the bound, however often saved.
        let path = if before.is_none() { save(self.target, &self.bytes) } else { resave(self.target, &self.bytes) };
        if let Some(path) = path {
            if let Some((old, _)) = before.filter(|(old, _)| *old != path) {
                let _ = std::fs::remove_file(old);
            }
            self.saved = Some((path, self.bytes.len()));
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.save();
    }
}

/// Saves `bytes` as one file of `target`, if capturing is on and the
/// process has not written [`MAX_FILES`] of them yet; the file's path if
/// it was written.
pub fn save(target: &'static str, bytes: &[u8]) -> Option<PathBuf> {
    folder()?;
    static WRITTEN: Mutex<Option<HashMap<&'static str, usize>>> = Mutex::new(None);
    {
        let mut written = WRITTEN.lock().unwrap_or_else(|e| e.into_inner());
        let n = written.get_or_insert_with(HashMap::new).entry(target).or_insert(0);
        if *n >= MAX_FILES {
            return None;
        }
        *n += 1;
    }
    resave(target, bytes)
}

/// Saves `bytes` as a file of `target` that has been counted already.
fn resave(target: &str, bytes: &[u8]) -> Option<PathBuf> {
    let dir = folder()?;
    match write(&dir.join(target), bytes) {
        Ok(path) => Some(path),
        Err(e) => {
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot save captured bytes ({VAR}); capturing goes on without them");
            }
            None
        }
    }
}

/// The name of a file holding `bytes`: its content hash.
pub fn file_name(bytes: &[u8]) -> String {
    Sha256::digest(bytes)[..20].iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `bytes` to `dir/<hash>` through a temporary file, renamed.
fn write(dir: &Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
    static TEMPORARY: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".tmp-{}-{}", std::process::id(), TEMPORARY.fetch_add(1, Ordering::Relaxed)));
    let written = std::fs::File::create(&tmp).and_then(|mut f| f.write_all(bytes));
    let path = dir.join(file_name(bytes));
    let renamed = written.and_then(|()| std::fs::rename(&tmp, &path));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed.map(|()| path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_keeps_its_first_bytes_up_to_the_bound() {
        let mut s = Stream::new("test");
        s.record(&[1; 1000]);
        assert_eq!(s.bytes.len(), 1000);
        s.record(&vec![2; MAX_STREAM_BYTES]);
        assert_eq!(s.bytes.len(), MAX_STREAM_BYTES);
        s.record(&[3; 10]);
        assert_eq!(s.bytes.len(), MAX_STREAM_BYTES);
        assert!(s.bytes[1000..].iter().all(|b| *b == 2));
    }

    #[test]
    fn files_are_named_by_content() {
        let dir = std::env::temp_dir().join(format!("hprm-capture-test-{}", std::process::id()));
        write(&dir, b"abc").unwrap();
        write(&dir, b"abc").unwrap();
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [std::ffi::OsString::from(file_name(b"abc"))]);
        assert_eq!(std::fs::read(dir.join(file_name(b"abc"))).unwrap(), b"abc");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
