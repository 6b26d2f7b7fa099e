//! Python values to payload bytes and back: the adaptive serializer of the
//! Python SDK. It writes and reads exactly the wire format of
//! `hprm_node::payload` (whose module docs specify the bytes), so Rust and
//! Python federates read each other's messages, and it applies the same
//! policy through the same code: buffers go out-of-band into the store at
//! or over the threshold ([`hprm_node::payload::EncodeSession`]), messages
//! over the in-band limit are spilled, and a receiver takes every object a
//! message references with no round trip when the descriptors say where
//! the objects lie, else in one ([`Decoder::take_message`]).
//!
//! # What each Python value becomes
//!
//! | sent | on the wire | a Python receiver gets |
//! |---|---|---|
//! | `None`, `bool`, `float` | nil, bool, float 64 | the same |
//! | `int` in the 64-bit range (signed or unsigned) | int, smallest form | `int` |
//! | `str` | str | `str` |
//! | `bytes`, `bytearray`, `memoryview` (its bytes in C order, whatever its format) under the threshold | bin | `bytes` |
//! | the same at or over the threshold | ext 4 (byte string), in the store | a read-only `memoryview` over the store object (zero copy); `bytes` with `copy=True` |
//! | `list`, `tuple` | array | `list`: MessagePack has no tuple (Rust tuples and tuple structs are arrays too) |
//! | `dict` keyed by `str`, `int`, `bytes`, `bool`, `float`, `None` (other keys, e.g. tuples: the whole dict is pickled) | map | `dict`; array keys (Rust tuples) come back as tuples |
//! | `numpy.ndarray` of a plain dtype: bool, ints, floats, complex, datetime64/timedelta64, `S`, `U`, unstructured `V`; any shape (0-d, empty), any layout | ext 1: `dtype.str`, shape, the bytes in C order (a non-contiguous array is made contiguous first: one copy); inline under the threshold, else in the store | an `ndarray` of the same dtype and shape: inline ones as private writable arrays; stored ones as read-only arrays over the store object (zero copy), private writable copies with `copy=True` |
//! | `torch.Tensor` (and its subclasses from torch, e.g. `Parameter`) of a dtype numpy has: bool, ints, floats up to 64 bits, complex; strided, any shape, on any device | ext 6: the data of ext 1 for the numpy array over the tensor's memory (`hprm._torch.to_numpy`: detached, a CUDA/MPS tensor copied to the CPU first, a non-contiguous one made contiguous: one copy); inline under the threshold, else in the store | a CPU `torch.Tensor` (no grad) of the same dtype and shape over the received array: zero copy when stored, and writable (torch has no read-only tensors: do not write to it, it is the memory every receiver shares; `copy=True` gives a private one); the numpy array if torch is not installed. bfloat16, float8, sparse, quantized tensors are pickled (ext 3, in-band: one copy) |
//! | numpy scalars: bool, ints, floats up to 64 bits, `str_`, `bytes_` | bool, int, float, str, bin | `bool`, `int`, `float`, `str`, `bytes` |
//! | anything else: other classes, subclasses of the types above, sets, structured and record arrays, object arrays, ints over 64 bits, other numpy scalars | ext 3: pickle protocol 5, whose out-of-band buffers (numpy data) are ext 1 values, each in the store when large | the unpickled object, its arrays read-only views over the store unless `copy=True` |
//!
//! Structured dtypes go through pickle because `dtype.str` (`|V12`) would
//! lose their fields; their data is still a pickle buffer, out-of-band and
//! zero-copy like any array. Unpickling runs code of the sender's choosing:
//! connect only federates you trust (as with any pickle).
//!
//! A store object stays referenced by the receiver while anything built on
//! it lives: numpy arrays and memoryviews hold a [`SharedBuffer`], which
//! releases the object (settling this receiver's delivery) when the last of
//! them is garbage-collected. A received array sent on whole (an echo, a
//! relay) travels by reference, as in Rust: the same object, its new
//! receivers announced to the store (redeliver); a part of one is copied.
//! A received tensor keeps its array (attribute `_hprm_source`), so it is
//! sent on by reference too while it still views that array whole.
//!
//! The GIL is released around every store round trip and large copy into
//! the store; Python objects are only touched with it held.
//!
//! Python API (in `hprm._native`): [`Codec`], `PayloadError`, and for the
//! tests of cross-language compatibility `_rust_encode_example`,
//! `_rust_decode_check` and `_rust_decode_buffer`.

use std::collections::HashMap;
use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hprm_node::payload::conformance::Sample;
use hprm_node::payload::msgpack::{Reader, Token, Writer};
use hprm_node::payload::{
    Buffer, BufferDescriptor, Decoder, Dtype, EncodeSession, Encoder, Location, PayloadError as CodecError, StoreLink,
    DEFAULT_GET_TIMEOUT, DEFAULT_THRESHOLD, EXT_ARROW, EXT_BUFFER, EXT_BYTES, EXT_PICKLED, EXT_SPILLED, EXT_TENSOR,
};
use hprm_store::{Object, ObjectId};
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple, PyType,
};
use pyo3::{create_exception, ffi, intern};

use crate::store_memory::Sending;
use crate::view::{LoanView, SharedBuffer};

create_exception!(
    hprm,
    PayloadError,
    PyException,
    "A value could not be encoded into a payload, or a payload could not be decoded; the message says what was wrong and what to do."
);

create_exception!(
    hprm,
    StoreLostError,
    PayloadError,
    "The object store died (or dropped this process's connection), so the value is lost; the process reconnects by itself once the store is restarted."
);

/// Deepest nesting of containers encoded (Rust readers accept 1024; this
/// also bounds the recursion of the walk).
const MAX_DEPTH: usize = 1000;

/// The error raised for a codec error.
pub(crate) fn payload_error(e: CodecError) -> PyErr {
    if e.is_store_lost() {
        return StoreLostError::new_err(e.to_string());
    }
    PayloadError::new_err(e.to_string())
}

fn malformed(detail: impl std::fmt::Display) -> PyErr {
    payload_error(CodecError::Malformed { detail: detail.to_string() })
}

/// Python objects the codec uses, imported once.
static NDARRAY: GILOnceCell<Py<PyType>> = GILOnceCell::new();
static GENERIC: GILOnceCell<Py<PyType>> = GILOnceCell::new();
static DTYPE: GILOnceCell<Py<PyType>> = GILOnceCell::new();
static ASCONTIGUOUS: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static FROMBUFFER: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static PLAN_IPC: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static FROM_IPC: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static TO_NUMPY: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static FROM_NUMPY: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static DUMPS: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static LOADS: GILOnceCell<Py<PyAny>> = GILOnceCell::new();

// ---------------------------------------------------------------------------
// Encoding

