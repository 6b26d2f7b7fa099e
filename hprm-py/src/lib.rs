//! # hprm-py: the Python SDK's native half
//!
//! The `hprm` Python package (`python/hprm/`) is thin: reactors, ports and
//! programs are declared in Python and run on the Rust runtime
//! (`hprm-node`) through this extension module, `hprm._native`.
//!
//! - `codec`: Python values to payload bytes and back: the adaptive
//!   serializer (scalars in-band as MessagePack, numpy arrays and large
//!   byte buffers out-of-band through the object store, pickle 5 for the
//!   rest), the same wire format as `hprm_node::payload`.
//! - `arrow`: pyarrow values imported through the Arrow C data interface,
//!   so that hprm-node's Arrow IPC writer writes their streams.
//! - `view`: read-only Python buffers over store objects, the base of the
//!   zero-copy numpy arrays receivers get.
//! - `store_memory`: numpy's memory handler inside reactions, so large
//!   arrays a reaction makes are born in the store and sent without a copy.
//! - `runtime`: programs of Python reactors, run by `hprm_node`.

use pyo3::prelude::*;

mod arrow;
pub mod codec;
mod runtime;
mod store_memory;
mod view;

// Safe without the GIL (free-threaded CPython, 3.13t; tested by
// `scripts/free-threaded.sh`): the classes threads share (`Codec`,
// `SharedBuffer`, `LoanView`, `PhysicalScheduler`) are frozen or keep their
// state behind their own locks; the program being declared is used through
// `&mut` only (pyo3's borrow flag: one thread at a time); a reaction's
// context is `unsendable`, pinned to its thread; and a
// reactor's Python state is only touched by its reactions, which the
// runtime never runs two at a time.
#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    codec::register(m)?;
    arrow::register(m)?;
    view::register(m)?;
    runtime::register(m)?;
    Ok(())
}
