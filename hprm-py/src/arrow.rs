//! pyarrow values imported into arrow-rs through the Arrow C data
//! interface, so that hprm-node's IPC writer (`hprm_node::payload::Arrow`,
//! the one place the ext 5 stream's layout is written) writes their stream
//! straight into the store object sent; and received record batches and
//! arrays read by hprm-node's reader over the store object and exported to
//! pyarrow through the same interface ([`read`]).
//!
//! Why: pyarrow's own writer costs a dozen Python-level calls per message
//! (a writer made, the schema message written, each batch), and those run
//! with cold caches at a hop's pace; here the Python side is one call
//! (`__arrow_c_array__` or `__arrow_c_stream__`, the PyCapsule protocol,
//! pyarrow 14 and later) and the rest is Rust. The buffers are not copied by
//! the import: arrow-rs's buffers point into pyarrow's memory and keep it
//! alive (through the exported array's release callback) until the stream
//! is written.
//!
//! What this path takes ([`import`]): a `RecordBatch`, `Table`, `Array` or
//! `ChunkedArray` whose every column is of a type hprm-node frames in place
//! ([`Arrow::framed_in_place`]: every type but the view types, unions and
//! run-end encoded ones). What it leaves to the Python writer
//! (`hprm._arrow.plan_ipc`), which then writes exactly what it wrote before:
//! - those other types (arrow-ipc's encoder would copy each buffer twice;
//!   pyarrow's writer copies once);
//! - ordered dictionaries (arrow-rs 54's import drops the `ordered` flag),
//!   and types arrow-rs 54 cannot import (list views, 32- and 64-bit
//!   decimals);
//! - subclasses of the four types, and a pyarrow without the capsule
//!   protocol.
//!
//! The counts of values each writer and the Rust reader took are kept
//! (`_arrow_writers`, `_arrow_readers`), for the tests that check which
//! path a value took.

use std::ffi::{CStr, CString};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::ffi::{from_ffi_and_data_type, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{make_array, Array, RecordBatch, RecordBatchOptions, StructArray};
use arrow_data::ArrayData;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use hprm_node::payload::{Arrow, ArrowKind};
use hprm_store::Object;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyCapsule, PyType};

static RECORD_BATCH: GILOnceCell<Py<PyType>> = GILOnceCell::new();
static TABLE: GILOnceCell<Py<PyType>> = GILOnceCell::new();
static ARRAY: GILOnceCell<Py<PyType>> = GILOnceCell::new();
static CHUNKED_ARRAY: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// Values whose stream this module's path wrote, and values it left to the
/// Python writer (`_arrow_writers`).
static WRITTEN_BY_RUST: AtomicU64 = AtomicU64::new(0);
static LEFT_TO_PYTHON: AtomicU64 = AtomicU64::new(0);
/// Values read by [`read`], for the tests (`_arrow_readers`).
static READ_BY_RUST: AtomicU64 = AtomicU64::new(0);

/// Most schemas kept (a program sends one schema per output, rarely more).
const MOST_KEPT: usize = 16;

/// Schemas imported before, most recent first: an imported schema equal to
/// one of them is replaced by it. Besides sparing the allocation, this
/// keeps the schema message's bytes the same message after message, which
/// the receiver's cache (`hprm._arrow._receiving`, keyed by those bytes)
/// needs: arrow-rs keeps metadata in a `HashMap`, whose order (the order
/// the keys are written in) differs between two maps built alike.
static KEPT: Mutex<Vec<SchemaRef>> = Mutex::new(Vec::new());