/// Encodes `value` for `deliveries` receivers with `encoder`'s store,
/// threshold and in-band limit: the payload bytes to send.
pub fn encode<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyAny>,
    encoder: &'py Encoder,
    deliveries: u32,
) -> PyResult<Vec<u8>> {
    let mut walk = Walk { py, session: encoder.session(deliveries), threshold: encoder.threshold(), held: Vec::new() };
    let mut message = Vec::new();
    walk.value(&mut message, value, 0)?;
    // On an error above, dropping the walk drops its session, which aborts
    // the objects it created.
    let Walk { session, held, .. } = walk;
    let sent = py.allow_threads(move || session.finish(message));
    // Only now may the memory of what was stored move or be reused.
    drop(held);
    sent.map_err(payload_error)
}

/// Keeps memory written to the store where it is until the encode ends, so
/// that [`EncodeSession`]'s "same memory, same object" holds. Never read:
/// holding (and dropping) is the point.
#[allow(dead_code)]
enum Held {
    Export(RawBuffer),
    Object(Py<PyAny>),
}

/// One encode: the walk over the value, writing MessagePack.
struct Walk<'py> {
    py: Python<'py>,
    session: EncodeSession,
    threshold: usize,
    held: Vec<Held>,
}

impl<'py> Walk<'py> {
    fn value(&mut self, out: &mut Vec<u8>, v: &Bound<'py, PyAny>, depth: usize) -> PyResult<()> {
        if depth > MAX_DEPTH {
            return Err(PayloadError::new_err(format!(
                "the value is nested more than {MAX_DEPTH} containers deep (does it contain itself?); flatten it"
            )));
        }
        if v.is_none() {
            out.push(0xc0);
        } else if let Ok(b) = v.downcast_exact::<PyBool>() {
            out.push(if b.is_true() { 0xc3 } else { 0xc2 });
        } else if v.is_exact_instance_of::<PyInt>() {
            if let Ok(i) = v.extract::<i64>() {
                write_int(out, i);
            } else if let Ok(u) = v.extract::<u64>() {
                write_uint(out, u);
            } else {
                // Beyond MessagePack's integers.
                return self.pickle(out, v);
            }
        } else if let Ok(f) = v.downcast_exact::<PyFloat>() {
            out.push(0xcb);
            out.extend_from_slice(&f.value().to_be_bytes());
        } else if let Ok(s) = v.downcast_exact::<PyString>() {
            match s.to_str() {
                Ok(text) => write_str(out, text)?,
                // Lone surrogates are not UTF-8; pickle keeps them.
                Err(_) => return self.pickle(out, v),
            }
        } else if let Ok(b) = v.downcast_exact::<PyBytes>() {
            self.byte_string(out, b.as_bytes(), || Held::Object(v.clone().unbind()))?;
        } else if v.is_exact_instance_of::<PyByteArray>() || v.is_exact_instance_of::<PyMemoryView>() {
            match RawBuffer::get(v) {
                // The export keeps the memory in place (a bytearray cannot
                // resize while exported).
                Ok(buffer) => {
                    if buffer.bytes().len() < self.threshold {
                        write_bin(out, buffer.bytes())?;
                    } else if self.place(out, EXT_BYTES, &Dtype::U8, &[buffer.bytes().len()], buffer.bytes())?.is_some()
                    {
                        self.held.push(Held::Export(buffer));
                    }
                }
                // A non-contiguous memoryview: its bytes in C order.
                Err(_) => {
                    let copy = v.call_method0(intern!(self.py, "tobytes"))?.downcast_into::<PyBytes>()?;
                    self.byte_string(out, copy.as_bytes(), || Held::Object(copy.clone().into_any().unbind()))?;
                }
            }
        } else if let Ok(list) = v.downcast_exact::<PyList>() {
            // A snapshot: pickling an element runs Python code, which could
            // change the list after its length was written.
            let items = list.to_tuple();
            write_container_len(out, 0x90, items.len())?;
            for item in items.iter() {
                self.value(out, &item, depth + 1)?;
            }
        } else if let Ok(tuple) = v.downcast_exact::<PyTuple>() {
            write_container_len(out, 0x90, tuple.len())?;
            for item in tuple.iter() {
                self.value(out, &item, depth + 1)?;
            }
        } else if let Ok(dict) = v.downcast_exact::<PyDict>() {
            // A snapshot, as for lists.
            let items = dict.items();
            let mut pairs = Vec::with_capacity(items.len());
            for pair in items.iter() {
                let (key, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) = pair.extract()?;
                if !self.plain_key(&key) {
                    // Tuple keys and the like: Python-only.
                    return self.pickle(out, v);
                }
                pairs.push((key, value));
            }
            write_container_len(out, 0x80, pairs.len())?;
            for (key, value) in &pairs {
                self.value(out, key, depth + 1)?;
                self.value(out, value, depth + 1)?;
            }
        } else if v.get_type().is(imported_type(self.py, &NDARRAY, "numpy", "ndarray")?) {
            self.array(out, v, EXT_BUFFER)?;
        } else if v.is_instance(imported_type(self.py, &GENERIC, "numpy", "generic")?)? {
            self.numpy_scalar(out, v)?;
        } else {
            // Only torch's and pyarrow's own types are worth a look (and an
            // import of their helper); the module name says it cheaply.
            let module = v.get_type().getattr(intern!(self.py, "__module__"))?;
            let module = module.downcast::<PyString>().ok().and_then(|m| m.to_str().ok()).unwrap_or_default();
            let sent = if module.starts_with("torch") {
                self.tensor(out, v)?
            } else if module.starts_with("pyarrow") {
                self.arrow(out, v)?
            } else {
                false
            };
            if !sent {
                return self.pickle(out, v);
            }
        }
        Ok(())
    }

    /// The loan `array` views in full, if its base chain ends at a [`LoanView`].
    fn whole_loan<'a>(array: &'a Bound<'py, PyAny>, bytes: &[u8]) -> PyResult<Option<Bound<'py, LoanView>>> {
        let py = array.py();
        let mut base = array.getattr(intern!(py, "base"))?;
        for _ in 0..8 {
            if base.is_none() {
                return Ok(None);
            }
            if let Ok(loan) = base.downcast::<LoanView>() {
                return Ok(loan.get().covers(bytes).then(|| loan.clone()));
            }
            base = match base.getattr(intern!(py, "obj")).or_else(|_| base.getattr(intern!(py, "base"))) {
                Ok(b) => b,
                Err(_) => return Ok(None),
            };
        }
        Ok(None)
    }

