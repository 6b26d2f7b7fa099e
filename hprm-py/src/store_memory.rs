//! Arrays born in the store: a numpy data-memory handler (NEP 49) that
//! allocates the data of large arrays made inside a reaction straight in
//! the shared-memory store, so that sending one costs no copy.
//!
//! A reaction that computes its output (`img = cv2.resize(...)`,
//! `np.stack(...)`, `boxes = model(x)`) makes a fresh private array, and
//! sending a private array takes one copy into the store. Inside a
//! [`Scope`] (every Python reaction runs in one, unless the program says
//! `store_arrays=False`; `Codec.store_memory()` opens one by hand) numpy
//! asks this handler for array memory, and every request of the scope's
//! threshold (the program's out-of-band threshold) or more becomes a store
//! object, written in place by numpy. The codec sends such an array, when
//! the array covers the whole object, by reference
//! ([`seal_for_sending`]), exactly like a received array sent on. Smaller
//! requests, requests outside a scope, and any request the store cannot
//! serve (full, not running) get plain `malloc` memory: this handler never
//! makes an allocation fail that numpy's own would have served.
//!
//! # Ownership of a born allocation
//!
//! Each lives in [`BORN`], keyed by its address, until numpy frees it:
//! - [`Born::Writing`]: never sent. The process owns the unsealed object
//!   (created with one delivery, for the producer's own reference below);
//!   numpy writes it freely. Freed, it is aborted (one-way) and its block
//!   returns to the arena; freed inside a scope, it is first kept as a
//!   spare for the next allocation of its size ([`SPARE`]).
//! - [`Born::Sealed`]: sent at least once. The first send sealed it and
//!   took the producer's reference and announced its receivers, in one
//!   write to the store ([`ObjectMut::seal_and_send`]); every later send
//!   announces its own (`redeliver`, at the end of the encode). From then
//!   on the bytes are immutable, as every sealed object's: the codec marks
//!   the array it sent read-only (`writeable=False`), as received arrays
//!   are. Freed, the reference is released, settling the delivery the
//!   object was created with; the receivers' deliveries keep it pinned
//!   until they release it.
//!
//! numpy frees an array with the handler that allocated it, on whatever
//! thread drops the last reference, in or out of a scope: the registry is
//! global and locked, and nothing here touches Python objects, so the
//! handler is safe on any thread, with or without a GIL. The handler
//! functions never panic (a panic cannot unwind through numpy's C).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hprm_node::payload::StoreLink;
use hprm_store::{CreateOptions, Object, ObjectId, ObjectMut};
use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;

/// An allocation of this process that lies in a store object.
enum Born {
    Writing(ObjectMut),
    Sealed(Arc<Object>),
    /// Its seal failed (the store connection broke): the memory stays
    /// mapped until numpy frees it, but no longer belongs to an object.
    Lost,
}

/// One entry of [`BORN`]: the object and the size numpy asked for.
struct Entry {
    born: Born,
    len: usize,
}

/// Every born allocation alive, by address.
static BORN: Mutex<BTreeMap<usize, Entry>> = Mutex::new(BTreeMap::new());

/// Unsent objects freed inside a scope, kept for the next allocation of
/// the same size (a reaction's temporaries: `a * 2 + b` frees one array of
/// a size it allocates again at once) instead of an abort now and a create
/// round trip then. Emptied (aborted) when the outermost scope of a thread
/// closes, so nothing stays pinned between reactions.
static SPARE: Mutex<Vec<(usize, ObjectMut)>> = Mutex::new(Vec::new());

/// Most objects kept in [`SPARE`].
const MAX_SPARE: usize = 4;

fn spare() -> MutexGuard<'static, Vec<(usize, ObjectMut)>> {
    SPARE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn born() -> MutexGuard<'static, BTreeMap<usize, Entry>> {
    BORN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where large allocations go on this thread while a scope is open.
#[derive(Clone)]
struct Target {
    store: StoreLink,
    threshold: usize,
}