/// Counts a value the codec wrote through [`import`]'s [`Arrow`] (`true`)
/// or through the Python writer (`false`).
pub(crate) fn count(by_rust: bool) {
    let counter = if by_rust { &WRITTEN_BY_RUST } else { &LEFT_TO_PYTHON };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// `v` (whose type is one of pyarrow's) as an [`Arrow`] value of its kind,
/// its buffers still pyarrow's memory; `None` where the Python writer must
/// take it (the module docs list when, and a debug log says why).
pub(crate) fn import(v: &Bound<'_, PyAny>) -> PyResult<Option<Arrow>> {
    let py = v.py();
    let ty = v.get_type();
    // Exact types: a subclass may export something else than it holds.
    let kind = if ty.is(RECORD_BATCH.import(py, "pyarrow", "RecordBatch")?) {
        ArrowKind::Batch
    } else if ty.is(TABLE.import(py, "pyarrow", "Table")?) {
        ArrowKind::Table
    } else if ty.is(CHUNKED_ARRAY.import(py, "pyarrow", "ChunkedArray")?) {
        ArrowKind::Chunked
    } else if v.is_instance(ARRAY.import(py, "pyarrow", "Array")?)? && is_pyarrow_own(&ty)? {
        // `pa.Array` itself is abstract: values are of its typed
        // subclasses (`Int64Array`, `StructArray`, ...), all pyarrow's.
        ArrowKind::Array
    } else {
        return Ok(None);
    };
    let imported = match kind {
        ArrowKind::Batch | ArrowKind::Array => {
            let exported = v.call_method0(intern!(py, "__arrow_c_array__"));
            exported.map_err(|e| e.to_string()).and_then(|pair| from_array_capsules(&pair, kind))
        }
        ArrowKind::Table | ArrowKind::Chunked => {
            let exported = v.call_method0(intern!(py, "__arrow_c_stream__"));
            exported.map_err(|e| e.to_string()).and_then(|capsule| from_stream_capsule(&capsule, kind))
        }
    };
    let arrow = match imported {
        Ok(arrow) if arrow.framed_in_place() => arrow,
        Ok(_) => {
            tracing::debug!("a pyarrow {} of a type not framed in place: written by pyarrow", kind.as_str());
            return Ok(None);
        }
        Err(why) => {
            tracing::debug!("a pyarrow {} not imported ({why}): written by pyarrow", kind.as_str());
            return Ok(None);
        }
    };
    Ok(Some(arrow))
}

/// Whether `ty` is defined by pyarrow itself.
fn is_pyarrow_own(ty: &Bound<'_, PyType>) -> PyResult<bool> {
    let module = ty.getattr(intern!(ty.py(), "__module__"))?;
    Ok(module.extract::<&str>().is_ok_and(|m| m == "pyarrow.lib"))
}

/// The pointer a capsule named `name` holds.
fn capsule_pointer<T>(capsule: &Bound<'_, PyAny>, name: &CStr) -> Result<*mut T, String> {
    let capsule = capsule.downcast::<PyCapsule>().map_err(|e| e.to_string())?;
    let named = capsule.name().map_err(|e| e.to_string())?;
    if named != Some(name) {
        return Err(format!("a capsule named {named:?} where {name:?} was expected"));
    }
    let pointer = capsule.pointer().cast::<T>();
    if pointer.is_null() {
        return Err(format!("an empty {name:?} capsule"));
    }
    Ok(pointer)
}

/// A `RecordBatch` or `Array` from the pair `__arrow_c_array__` gave.
fn from_array_capsules(pair: &Bound<'_, PyAny>, kind: ArrowKind) -> Result<Arrow, String> {
    let (schema_capsule, array_capsule): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
        pair.extract().map_err(|e| e.to_string())?;
    let schema = capsule_pointer::<FFI_ArrowSchema>(&schema_capsule, c"arrow_schema")?;
    let array = capsule_pointer::<FFI_ArrowArray>(&array_capsule, c"arrow_array")?;
    // SAFETY: the capsule holds a valid exported schema (the PyCapsule
    // protocol), which it releases when collected: `schema_capsule` is
    // alive for this whole function, and nothing imported keeps a
    // reference into the schema (arrow-rs copies what it reads).
    let schema = unsafe { &*schema };
    check_importable(schema)?;
    // SAFETY: a valid exported array; `from_raw` moves it out and leaves a
    // released one in its place, so that the capsule's destructor does
    // not release it again (the protocol's way to consume it).
    let array = unsafe { FFI_ArrowArray::from_raw(array) };
    let arrow = if kind == ArrowKind::Batch {
        let schema = Schema::try_from(schema).map_err(|e| e.to_string())?;
        let data_type = DataType::Struct(schema.fields().clone());
        // SAFETY: pyarrow exported the array with this schema.
        let data = unsafe { from_ffi_and_data_type(array, data_type) }.map_err(|e| e.to_string())?;
        let batch = batch(kept(schema), &columns_of(data)).map_err(|e| e.to_string())?;
        Arrow::from_batch(batch)
    } else {
        let field = Field::try_from(schema).map_err(|e| e.to_string())?;
        let schema = kept(values_schema(&field));
        // SAFETY: as above.
        let data = unsafe { from_ffi_and_data_type(array, field.data_type().clone()) }.map_err(|e| e.to_string())?;
        let batch = batch(schema.clone(), &[normalized(data)]).map_err(|e| e.to_string())?;
        Arrow::from_batches(schema, vec![batch]).and_then(|a| a.with_kind(kind)).map_err(|e| e.to_string())?
    };
    Ok(arrow)
}

/// A `Table` or `ChunkedArray` from the stream `__arrow_c_stream__` gave:
/// a table's batches, or a chunked array's chunks as batches of one column.
fn from_stream_capsule(capsule: &Bound<'_, PyAny>, kind: ArrowKind) -> Result<Arrow, String> {
    let raw = capsule_pointer::<FFI_ArrowArrayStream>(capsule, c"arrow_array_stream")?;
    // SAFETY: a valid exported stream; moved out as an array is (see
    // `from_array_capsules`), and released when `stream` is dropped.
    let mut stream = unsafe { FFI_ArrowArrayStream::from_raw(raw) };
    let mut ffi_schema = FFI_ArrowSchema::empty();
    let get_schema = stream.get_schema.ok_or("a released stream")?;
    // SAFETY: the stream's own callback, given the stream and an empty
    // schema to fill.
    let rc = unsafe { get_schema(&mut stream, &mut ffi_schema) };
    if rc != 0 {
        return Err(stream_error(&mut stream, rc));
    }
    check_importable(&ffi_schema)?;
    let (schema, data_type) = if kind == ArrowKind::Table {
        let schema = Schema::try_from(&ffi_schema).map_err(|e| e.to_string())?;
        let data_type = DataType::Struct(schema.fields().clone());
        (kept(schema), data_type)
    } else {
        let field = Field::try_from(&ffi_schema).map_err(|e| e.to_string())?;
        (kept(values_schema(&field)), field.data_type().clone())
    };
    let get_next = stream.get_next.ok_or("a released stream")?;
    let mut batches = Vec::new();
    loop {
        let mut array = FFI_ArrowArray::empty();
        // SAFETY: as `get_schema`; a released array back ends the stream.
        let rc = unsafe { get_next(&mut stream, &mut array) };
        if rc != 0 {
            return Err(stream_error(&mut stream, rc));
        }
        if array.is_released() {
            break;
        }
        // SAFETY: pyarrow exported each array of the stream with its schema.
        let data = unsafe { from_ffi_and_data_type(array, data_type.clone()) }.map_err(|e| e.to_string())?;
        let columns = if kind == ArrowKind::Table { columns_of(data) } else { vec![normalized(data)] };
        batches.push(batch(schema.clone(), &columns).map_err(|e| e.to_string())?);
    }
    Arrow::from_batches(schema, batches).and_then(|a| a.with_kind(kind)).map_err(|e| e.to_string())
}

/// What a failed stream callback said.
fn stream_error(stream: &mut FFI_ArrowArrayStream, rc: i32) -> String {
    let said = stream.get_last_error.and_then(|get_last_error| {
        // SAFETY: the stream's own callback; the text it returns lives
        // until the next call on the stream, and is copied at once.
        let text = unsafe { get_last_error(stream) };
        // SAFETY: null, or a NUL-terminated string.
        (!text.is_null()).then(|| unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned())
    });
    format!("the exported stream failed (error {rc}): {}", said.unwrap_or_default())
}

/// Refuses, before anything is imported, what arrow-rs 54 would import
/// wrongly: dictionaries marked ordered (its `Field` import leaves the flag
/// out, so the receiver would get an unordered dictionary type).
fn check_importable(schema: &FFI_ArrowSchema) -> Result<(), String> {
    if schema.dictionary_ordered() {
        return Err("an ordered dictionary (arrow-rs 54 imports it unordered)".into());
    }
    if let Some(dictionary) = schema.dictionary() {
        check_importable(dictionary)?;
    }
    schema.children().try_for_each(check_importable)
}

/// The schema of an array sent alone: one column named `values`, as
/// `hprm._arrow` and hprm-node's `Arrow::from_array` write it (nullable;
/// the field's metadata kept: an extension type's name travels there).
fn values_schema(field: &Field) -> Schema {
    let values = Field::new("values", field.data_type().clone(), true).with_metadata(field.metadata().clone());
    Schema::new(vec![values])
}

/// `schema`, or the equal one imported before ([`KEPT`]).
fn kept(schema: Schema) -> SchemaRef {
    let mut kept = KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(at) = kept.iter().position(|k| **k == schema) {
        let known = kept.remove(at);
        kept.insert(0, known.clone());
        return known;
    }
    let schema = Arc::new(schema);
    kept.truncate(MOST_KEPT - 1);
    kept.insert(0, schema.clone());
    schema
}

/// The columns of a record batch imported as a struct array.
fn columns_of(data: ArrayData) -> Vec<ArrayData> {
    normalized(data).child_data().to_vec()
}

/// A batch of `columns` under `schema`, with its row count given (a batch
/// may have no column).
fn batch(schema: SchemaRef, columns: &[ArrayData]) -> Result<RecordBatch, ArrowError> {
    let rows = columns.first().map(ArrayData::len);
    let columns = columns.iter().cloned().map(make_array).collect();
    let options = RecordBatchOptions::new().with_row_count(rows);
    RecordBatch::try_new_with_options(schema, columns, &options)
}

/// `data` as arrow-rs lays an array out. The C data interface (and Arrow
/// C++) gives a struct array's offset and its children unsliced; arrow-rs
/// keeps a struct's children already sliced to its rows (`ArrayData::slice`
/// slices them, `StructArray` reads them from their start), and its import
/// (54) keeps what it was given: a sliced struct column would read the
/// wrong rows. So each struct's children are sliced here, at any depth.
/// Other children (lists', maps', dictionaries' values) are reached
/// through offsets or indices and stay whole, as in arrow-rs.
fn normalized(data: ArrayData) -> ArrayData {
    if data.child_data().is_empty() {
        return data;
    }
    let children = data.child_data().iter().cloned().map(normalized);
    let children: Vec<ArrayData> = if let DataType::Struct(_) = data.data_type() {
        let (offset, len) = (data.offset(), data.len());
        children.map(|child| child.slice(offset, len)).collect()
    } else {
        children.collect()
    };
    // SAFETY: the same array, its struct children sliced to its rows: what
    // `ArrayData::slice` would have built from an unsliced struct.
    unsafe { data.into_builder().child_data(children).build_unchecked() }
}

/// The pyarrow `RecordBatch` or `Array` a received stream (a store object)
/// holds, read by hprm-node's reader (`Arrow::from_memory`: zero-copy, the
/// columns' buffers are slices of the object, which they keep until pyarrow
/// releases the last of them) and handed to pyarrow through the Arrow C
/// data interface; `None` for what `hprm._arrow.from_ipc` reads instead
/// (tables and chunked arrays, several batches, maps with keys marked
/// sorted, a stream this reader refuses: the Python reader then says what
/// is wrong with it).
///
/// Why: pyarrow's stream reading, driven from Python, costs some 100 us
/// per message with cold caches (a hop's pace); the C data interface's
/// import is one call.
pub(crate) fn read(py: Python<'_>, object: Arc<Object>) -> PyResult<Option<Bound<'_, PyAny>>> {
    let owner = Arc::new(AssertUnwindSafe(object.clone()));
    // A stream the reader refuses, or (a malformed one) panics on, is left
    // to from_ipc, which raises an error saying what is wrong with it.
    // SAFETY: a received object is sealed (never written again) and stays
    // mapped while the `Arc` (the owner) lives.
    let read = std::panic::catch_unwind(AssertUnwindSafe(|| unsafe { Arrow::from_memory(object.data(), owner) }));
    let Ok(Ok(arrow)) = read else { return Ok(None) };
    if arrow.schema().fields().iter().any(|f| has_sorted_map(f.data_type())) {
        return Ok(None);
    }
    let (class, schema, data) = match (arrow.kind(), arrow.batches()) {
        // A batch of no column would lose its row count as a struct array.
        (ArrowKind::Batch, [batch]) if batch.num_columns() > 0 => (
            RECORD_BATCH.import(py, "pyarrow", "RecordBatch")?,
            FFI_ArrowSchema::try_from(batch.schema().as_ref()),
            StructArray::from(batch.clone()).into_data(),
        ),
        (ArrowKind::Array, [batch]) if batch.num_columns() == 1 => (
            ARRAY.import(py, "pyarrow", "Array")?,
            FFI_ArrowSchema::try_from(batch.schema().field(0)),
            batch.column(0).to_data(),
        ),
        _ => return Ok(None),
    };
    // A pyarrow without the capsule protocol (before 14): from_ipc.
    let (Ok(import), Ok(schema)) = (class.getattr(intern!(py, "_import_from_c_capsule")), schema) else {
        return Ok(None);
    };
    let array = FFI_ArrowArray::new(&data);
    match import.call1((capsule(py, schema, "arrow_schema")?, capsule(py, array, "arrow_array")?)) {
        Ok(value) => {
            READ_BY_RUST.fetch_add(1, Ordering::Relaxed);
            Ok(Some(value))
        }
        // What pyarrow cannot import from arrow-rs, it reads from the stream.
        Err(e) => {
            tracing::debug!("pyarrow did not import a received {} ({e}): read by from_ipc", arrow.kind().as_str());
            Ok(None)
        }
    }
}

/// Whether `data_type` is or holds a map whose keys are marked sorted:
/// arrow-rs 54's export of a field overwrites the flag that says so (its
/// `Field` conversion sets the field's flags after the type's), so pyarrow
/// would get an unsorted map type; such values are read by `from_ipc`.
fn has_sorted_map(data_type: &DataType) -> bool {
    match data_type {
        DataType::Map(_, true) => true,
        DataType::Map(f, false)
        | DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::ListView(f)
        | DataType::LargeListView(f) => has_sorted_map(f.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| has_sorted_map(f.data_type())),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| has_sorted_map(f.data_type())),
        DataType::Dictionary(_, values) => has_sorted_map(values),
        DataType::RunEndEncoded(_, values) => has_sorted_map(values.data_type()),
        _ => false,
    }
}

/// A PyCapsule named `name` holding `value` (the C data interface's way):
/// the consumer moves the struct out, leaving a released one, which the
/// capsule's drop then leaves alone; unconsumed, the drop releases it.
fn capsule<'py, T: 'static + Send>(py: Python<'py>, value: T, name: &str) -> PyResult<Bound<'py, PyCapsule>> {
    let name = CString::new(name).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    PyCapsule::new(py, value, Some(name))
}

/// `_arrow_readers()`: how many pyarrow values this process's codecs have
/// read through [`read`] (the others were read by `hprm._arrow.from_ipc`).
#[pyfunction]
fn _arrow_readers() -> u64 {
    READ_BY_RUST.load(Ordering::Relaxed)
}

/// `_arrow_writers()`: how many pyarrow values this process's codecs have
/// had written by the Rust writer and by pyarrow's, `(rust, python)`; for
/// the tests that check which path a value took.
#[pyfunction]
fn _arrow_writers() -> (u64, u64) {
    (WRITTEN_BY_RUST.load(Ordering::Relaxed), LEFT_TO_PYTHON.load(Ordering::Relaxed))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_arrow_writers, m)?)?;
    m.add_function(wrap_pyfunction!(_arrow_readers, m)?)
}