    /// The store object `array` views in full, if its base chain ends at a
    /// [`SharedBuffer`] whose bytes are exactly `bytes`.
    fn whole_store_object(array: &Bound<'_, PyAny>, bytes: &[u8]) -> PyResult<Option<Arc<Object>>> {
        let py = array.py();
        let mut base = array.getattr(intern!(py, "base"))?;
        // numpy collapses view chains; a few steps cover memoryview layers.
        for _ in 0..8 {
            if base.is_none() {
                return Ok(None);
            }
            if let Ok(shared) = base.downcast::<SharedBuffer>() {
                let shared = shared.get();
                let data = shared.data();
                let whole = data.as_ptr() == bytes.as_ptr() && data.len() == bytes.len();
                return Ok(whole.then(|| shared.object().clone()));
            }
            base = match base.getattr(intern!(py, "obj")).or_else(|_| base.getattr(intern!(py, "base"))) {
                Ok(b) => b,
                Err(_) => return Ok(None),
            };
        }
        Ok(None)
    }

    /// Whether `key` is a map key every reader handles (a scalar).
    fn plain_key(&self, key: &Bound<'py, PyAny>) -> bool {
        key.is_none()
            || key.is_exact_instance_of::<PyBool>()
            || key.is_exact_instance_of::<PyFloat>()
            || (key.is_exact_instance_of::<PyInt>() && (key.extract::<i64>().is_ok() || key.extract::<u64>().is_ok()))
            || key.downcast_exact::<PyString>().is_ok_and(|s| s.to_str().is_ok())
            || key.downcast_exact::<PyBytes>().is_ok_and(|b| b.as_bytes().len() < self.threshold)
    }

    /// A byte string: bin under the threshold, else ext 4 in the store.
    /// `hold` keeps `bytes` where they are, called if they were stored.
    fn byte_string(&mut self, out: &mut Vec<u8>, bytes: &[u8], hold: impl FnOnce() -> Held) -> PyResult<()> {
        if bytes.len() < self.threshold {
            return write_bin(out, bytes);
        }
        if self.place(out, EXT_BYTES, &Dtype::U8, &[bytes.len()], bytes)?.is_some() {
            self.held.push(hold());
        }
        Ok(())
    }

    /// Writes one buffer through the session, without the GIL when it goes
    /// to the store (a round trip and a large copy).
    fn place(
        &mut self,
        out: &mut Vec<u8>,
        ext: i8,
        dtype: &Dtype,
        shape: &[usize],
        bytes: &[u8],
    ) -> PyResult<Option<ObjectId>> {
        let session = &mut self.session;
        let placed = if bytes.len() >= self.threshold {
            self.py.allow_threads(|| session.write_buffer(out, ext, dtype, shape, bytes, true))
        } else {
            session.write_buffer(out, ext, dtype, shape, bytes, true)
        };
        placed.map_err(payload_error)
    }