thread_local! {
    static TARGET: RefCell<Option<Target>> = const { RefCell::new(None) };
}

/// Whether a scope is open on this thread.
fn in_scope() -> bool {
    // `try_with`: numpy may free arrays while this thread's locals are
    // being destroyed (thread exit), and a panic cannot cross numpy's C.
    TARGET.try_with(|t| t.try_borrow().map(|t| t.is_some()).unwrap_or(false)).unwrap_or(false)
}

/// A store object for `size` bytes (a spare one of that size if there is
/// one), if this thread is in a scope, the size is at or over its
/// threshold, and the store has room.
fn allocate_in_store(size: usize, zeroed: bool) -> Option<*mut c_void> {
    let target = TARGET.try_with(|t| t.try_borrow().ok().and_then(|t| t.clone())).ok().flatten()?;
    if size == 0 || size < target.threshold {
        return None;
    }
    let client = target.store.client().ok()??;
    let reused = {
        let mut spare = spare();
        let at = spare.iter().position(|(len, o)| *len == size && o.arena_id() == client.arena_id());
        at.map(|i| spare.swap_remove(i).1)
    };
    let mut object = match reused {
        Some(object) => object,
        // One delivery: the producer's own reference, taken at the first
        // send and released when numpy frees the array.
        None => client
            .create_with(
                ObjectId::random(),
                size as u64,
                b"",
                &CreateOptions { deliveries: 1, wait_for_space: Duration::ZERO },
            )
            .ok()?,
    };
    let data = object.data_mut();
    if zeroed {
        data.fill(0);
    }
    let ptr = data.as_mut_ptr();
    born().insert(ptr as usize, Entry { born: Born::Writing(object), len: size });
    Some(ptr.cast())
}

unsafe extern "C" fn handler_malloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    match allocate_in_store(size, false) {
        Some(p) => p,
        // SAFETY: plain libc malloc.
        None => unsafe { libc::malloc(size) },
    }
}

unsafe extern "C" fn handler_calloc(_ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    let Some(size) = nelem.checked_mul(elsize) else { return std::ptr::null_mut() };
    match allocate_in_store(size, true) {
        Some(p) => p,
        // SAFETY: plain libc calloc.
        None => unsafe { libc::calloc(nelem, elsize) },
    }
}

unsafe extern "C" fn handler_realloc(ctx: *mut c_void, ptr: *mut c_void, new_size: usize) -> *mut c_void {
    if ptr.is_null() {
        // SAFETY: as malloc.
        return unsafe { handler_malloc(ctx, new_size) };
    }
    let old = born().get(&(ptr as usize)).map(|e| e.len);
    let Some(old_len) = old else {
        // SAFETY: `ptr` came from this handler and is not born: libc's.
        return unsafe { libc::realloc(ptr, new_size) };
    };
    // SAFETY: as malloc.
    let moved = unsafe { handler_malloc(ctx, new_size) };
    if moved.is_null() {
        return moved;
    }
    // SAFETY: `ptr` holds `old_len` bytes (its entry), `moved` at least
    // `new_size`, and they are distinct allocations.
    unsafe {
        std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), moved.cast::<u8>(), old_len.min(new_size));
        handler_free(ctx, ptr, old_len);
    }
    moved
}

unsafe extern "C" fn handler_free(_ctx: *mut c_void, ptr: *mut c_void, _size: usize) {
    let entry = born().remove(&(ptr as usize));
    match entry {
        Some(Entry { born: Born::Writing(object), len }) if in_scope() => {
            let mut spare = spare();
            if spare.len() < MAX_SPARE {
                spare.push((len, object));
            } else {
                drop(spare);
                drop(object);
            }
        }
        // Dropped outside the lock: an abort or a release, both one-way.
        Some(entry) => drop(entry),
        // SAFETY: `ptr` came from this handler and is not born: libc's.
        None => unsafe { libc::free(ptr) },
    }
}

/// numpy's `PyDataMemAllocator` (version 1).
#[repr(C)]
struct Allocator {
    ctx: usize,
    malloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    calloc: unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void,
    realloc: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void, *mut c_void, usize),
}

