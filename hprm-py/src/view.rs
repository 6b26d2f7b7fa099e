//! `SharedBuffer`: a read-only Python buffer over one object of the
//! shared-memory store, the base of every zero-copy array a receiver gets.
//!
//! [`crate::codec::decode`] wraps each store object a message references in
//! one `SharedBuffer` and builds numpy arrays (`numpy.frombuffer`), byte
//! strings (`memoryview`) and pickle buffers on top of it, so they read the
//! store's memory where it is. Every such consumer holds a buffer export,
//! and each export holds a reference to the `SharedBuffer`; when the last
//! array or view over it is garbage-collected the `SharedBuffer` is freed,
//! which drops its [`hprm_store::Object`] and releases the store reference:
//! that release is what settles this receiver's delivery of the object.
//!
//! The memory is a sealed object, immutable while referenced, so the
//! buffer is read-only: a request for a writable buffer fails with
//! `BufferError`, and numpy arrays over it have `writeable=False` (numpy
//! refuses to make them writable). `decode(..., copy=True)` is the way to
//! a private, writable array.
//!
//! `LoanView` is the producer's side: a writable buffer over an object
//! being written in place (`ctx.alloc_array`), so a camera frame is
//! captured straight into the store. When a value holding an array over it
//! is sent, the codec finishes the loan (seals it) and sends the object by
//! reference with the deliveries paid at loan time.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, PoisonError};

use hprm_node::payload::{Buffer, Loan};
use hprm_store::Object;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

/// A read-only buffer (Python's buffer protocol) over the data of one store
/// object; releases the object when garbage-collected.
///
/// Not constructible from Python: `Codec.decode` makes them.
#[pyclass(module = "hprm._native", frozen, name = "SharedBuffer")]
pub struct SharedBuffer {
    object: Arc<Object>,
}

impl SharedBuffer {
    pub fn new(object: Arc<Object>) -> SharedBuffer {
        SharedBuffer { object }
    }

    /// The object's bytes.
    pub fn data(&self) -> &[u8] {
        self.object.data()
    }

    /// The store object itself (to send it on by reference).
    pub fn object(&self) -> &Arc<Object> {
        &self.object
    }
}

#[pymethods]
impl SharedBuffer {
    /// Exports the object's bytes, read-only, as a one-dimensional buffer of
    /// unsigned bytes (format `B`).
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no Py_buffer to fill"));
        }
        let data = slf.get().object.data();
        // SAFETY: `view` is the caller's Py_buffer (checked non-null);
        // FillInfo stores a new reference to `slf` in it, which keeps this
        // object, hence the store object and its bytes, alive until the
        // export is released. It refuses PyBUF_WRITABLE (readonly = 1)
        // with BufferError.
        let done = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                data.as_ptr() as *mut c_void,
                data.len() as ffi::Py_ssize_t,
                1,
                flags,
            )
        };
        if done == -1 {
            return Err(
                PyErr::take(slf.py()).unwrap_or_else(|| PyBufferError::new_err("cannot export the store object"))
            );
        }
        Ok(())
    }

    /// Nothing to free per export: the bytes belong to the store object,
    /// held by `self` (the reference FillInfo took is dropped by Python).
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    /// The store object's id, in hex (as `hprm-store list` prints it).
    #[getter]
    fn object_id(&self) -> String {
        self.object.id().to_string()
    }

    /// Length of the object's data in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.object.data().len()
    }

    /// Address of the object's data in this process.
    #[getter]
    fn address(&self) -> usize {
        self.object.data().as_ptr() as usize
    }

    /// `(start, end)`: the address range where this process maps the
    /// store memory the object lies in (the arena, or the spill file of a
    /// store run with `--spill-dir`) through the connection it came by.
    /// Arrays over this buffer point inside it: that is the zero-copy.
    #[getter]
    fn mapping(&self) -> (usize, usize) {
        let m = self.object.mapping();
        (m.start, m.end)
    }

    fn __len__(&self) -> usize {
        self.object.data().len()
    }

    fn __repr__(&self) -> String {
        format!("<hprm SharedBuffer of store object {}, {} bytes>", self.object.id(), self.object.data().len())
    }
}

/// Where a loan is in its life.
enum LoanState {
    Writing(Loan),
    Sent(Buffer),
    Failed,
}

/// A writable buffer over a store object being written in place.
///
/// Not constructible from Python: `Context.loan` makes them.
#[pyclass(module = "hprm._native", frozen, name = "LoanView")]
pub struct LoanView {
    state: Mutex<LoanState>,
    id: hprm_store::ObjectId,
    /// The object's bytes: they stay where they are for as long as this
    /// view holds the loan, then the finished buffer (a store reference).
    ptr: usize,
    len: usize,
}

impl LoanView {
    pub fn new(mut loan: Loan) -> LoanView {
        let id = loan.id();
        let bytes = loan.as_mut_bytes();
        let (ptr, len) = (bytes.as_mut_ptr() as usize, bytes.len());
        LoanView { state: Mutex::new(LoanState::Writing(loan)), id, ptr, len }
    }

    /// The loan as a sealed buffer (finished on first call).
    pub fn finish(&self) -> PyResult<Buffer> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *state, LoanState::Failed) {
            LoanState::Writing(loan) => match loan.finish() {
                Ok(buffer) => {
                    *state = LoanState::Sent(buffer.clone());
                    Ok(buffer)
                }
                Err(e) => {
                    Err(PyBufferError::new_err(format!("the array allocated in the store could not be finished: {e}")))
                }
            },
            LoanState::Sent(buffer) => {
                *state = LoanState::Sent(buffer.clone());
                Ok(buffer)
            }
            LoanState::Failed => {
                Err(PyBufferError::new_err("the array allocated in the store was lost when sending it failed"))
            }
        }
    }

    /// Whether `bytes` is exactly this loan's memory.
    pub fn covers(&self, bytes: &[u8]) -> bool {
        bytes.as_ptr() as usize == self.ptr && bytes.len() == self.len
    }
}

#[pymethods]
impl LoanView {
    /// Exports the loan's bytes, writable, as unsigned bytes (format `B`).
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no Py_buffer to fill"));
        }
        let me = slf.get();
        // SAFETY: as for SharedBuffer; the memory belongs to the loan (then
        // the finished buffer) held by `slf`, which the export keeps alive.
        let done = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), me.ptr as *mut c_void, me.len as ffi::Py_ssize_t, 0, flags)
        };
        if done == -1 {
            return Err(PyErr::take(slf.py()).unwrap_or_else(|| PyBufferError::new_err("cannot export the loan")));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    /// The store object's id, in hex.
    #[getter]
    fn object_id(&self) -> String {
        self.id.to_string()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SharedBuffer>()?;
    m.add_class::<LoanView>()
}