    /// A pyarrow table, batch or array (`v`'s type is one of pyarrow's) as
    /// one Arrow IPC stream (ext 5); false for anything else. Either writer
    /// measures the stream first; the session creates the object of that
    /// size (or inline bytes, under the threshold) and the stream is
    /// written straight into it: the pyarrow buffers are copied once, into
    /// the object sent, which is sealed with the message like any buffer.
    ///
    /// The writer is hprm-node's (`crate::arrow`: the value imported through
    /// the Arrow C data interface, its stream planned and written in Rust,
    /// without the GIL when it goes to the store) for all it takes; else
    /// pyarrow's, driven by `hprm._arrow.plan_ipc`, which gives the size and
    /// the function that writes into a memoryview over the destination.
    fn arrow(&mut self, out: &mut Vec<u8>, v: &Bound<'py, PyAny>) -> PyResult<bool> {
        let py = self.py;
        if let Some(arrow) = crate::arrow::import(v)? {
            let stream = arrow.plan().map_err(payload_error)?;
            let session = &mut self.session;
            let mut write = || session.write_filled(out, EXT_ARROW, stream.len(), |bytes| stream.write(bytes));
            let written = if stream.len() >= self.threshold { py.allow_threads(write) } else { write() };
            written.map_err(payload_error)?;
            crate::arrow::count(true);
            return Ok(true);
        }
        let plan = imported(py, &PLAN_IPC, "hprm._arrow", "plan_ipc")?.call1((v,))?;
        if plan.is_none() {
            return Ok(false);
        }
        crate::arrow::count(false);
        let (nbytes, write): (usize, Bound<'py, PyAny>) = plan.extract()?;
        let mut failure = None;
        let written = self.session.write_filled(out, EXT_ARROW, nbytes, |bytes| {
            write_into(&write, bytes).map_err(|e| {
                let message = e.to_string();
                failure = Some(e);
                CodecError::Serialize { message }
            })
        });
        match written {
            Ok(_) => Ok(true),
            Err(e) => Err(failure.take().unwrap_or_else(|| payload_error(e))),
        }
    }

    /// A torch tensor (`v`'s type is one of torch's) as the numpy array
    /// over its memory, written as ext 6 (see `hprm._torch`); false for
    /// anything else, and for tensors numpy cannot hold (bfloat16, sparse,
    /// ...), which torch pickles.
    fn tensor(&mut self, out: &mut Vec<u8>, v: &Bound<'py, PyAny>) -> PyResult<bool> {
        let array = imported(self.py, &TO_NUMPY, "hprm._torch", "to_numpy")?.call1((v,))?;
        if array.is_none() {
            return Ok(false);
        }
        self.array(out, &array, EXT_TENSOR)?;
        Ok(true)
    }

    /// A numpy array as `ext`: ext 1 (an array), or ext 6 (a torch tensor's
    /// array, given back as a tensor).
    fn array(&mut self, out: &mut Vec<u8>, array: &Bound<'py, PyAny>, ext: i8) -> PyResult<()> {
        let py = self.py;
        let dtype = array.getattr(intern!(py, "dtype"))?;
        let Some(dtype) = plain_dtype(&dtype)? else { return self.pickle(out, array) };
        let shape: Vec<usize> = array.getattr(intern!(py, "shape"))?.extract()?;
        let contiguous: bool = array.getattr(intern!(py, "flags"))?.getattr(intern!(py, "c_contiguous"))?.extract()?;
        let source = if contiguous {
            array.clone()
        } else {
            // Fortran order, strided, negative strides: one copy into C order.
            imported(py, &ASCONTIGUOUS, "numpy", "ascontiguousarray")?.call1((array,))?
        };
        let buffer = RawBuffer::get(&source)?;
        // A loan is written as ext 1 (`write_value_buffer`); a tensor's array
        // never views one (its base is the tensor).
        let loaned = if ext == EXT_BUFFER { Self::whole_loan(&source, buffer.bytes())? } else { None };
        if let Some(loaned) = loaned {
            // Allocated in the store by `ctx.alloc_array`: sent by reference
            // (unless reinterpreted as another dtype or shape: then copied).
            let finished = loaned.get().finish()?;
            if *finished.dtype() == dtype && finished.shape() == shape.as_slice() {
                self.session.write_value_buffer(out, &finished).map_err(payload_error)?;
                return Ok(());
            }
        }
        if buffer.bytes().len() >= self.threshold {
            let deliveries = self.session.deliveries();
            let born = crate::store_memory::seal_for_sending(buffer.bytes(), deliveries)
                .map_err(|source| payload_error(CodecError::from_store("seal", buffer.bytes().len() as u64, source)))?;
            if let Some(sending) = born {
                // Made in the store by numpy inside a reaction: sent by
                // reference. Sealed now, so the array that was sent becomes
                // read-only, as received ones are.
                let session = &mut self.session;
                match sending {
                    Sending::Sealed(object) => session.write_announced(out, ext, &dtype, &shape, object),
                    Sending::Again(object) => session.write_stored(out, ext, &dtype, &shape, object),
                }
                .map_err(payload_error)?;
                source.getattr(intern!(py, "flags"))?.setattr(intern!(py, "writeable"), false)?;
                return Ok(());
            }
        }
        if let Some(object) = Self::whole_store_object(&source, buffer.bytes())? {
            // A received array sent on (an echo, a relay): the same object,
            // with its new receivers announced to the store; no copy.
            let session = &mut self.session;
            session.write_stored(out, ext, &dtype, &shape, object).map_err(payload_error)?;
            return Ok(());
        }
        if self.place(out, ext, &dtype, &shape, buffer.bytes())?.is_some() {
            self.held.push(Held::Export(buffer));
        }
        Ok(())
    }

    /// numpy's bool, integer, float, text and bytes scalars as plain
    /// MessagePack (what a Rust field of that type reads); other scalars
    /// (complex, datetime, long double, ...) are pickled, keeping their type.
    fn numpy_scalar(&mut self, out: &mut Vec<u8>, v: &Bound<'py, PyAny>) -> PyResult<()> {
        let py = self.py;
        let dtype = v.getattr(intern!(py, "dtype"))?;
        let kind: String = dtype.getattr(intern!(py, "kind"))?.extract()?;
        let itemsize: usize = dtype.getattr(intern!(py, "itemsize"))?.extract()?;
        let item = v.call_method0(intern!(py, "item"))?;
        match kind.as_str() {
            "b" => out.push(if item.is_truthy()? { 0xc3 } else { 0xc2 }),
            "i" | "u" => match (item.extract::<i64>(), item.extract::<u64>()) {
                (Ok(i), _) => write_int(out, i),
                (_, Ok(u)) => write_uint(out, u),
                _ => return self.pickle(out, v),
            },
            "f" if itemsize <= 8 => {
                out.push(0xcb);
                out.extend_from_slice(&item.extract::<f64>()?.to_be_bytes());
            }
            "U" => match item.downcast::<PyString>()?.to_str() {
                Ok(text) => write_str(out, text)?,
                Err(_) => return self.pickle(out, v),
            },
            "S" => {
                let bytes = item.downcast::<PyBytes>()?;
                self.byte_string(out, bytes.as_bytes(), || Held::Object(item.clone().unbind()))?;
            }
            _ => return self.pickle(out, v),
        }
        Ok(())
    }

    /// Ext 3: `[bin pickle, [ext 1 per out-of-band buffer]]`.
    fn pickle(&mut self, out: &mut Vec<u8>, v: &Bound<'py, PyAny>) -> PyResult<()> {
        let py = self.py;
        let buffers = PyList::empty(py);
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "protocol"), 5)?;
        kwargs.set_item(intern!(py, "buffer_callback"), buffers.getattr(intern!(py, "append"))?)?;
        let pickled = imported(py, &DUMPS, "pickle", "dumps")?.call((v,), Some(&kwargs)).map_err(|e| {
            let type_name = v.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
            let err = PayloadError::new_err(format!(
                "cannot send a value of type {type_name}: it is not a plain value, numpy array or byte string, \
                 and pickling it failed: {e}; send its data as plain values or arrays instead"
            ));
            err.set_cause(py, Some(e));
            err
        })?;
        let pickled = pickled.downcast_into::<PyBytes>()?;
        let mut data = Vec::new();
        data.push(0x92);
        write_bin(&mut data, pickled.as_bytes())?;
        write_container_len(&mut data, 0x90, buffers.len())?;
        for buffer in buffers.iter() {
            // The raw bytes, one dimension of |u1 (the unpickler gives them
            // back to numpy, which knows dtype and shape).
            let raw = buffer.call_method0(intern!(py, "raw")).map_err(|e| {
                PayloadError::new_err(format!(
                    "pickle produced an out-of-band buffer that is not contiguous ({e}); cannot send it"
                ))
            })?;
            let raw = RawBuffer::get(&raw)?;
            let len = raw.bytes().len();
            if self.place(&mut data, EXT_BUFFER, &Dtype::U8, &[len], raw.bytes())?.is_some() {
                self.held.push(Held::Export(raw));
            }
        }
        write_ext_header(out, EXT_PICKLED, data.len())?;
        out.extend_from_slice(&data);
        Ok(())
    }
}

/// The wire dtype of a numpy dtype that travels as a buffer: a plain one
/// (no fields, no subarray, no objects, non-zero size), by its `str`.
fn plain_dtype(dtype: &Bound<'_, PyAny>) -> PyResult<Option<Dtype>> {
    let py = dtype.py();
    if dtype.getattr(intern!(py, "hasobject"))?.is_truthy()?
        || !dtype.getattr(intern!(py, "fields"))?.is_none()
        || !dtype.getattr(intern!(py, "subdtype"))?.is_none()
    {
        return Ok(None);
    }
    let kind: String = dtype.getattr(intern!(py, "kind"))?.extract()?;
    let itemsize: usize = dtype.getattr(intern!(py, "itemsize"))?.extract()?;
    if !matches!(kind.as_str(), "b" | "i" | "u" | "f" | "c" | "m" | "M" | "S" | "U" | "V") || itemsize == 0 {
        return Ok(None);
    }
    let text: String = dtype.getattr(intern!(py, "str"))?.extract()?;
    // Anything the wire grammar cannot carry is pickled instead.
    Ok(Dtype::parse(&text).ok())
}

/// Calls `write` with a writable memoryview over `bytes`, released before
/// this returns: nothing Python holds may point into `bytes` afterwards
/// (they become a sealed store object, or are aborted). Fails if `write`
/// kept an export of the view (its release then fails).
fn write_into(write: &Bound<'_, PyAny>, bytes: &mut [u8]) -> PyResult<()> {
    let py = write.py();
    let len = ffi::Py_ssize_t::try_from(bytes.len())
        .map_err(|_| PayloadError::new_err(format!("an Arrow IPC stream of {} bytes is too large", bytes.len())))?;
    // SAFETY: `bytes` is valid and writable for `len` bytes for this whole
    // call, and the view over it is released below, before `bytes` is
    // given back.
    let view = unsafe { ffi::PyMemoryView_FromMemory(bytes.as_mut_ptr().cast(), len, ffi::PyBUF_WRITE) };
    // SAFETY: a new reference, or null with an exception set.
    let view = unsafe { Bound::from_owned_ptr_or_err(py, view) }?;
    let called = write.call1((&view,));
    let released = view.call_method0(intern!(py, "release"));
    called?;
    released.map_err(|e| {
        PayloadError::new_err(format!(
            "the Arrow IPC writer kept a reference to the memory it wrote into ({e}); nothing was sent"
        ))
    })?;
    Ok(())
}