/// numpy's `PyDataMem_Handler`.
#[repr(C)]
struct Handler {
    name: [u8; 127],
    version: u8,
    allocator: Allocator,
}

const fn handler_name() -> [u8; 127] {
    let text = b"hprm_store_memory";
    let mut name = [0u8; 127];
    let mut i = 0;
    while i < text.len() {
        name[i] = text[i];
        i += 1;
    }
    name
}

/// Lives for the whole process: every array numpy allocated with it keeps
/// a pointer to it (through the capsule) until freed.
static HANDLER: Handler = Handler {
    name: handler_name(),
    version: 1,
    allocator: Allocator {
        ctx: 0,
        malloc: handler_malloc,
        calloc: handler_calloc,
        realloc: handler_realloc,
        free: handler_free,
    },
};

/// The name numpy requires of a handler capsule.
const CAPSULE_NAME: &CStr = c"mem_handler";

/// numpy's C API entry `PyDataMem_SetHandler` (index 304 of the table,
/// numpy >= 1.22): installs a handler in the current context, returns the
/// previous one (a new reference).
type SetHandler = unsafe extern "C" fn(*mut ffi::PyObject) -> *mut ffi::PyObject;
const SET_HANDLER: usize = 304;

/// numpy's `PyDataMem_SetHandler` and the capsule of [`HANDLER`].
struct Numpy {
    set_handler: SetHandler,
    capsule: Py<PyAny>,
}

static NUMPY: GILOnceCell<Option<Numpy>> = GILOnceCell::new();

/// The handler machinery, or None where numpy lacks it (before 1.22) or
/// is not imported yet: a program that has not imported numpy makes no
/// arrays, and importing it here would put a fraction of a second into
/// whichever reaction runs first.
fn numpy(py: Python<'_>) -> PyResult<Option<&Numpy>> {
    if let Some(numpy) = NUMPY.get(py) {
        return Ok(numpy.as_ref());
    }
    let modules = py.import("sys")?.getattr("modules")?;
    if !modules.contains("numpy")? {
        return Ok(None);
    }
    NUMPY
        .get_or_try_init(py, || {
            let module =
                py.import("numpy._core._multiarray_umath").or_else(|_| py.import("numpy.core._multiarray_umath"))?;
            let version: String = py.import("numpy")?.getattr("__version__")?.extract()?;
            let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            if (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) < (1, 22) {
                return Ok(None);
            }
            let api = module.getattr("_ARRAY_API")?;
            // SAFETY: `_ARRAY_API` is numpy's capsule of its C API table
            // (unnamed); the table is static for the life of the process.
            let table = unsafe { ffi::PyCapsule_GetPointer(api.as_ptr(), std::ptr::null()) } as *const *const c_void;
            if table.is_null() {
                return Err(
                    PyErr::take(py).unwrap_or_else(|| PyRuntimeError::new_err("numpy's _ARRAY_API capsule is empty"))
                );
            }
            // SAFETY: entry 304 of numpy's table (>= 1.22, checked above) is
            // `PyObject *PyDataMem_SetHandler(PyObject *)`.
            let set_handler: SetHandler =
                unsafe { std::mem::transmute::<*const c_void, SetHandler>(*table.add(SET_HANDLER)) };
            // SAFETY: HANDLER is a static that outlives every capsule user;
            // numpy only reads it.
            let capsule = unsafe {
                ffi::PyCapsule_New(
                    std::ptr::addr_of!(HANDLER) as *mut c_void,
                    CAPSULE_NAME.as_ptr() as *const c_char,
                    None,
                )
            };
            // SAFETY: a new reference, or null with an exception set.
            let capsule = unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?.unbind();
            Ok(Some(Numpy { set_handler, capsule }))
        })
        .map(Option::as_ref)
}

/// While alive, numpy on this thread allocates arrays of `threshold` bytes
/// or more in the store. Scopes nest; each restores what it replaced.
pub struct Scope {
    previous_handler: Option<Py<PyAny>>,
    previous_target: Option<Target>,
}