// ---------------------------------------------------------------------------
// MessagePack writing, smallest forms (as rmp and msgpack-python write).

fn write_uint(out: &mut Vec<u8>, v: u64) {
    Writer(out).uint(v);
}

fn write_int(out: &mut Vec<u8>, v: i64) {
    Writer(out).int(v);
}

/// A length that MessagePack can carry (at most 2^32 - 1).
fn wire_len(len: usize, what: &str) -> PyResult<u32> {
    u32::try_from(len).map_err(|_| {
        PayloadError::new_err(format!("{what} of {len} elements or bytes is over MessagePack's 4 GiB limit"))
    })
}

/// An array (`fix` 0x90) or map (0x80) header.
fn write_container_len(out: &mut Vec<u8>, fix: u8, len: usize) -> PyResult<()> {
    let len = wire_len(len, "a list or dict")?;
    if fix == 0x80 {
        Writer(out).map_len(len);
    } else {
        Writer(out).array_len(len);
    }
    Ok(())
}

fn write_str(out: &mut Vec<u8>, s: &str) -> PyResult<()> {
    wire_len(s.len(), "a string")?;
    Writer(out).str(s);
    Ok(())
}

fn write_bin(out: &mut Vec<u8>, data: &[u8]) -> PyResult<()> {
    wire_len(data.len(), "a byte string")?;
    Writer(out).bin(data);
    Ok(())
}

fn write_ext_header(out: &mut Vec<u8>, ty: i8, len: usize) -> PyResult<()> {
    wire_len(len, "an extension value")?;
    Writer(out).ext_header(ty, len);
    Ok(())
}

// ---------------------------------------------------------------------------
// Decoding

/// Decodes one payload (from Rust or Python senders) into Python values,
/// taking the store objects it references; see the module docs for what
/// each wire value becomes. `copy` gives private, writable copies instead
/// of read-only views over the store.
pub fn decode(py: Python<'_>, bytes: &[u8], decoder: &Decoder, copy: bool) -> PyResult<PyObject> {
    let (spilled, objects) = py.allow_threads(|| take_all(bytes, decoder)).map_err(payload_error)?;
    let message = spilled.as_ref().map_or(bytes, Object::data);
    let mut build = Build {
        py,
        copy,
        objects: objects.into_iter().map(|o| (o.id(), Arc::new(o))).collect(),
        views: HashMap::new(),
        dtypes: HashMap::new(),
    };
    let mut r = Reader::new(message);
    let value = build.value(&mut r, 0, false)?;
    if r.remaining() != 0 {
        return Err(malformed(format!("{} stray bytes after the message", r.remaining())));
    }
    // The spilled message's object is released here: everything built from
    // it was copied out (only out-of-band buffers are viewed in place).
    drop(spilled);
    Ok(value.unbind())
}

/// The store round trips of a decode: the spilled message's object, if
/// any, then every object the message references, in one get.
fn take_all(payload: &[u8], decoder: &Decoder) -> Result<(Option<Object>, Vec<Object>), CodecError> {
    let spilled = decoder.take_spilled(payload)?;
    let message = spilled.as_ref().map_or(payload, Object::data);
    // Objects whose descriptors say where they lie are claimed without a
    // round trip; only the others wait for a get.
    let objects = decoder.take_message(message)?;
    Ok((spilled, objects))
}

/// One decode: Python values from the message.
struct Build<'py> {
    py: Python<'py>,
    copy: bool,
    /// Every object the message references, taken.
    objects: HashMap<ObjectId, Arc<Object>>,
    /// One view per object, shared by every buffer over it.
    views: HashMap<ObjectId, Bound<'py, SharedBuffer>>,
    dtypes: HashMap<String, Bound<'py, PyAny>>,
}

impl<'py> Build<'py> {
    /// The next value; `as_key` for a map key (arrays become tuples, which
    /// Python can hash).
    fn value(&mut self, r: &mut Reader<'_>, depth: usize, as_key: bool) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        // The walk in `Decoder::references` allowed 1024.
        if depth > 1100 {
            return Err(malformed("values nested too deep"));
        }
        Ok(match r.token().map_err(payload_error)? {
            Token::Nil => py.None().into_bound(py),
            Token::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
            Token::Int(i) => i.into_pyobject(py)?.into_any(),
            Token::Uint(u) => u.into_pyobject(py)?.into_any(),
            Token::Float(f) => PyFloat::new(py, f).into_any(),
            Token::Str(bytes) => {
                let text = std::str::from_utf8(bytes).map_err(|_| malformed("a string that is not valid UTF-8"))?;
                PyString::new(py, text).into_any()
            }
            Token::Bin(bytes) => PyBytes::new(py, bytes).into_any(),
            Token::Array(n) => {
                let mut items = Vec::with_capacity(n.min(r.remaining()));
                for _ in 0..n {
                    items.push(self.value(r, depth + 1, as_key)?);
                }
                if as_key {
                    PyTuple::new(py, items)?.into_any()
                } else {
                    PyList::new(py, items)?.into_any()
                }
            }
            Token::Map(n) => {
                if as_key {
                    return Err(malformed("a map used as a map key, which Python cannot hash"));
                }
                let dict = PyDict::new(py);
                for _ in 0..n {
                    let key = self.value(r, depth + 1, true)?;
                    let value = self.value(r, depth + 1, false)?;
                    dict.set_item(&key, value).map_err(|e| malformed(format!("a map key Python cannot use ({e})")))?;
                }
                dict.into_any()
            }
            Token::Ext(EXT_BUFFER, data) => self.array(data)?,
            Token::Ext(EXT_BYTES, data) => self.byte_string(data)?,
            Token::Ext(EXT_ARROW, data) => match self.arrow(data)? {
                Some(value) => value,
                None => {
                    let stream = self.byte_string(data)?;
                    imported(self.py, &FROM_IPC, "hprm._arrow", "from_ipc")?.call1((stream,))?
                }
            },
            Token::Ext(EXT_TENSOR, data) => {
                // An array like ext 1 (a private copy with `copy`), then a
                // tensor over it; the array where torch is missing.
                let array = self.array(data)?;
                imported(self.py, &FROM_NUMPY, "hprm._torch", "from_numpy")?.call1((array,))?
            }
            Token::Ext(EXT_PICKLED, data) => self.unpickle(data)?,
            Token::Ext(EXT_SPILLED, _) => return Err(malformed("a spilled-message reference (ext 2) inside a message")),
            Token::Ext(other, _) => {
                return Err(PayloadError::new_err(format!(
                    "the message holds a MessagePack extension of type {other}, which Python does not read (1 to 6 are HPRM's); \
                     it was written for a Rust type with extensions of its own"
                )))
            }
        })
    }