impl Scope {
    /// Opens a scope over `store`: None if there is no store or numpy
    /// cannot take a handler (then arrays are private, as without it).
    pub fn enter(py: Python<'_>, store: &StoreLink, threshold: usize) -> PyResult<Option<Scope>> {
        if !store.is_configured() {
            return Ok(None);
        }
        let Some(numpy) = numpy(py)? else { return Ok(None) };
        // SAFETY: a valid handler capsule; returns a new reference or null
        // with an exception set.
        let previous = unsafe { (numpy.set_handler)(numpy.capsule.as_ptr()) };
        // SAFETY: as above.
        let previous_handler = unsafe { Bound::from_owned_ptr_or_err(py, previous) }?.unbind();
        let target = Target { store: store.clone(), threshold };
        let previous_target = TARGET.with(|t| t.borrow_mut().replace(target));
        Ok(Some(Scope { previous_handler: Some(previous_handler), previous_target }))
    }

    /// Closes the scope (also done on drop).
    pub fn exit(mut self, py: Python<'_>) -> PyResult<()> {
        self.restore(py)
    }

    fn restore(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(previous) = self.previous_handler.take() else { return Ok(()) };
        let outermost = self.previous_target.is_none();
        TARGET.with(|t| *t.borrow_mut() = self.previous_target.take());
        if outermost {
            // Aborted outside the lock (one-way each).
            let kept = std::mem::take(&mut *spare());
            drop(kept);
        }
        let Some(numpy) = numpy(py)? else { return Ok(()) };
        // SAFETY: `previous` is the handler capsule numpy gave back.
        let replaced = unsafe { (numpy.set_handler)(previous.as_ptr()) };
        // SAFETY: a new reference (ours, dropped here) or null with an error.
        unsafe { Bound::from_owned_ptr_or_err(py, replaced) }.map(drop)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if self.previous_handler.is_some() {
            Python::with_gil(|py| {
                if let Err(e) = self.restore(py) {
                    tracing::warn!("could not restore numpy's memory handler: {e}");
                }
            });
        }
    }
}

/// A born allocation being sent.
pub enum Sending {
    /// Sealed just now, its receivers announced with the seal (redeliver,
    /// seal, the producer's claim, posted in that order to the outbox).
    Sealed(Arc<Object>),
    /// Sealed by an earlier send: its receivers are still to announce.
    Again(Arc<Object>),
}

/// The store object `bytes` are, if they are exactly a born allocation,
/// for a message to `deliveries` receivers. None for any other memory,
/// including a part of a born allocation (which the codec copies).
///
/// If the encode fails after this, the receivers announced stay pending
/// until the store's delivery TTL: an error path only.
pub fn seal_for_sending(bytes: &[u8], deliveries: u32) -> Result<Option<Sending>, hprm_store::Error> {
    let mut born = born();
    let Some(entry) = born.get_mut(&(bytes.as_ptr() as usize)) else { return Ok(None) };
    if entry.len != bytes.len() {
        return Ok(None);
    }
    match std::mem::replace(&mut entry.born, Born::Lost) {
        Born::Writing(object) => {
            let object = Arc::new(object.seal_and_send(deliveries)?);
            entry.born = Born::Sealed(object.clone());
            Ok(Some(Sending::Sealed(object)))
        }
        Born::Sealed(object) => {
            entry.born = Born::Sealed(object.clone());
            Ok(Some(Sending::Again(object)))
        }
        Born::Lost => Ok(None),
    }
}

/// The id of the store object whose born allocation holds the `len` bytes
/// at `address`, if any.
pub fn object_at(address: usize, len: usize) -> Option<ObjectId> {
    let born = born();
    let (start, entry) = born.range(..=address).next_back()?;
    if address.checked_add(len)? > start + entry.len {
        return None;
    }
    match &entry.born {
        Born::Writing(o) => Some(o.id()),
        Born::Sealed(o) => Some(o.id()),
        Born::Lost => None,
    }
}