    /// Ext 1 (and ext 6's data): a numpy array.
    fn array(&mut self, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        let d = BufferDescriptor::decode(data).map_err(payload_error)?;
        let buffer = self.bytes_object(&d)?;
        let dtype = self.dtype(d.dtype.as_str())?;
        let shape = PyTuple::new(py, &d.shape)?;
        let strides = match &d.strides {
            Some(s) => PyTuple::new(py, s)?.into_any(),
            None => py.None().into_bound(py),
        };
        let ndarray = imported_type(py, &NDARRAY, "numpy", "ndarray")?;
        // numpy checks that shape and strides stay inside the buffer.
        ndarray
            .call1((shape, dtype, buffer, 0, strides))
            .map_err(|e| malformed(format!("buffer of shape {:?} and strides {:?}: {e}", d.shape, d.strides)))
    }

    /// Ext 4: bytes (a read-only memoryview over the store when large).
    /// An Arrow stream (ext 5) in the store, read by `crate::arrow::read`
    /// over the object (zero-copy); `None` for what `hprm._arrow.from_ipc`
    /// reads: with `copy`, inline streams, and what `read` leaves to it.
    fn arrow(&mut self, data: &[u8]) -> PyResult<Option<Bound<'py, PyAny>>> {
        if self.copy {
            return Ok(None);
        }
        let d = BufferDescriptor::decode(data).map_err(payload_error)?;
        match d.location {
            Location::Store(id) if d.dtype == Dtype::U8 && d.shape.len() == 1 => {
                crate::arrow::read(self.py, self.checked_object(id, d.nbytes)?)
            }
            _ => Ok(None),
        }
    }

    fn byte_string(&mut self, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let d = BufferDescriptor::decode(data).map_err(payload_error)?;
        if d.dtype != Dtype::U8 || d.shape.len() != 1 {
            return Err(malformed(format!(
                "a byte string (ext 4) of {} with shape {:?}; expected one dimension of |u1",
                d.dtype, d.shape
            )));
        }
        match d.location {
            Location::Store(id) if !self.copy => {
                self.checked_object(id, d.nbytes)?;
                let view = self.view(id)?;
                Ok(PyMemoryView::from(view.as_any())?.into_any())
            }
            Location::Store(id) => Ok(PyBytes::new(self.py, self.checked_object(id, d.nbytes)?.data()).into_any()),
            Location::Inline(bytes) => Ok(PyBytes::new(self.py, &bytes).into_any()),
        }
    }

    /// The Python object holding a buffer's bytes: a view of the store
    /// object, or a private `bytearray` (inline bytes, or `copy`).
    fn bytes_object(&mut self, d: &BufferDescriptor) -> PyResult<Bound<'py, PyAny>> {
        match &d.location {
            Location::Inline(bytes) => Ok(PyByteArray::new(self.py, bytes).into_any()),
            Location::Store(id) if self.copy => {
                let object = self.checked_object(*id, d.nbytes)?;
                Ok(PyByteArray::new(self.py, object.data()).into_any())
            }
            Location::Store(id) => {
                self.checked_object(*id, d.nbytes)?;
                Ok(self.view(*id)?.into_any())
            }
        }
    }

    /// A referenced object, whose length must be the descriptor's.
    fn checked_object(&self, id: ObjectId, nbytes: u64) -> PyResult<Arc<Object>> {
        let object = self
            .objects
            .get(&id)
            .ok_or_else(|| malformed(format!("object {id} was not among the message's references")))?;
        let held = object.data().len() as u64;
        if held != nbytes {
            return Err(malformed(format!("object {id} holds {held} bytes, its descriptor says {nbytes}")));
        }
        Ok(object.clone())
    }

    fn view(&mut self, id: ObjectId) -> PyResult<Bound<'py, SharedBuffer>> {
        if let Some(view) = self.views.get(&id) {
            return Ok(view.clone());
        }
        let object = self
            .objects
            .get(&id)
            .ok_or_else(|| malformed(format!("object {id} was not among the message's references")))?;
        let view = Bound::new(self.py, SharedBuffer::new(object.clone()))?;
        self.views.insert(id, view.clone());
        Ok(view)
    }

    fn dtype(&mut self, text: &str) -> PyResult<Bound<'py, PyAny>> {
        if let Some(dtype) = self.dtypes.get(text) {
            return Ok(dtype.clone());
        }
        let dtype = imported_type(self.py, &DTYPE, "numpy", "dtype")?
            .call1((text,))
            .map_err(|e| PayloadError::new_err(format!("numpy does not know the dtype `{text}`: {e}")))?;
        self.dtypes.insert(text.to_owned(), dtype.clone());
        Ok(dtype)
    }

    /// Ext 3: `[bin pickle, [ext 1 ...]]`, unpickled with its buffers.
    fn unpickle(&mut self, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        let mut r = Reader::new(data);
        let (Token::Array(2), Token::Bin(pickled), Token::Array(n)) =
            (r.token().map_err(payload_error)?, r.token().map_err(payload_error)?, r.token().map_err(payload_error)?)
        else {
            return Err(malformed("a pickled object (ext 3) that is not [bin, [buffers]]"));
        };
        let buffers = PyList::empty(py);
        for _ in 0..n {
            let Token::Ext(EXT_BUFFER, d) = r.token().map_err(payload_error)? else {
                return Err(malformed("a pickle's out-of-band buffer that is not a buffer descriptor (ext 1)"));
            };
            let d = BufferDescriptor::decode(d).map_err(payload_error)?;
            buffers.append(self.bytes_object(&d)?)?;
        }
        if r.remaining() != 0 {
            return Err(malformed("stray bytes after a pickled object's buffers"));
        }
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "buffers"), buffers)?;
        imported(py, &LOADS, "pickle", "loads")?.call((PyBytes::new(py, pickled),), Some(&kwargs)).map_err(|e| {
            let err = PayloadError::new_err(format!(
                "cannot unpickle a received Python object: {e}; is its class importable here, in the same version as the sender's?"
            ));
            err.set_cause(py, Some(e));
            err
        })
    }
}

// ---------------------------------------------------------------------------
// Buffers of Python objects

/// A C-contiguous, read-only buffer export of a Python object (bytes-like,
/// numpy array of any dtype: no format is asked for, so numpy exports
/// datetime64 and the like too). Released on drop.
pub(crate) struct RawBuffer {
    view: Box<ffi::Py_buffer>,
}

impl RawBuffer {
    pub(crate) fn get(obj: &Bound<'_, PyAny>) -> PyResult<RawBuffer> {
        let mut view: Box<MaybeUninit<ffi::Py_buffer>> = Box::new(MaybeUninit::zeroed());
        // SAFETY: `view` is a writable Py_buffer; on success Python filled
        // it and we own the export until PyBuffer_Release (in Drop).
        let view = unsafe {
            if ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_C_CONTIGUOUS as c_int) == -1 {
                return Err(PyErr::take(obj.py())
                    .unwrap_or_else(|| PyValueError::new_err("the object does not export a contiguous buffer")));
            }
            Box::from_raw(Box::into_raw(view).cast::<ffi::Py_buffer>())
        };
        Ok(RawBuffer { view })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        let len = usize::try_from(self.view.len).unwrap_or(0);
        if len == 0 || self.view.buf.is_null() {
            return &[];
        }
        // SAFETY: a C-contiguous export of `len` bytes at `buf`, valid until
        // released (Drop), which needs `&mut self`.
        unsafe { std::slice::from_raw_parts(self.view.buf.cast::<u8>(), len) }
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        // SAFETY: filled by a successful PyObject_GetBuffer, released once.
        Python::with_gil(|_| unsafe { ffi::PyBuffer_Release(&mut *self.view) });
    }
}

fn imported<'py>(
    py: Python<'py>,
    cell: &'static GILOnceCell<Py<PyAny>>,
    module: &str,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.import(py, module, name)
}

fn imported_type<'py>(
    py: Python<'py>,
    cell: &'static GILOnceCell<Py<PyType>>,
    module: &str,
    name: &str,
) -> PyResult<&'py Bound<'py, PyType>> {
    cell.import(py, module, name)
}

// ---------------------------------------------------------------------------
// The Python API

/// Encodes Python values into payloads and decodes payloads (from Python or
/// Rust senders), with one connection to the store at `store_socket` (opened
/// when first needed; none: everything must travel in-band).
///
/// `Codec(store_socket=None, threshold=65536, get_timeout=2.0)`:
/// buffers of `threshold` bytes or more go through the store; a decode
/// waits up to `get_timeout` seconds for an object not sealed yet.
#[pyclass(module = "hprm._native", frozen)]
pub struct Codec {
    encoder: Encoder,
    decoder: Decoder,
}

#[pymethods]
impl Codec {
    #[new]
    #[pyo3(signature = (store_socket = None, threshold = DEFAULT_THRESHOLD, get_timeout = DEFAULT_GET_TIMEOUT.as_secs_f64()))]
    fn new(store_socket: Option<PathBuf>, threshold: usize, get_timeout: f64) -> PyResult<Codec> {
        let timeout = Duration::try_from_secs_f64(get_timeout).map_err(|_| {
            PyValueError::new_err(format!("get_timeout must be a non-negative number of seconds, not {get_timeout}"))
        })?;
        let store = StoreLink::new(store_socket);
        Ok(Codec { encoder: Encoder::new(store.clone(), threshold), decoder: Decoder::new(store, timeout) })
    }

    /// `encode(value, deliveries=1) -> bytes`: the payload for `deliveries`
    /// receivers (each store object it creates stays pinned until that many
    /// receivers have taken and released it, or the store's delivery TTL).
    #[pyo3(signature = (value, deliveries = 1))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
        deliveries: u32,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = encode(py, value, &self.encoder, deliveries)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// `alloc_array(shape, dtype, deliveries=1)`: a writable numpy array
    /// allocated straight in the store, for a message to `deliveries`
    /// receivers: fill it, and `encode` sends it by reference (no copy).
    /// What `ctx.alloc_array` does inside a reaction.
    #[pyo3(signature = (shape, dtype, deliveries = 1))]
    fn alloc_array<'py>(
        &self,
        py: Python<'py>,
        shape: Vec<usize>,
        dtype: &Bound<'py, PyAny>,
        deliveries: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let np_dtype = imported_type(py, &DTYPE, "numpy", "dtype")?.call1((dtype,))?;
        let text: String = np_dtype.getattr(intern!(py, "str"))?.extract()?;
        let parsed = Dtype::parse(&text).map_err(payload_error)?;
        let loan = py.allow_threads(|| self.encoder.loan(parsed, &shape, deliveries)).map_err(payload_error)?;
        let view = Bound::new(py, LoanView::new(loan))?;
        let flat = imported(py, &FROMBUFFER, "numpy", "frombuffer")?.call1((view, np_dtype))?;
        flat.call_method1(intern!(py, "reshape"), (PyTuple::new(py, &shape)?,))
    }

    /// `store_memory()`: a context manager inside which numpy, on this
    /// thread, allocates every array of `threshold` bytes or more in the
    /// store, so that `encode` sends it by reference (see
    /// `store_memory.rs`); what every reaction runs in. A no-op without a
    /// store.
    fn store_memory(&self) -> StoreMemory {
        StoreMemory { store: self.encoder.store().clone(), threshold: self.encoder.threshold(), scope: None }
    }

    /// `decode(data, copy=False)`: the value of a payload (any bytes-like).
    /// Large arrays are read-only views over the store unless `copy`.
    #[pyo3(signature = (data, copy = false))]
    fn decode(&self, py: Python<'_>, data: &Bound<'_, PyAny>, copy: bool) -> PyResult<PyObject> {
        if let Ok(bytes) = data.downcast::<PyBytes>() {
            return decode(py, bytes.as_bytes(), &self.decoder, copy);
        }
        let buffer = RawBuffer::get(data)?;
        decode(py, buffer.bytes(), &self.decoder, copy)
    }

    /// The out-of-band threshold in bytes.
    #[getter]
    fn threshold(&self) -> usize {
        self.encoder.threshold()
    }

    /// The store's socket, if any.
    #[getter]
    fn store_socket(&self) -> Option<PathBuf> {
        self.encoder.store().socket().map(PathBuf::from)
    }

    /// The store's counters (`hprm-store stats`), as a dict.
    fn store_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let client = self.client(py)?;
        let s = py
            .allow_threads(|| client.stats())
            .map_err(|e| PayloadError::new_err(format!("store stats failed: {e}")))?;
        let d = PyDict::new(py);
        let fields: [(&str, u64); 17] = [
            ("capacity", s.capacity),
            ("bytes_in_use", s.bytes_in_use),
            ("largest_free_block", s.largest_free_block),
            ("objects_created", s.objects_created),
            ("objects_sealed", s.objects_sealed),
            ("objects_delete_pending", s.objects_delete_pending),
            ("objects_referenced", s.objects_referenced),
            ("clients", s.clients),
            ("subscribers", s.subscribers),
            ("waiting_gets", s.waiting_gets),
            ("pending_deliveries", s.pending_deliveries),
            ("expired_deliveries", s.expired_deliveries),
            ("evictions", s.evictions),
            ("evicted_bytes", s.evicted_bytes),
            ("bytes_reserved", s.bytes_reserved),
            ("arena_size", client.arena_size()),
            ("client_id", client.client_id()),
        ];
        for (k, v) in fields {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Every object in the store (`hprm-store list`), as dicts: id, size,
    /// sealed, ref_count, pending_deliveries, delete_pending, age_ms.
    fn store_objects<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let client = self.client(py)?;
        let objects =
            py.allow_threads(|| client.list()).map_err(|e| PayloadError::new_err(format!("store list failed: {e}")))?;
        let list = PyList::empty(py);
        for o in objects {
            let d = PyDict::new(py);
            d.set_item("id", o.id.to_string())?;
            d.set_item("size", o.placement.data_size)?;
            d.set_item("sealed", o.sealed)?;
            d.set_item("ref_count", o.ref_count)?;
            d.set_item("pending_deliveries", o.pending_deliveries)?;
            d.set_item("delete_pending", o.delete_pending)?;
            d.set_item("age_ms", o.age_ms)?;
            list.append(d)?;
        }
        Ok(list)
    }

    fn __repr__(&self) -> String {
        match self.encoder.store().socket() {
            Some(s) => {
                format!("Codec(store_socket={:?}, threshold={})", s.display().to_string(), self.encoder.threshold())
            }
            None => format!("Codec(store_socket=None, threshold={})", self.encoder.threshold()),
        }
    }
}

impl Codec {
    /// The codec's store connection (opened, without the GIL, if need be).
    fn client(&self, py: Python<'_>) -> PyResult<hprm_store::StoreClient> {
        let store = self.encoder.store();
        match py.allow_threads(|| store.client()) {
            Ok(Some(client)) => Ok(client),
            Ok(None) => Err(PayloadError::new_err("this codec has no store (Codec(store_socket=...))")),
            Err(e) => Err(payload_error(e)),
        }
    }
}

/// The context manager of [`Codec::store_memory`]; pinned to the thread
/// that made it (a scope is per thread).
#[pyclass(module = "hprm._native", unsendable)]
pub struct StoreMemory {
    store: StoreLink,
    threshold: usize,
    scope: Option<crate::store_memory::Scope>,
}

#[pymethods]
impl StoreMemory {
    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        if slf.scope.is_some() {
            return Err(PyValueError::new_err(
                "this store_memory() scope is already open; open a new one with codec.store_memory()",
            ));
        }
        let scope = crate::store_memory::Scope::enter(slf.py(), &slf.store, slf.threshold)?;
        slf.scope = scope;
        Ok(slf)
    }

    fn __exit__(&mut self, py: Python<'_>, _ty: PyObject, _value: PyObject, _tb: PyObject) -> PyResult<bool> {
        if let Some(scope) = self.scope.take() {
            scope.exit(py)?;
        }
        Ok(false)
    }
}

/// `_store_object_at(address, nbytes) -> str | None`: the id of the store
/// object holding the `nbytes` at `address` when numpy allocated them in
/// the store (an array made inside a reaction); for `hprm.store_object_id`.
#[pyfunction]
fn _store_object_at(address: usize, nbytes: usize) -> Option<String> {
    crate::store_memory::object_at(address, nbytes).map(|id| id.to_string())
}

/// `_rust_encode_example(store_socket=None, deliveries=1, threshold=65536)
/// -> bytes`: hprm_node's conformance `Sample` encoded by the Rust encoder
/// (see `hprm_node::payload::conformance` for its contents).
#[pyfunction]
#[pyo3(signature = (store_socket = None, deliveries = 1, threshold = DEFAULT_THRESHOLD))]
fn _rust_encode_example<'py>(
    py: Python<'py>,
    store_socket: Option<PathBuf>,
    deliveries: u32,
    threshold: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let encoder = Encoder::new(StoreLink::new(store_socket), threshold);
    let bytes = py.allow_threads(|| encoder.encode(&Sample::new(), deliveries)).map_err(payload_error)?;
    Ok(PyBytes::new(py, &bytes))
}

/// `_rust_decode_check(data, store_socket=None) -> dict`: decodes `data`
/// as the Rust conformance `Sample` (raising PayloadError as a Rust node
/// would fail) and compares it with the reference: `{"equal": bool,
/// "differs": [field names], "shared": [buffer fields read zero-copy from
/// the store], "debug": str}`.
#[pyfunction]
#[pyo3(signature = (data, store_socket = None))]
fn _rust_decode_check<'py>(
    py: Python<'py>,
    data: &[u8],
    store_socket: Option<PathBuf>,
) -> PyResult<Bound<'py, PyDict>> {
    let decoder = Decoder::new(StoreLink::new(store_socket), DEFAULT_GET_TIMEOUT);
    let got: Sample = py.allow_threads(|| decoder.decode(data)).map_err(payload_error)?;
    let want = Sample::new();
    let mut differs = Vec::new();
    macro_rules! compare {
        ($($field:ident),*) => {$(
            if got.$field != want.$field {
                differs.push(stringify!($field));
            }
        )*};
    }
    compare!(seq, name, gain, pixels, depth, ranges, tags, pose, limits, note, blob, raw);
    let shared: Vec<&str> = [("pixels", &got.pixels), ("depth", &got.depth), ("raw", &got.raw)]
        .into_iter()
        .filter(|(_, b)| b.is_shared())
        .map(|(n, _)| n)
        .collect();
    let d = PyDict::new(py);
    d.set_item("equal", got == want)?;
    d.set_item("differs", differs)?;
    d.set_item("shared", shared)?;
    d.set_item("debug", format!("{got:?}"))?;
    Ok(d)
}

/// `_rust_decode_buffer(data, store_socket=None) -> (dtype, shape, bytes,
/// shared)`: decodes `data` as one Rust `Buffer`, as a Rust port of that
/// type would.
#[pyfunction]
#[pyo3(signature = (data, store_socket = None))]
fn _rust_decode_buffer<'py>(
    py: Python<'py>,
    data: &[u8],
    store_socket: Option<PathBuf>,
) -> PyResult<(String, Vec<usize>, Bound<'py, PyBytes>, bool)> {
    let decoder = Decoder::new(StoreLink::new(store_socket), DEFAULT_GET_TIMEOUT);
    let buffer: Buffer = py.allow_threads(|| decoder.decode(data)).map_err(payload_error)?;
    Ok((buffer.dtype().to_string(), buffer.shape().to_vec(), PyBytes::new(py, buffer.bytes()), buffer.is_shared()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("PayloadError", m.py().get_type::<PayloadError>())?;
    m.add("StoreLostError", m.py().get_type::<StoreLostError>())?;
    m.add_class::<Codec>()?;
    m.add_class::<StoreMemory>()?;
    m.add_function(wrap_pyfunction!(_store_object_at, m)?)?;
    m.add_function(wrap_pyfunction!(_rust_encode_example, m)?)?;
    m.add_function(wrap_pyfunction!(_rust_decode_check, m)?)?;
    m.add_function(wrap_pyfunction!(_rust_decode_buffer, m)?)?;
    Ok(())
}
