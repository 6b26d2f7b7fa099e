"""pyarrow values as Arrow IPC streams (ext 5 of the wire format).

The codec has hprm-node's writer write the stream of most pyarrow values
(imported through the Arrow C data interface: ``hprm-py/src/arrow.rs``,
whose docs list what it leaves here); for the rest it calls ``plan_ipc``
and writes the stream with pyarrow straight into the buffer it sends (a
store object when large), in the same format. A received record batch or
array in the store is read in Rust too (over the object, handed to pyarrow
through the C data interface); ``from_ipc`` reads the rest (tables, chunked
arrays, inline streams, ``copy=True``), rebuilding the object over the
received bytes without copying them (pyarrow's arrays then point into the
store's shared memory). The schema's metadata key
``hprm.kind`` carries what the sender had, so a table comes back a table,
a record batch a record batch, an array an array.

Both sides keep what a repeated schema costs out of the per-message path
(an output sends one schema message after message): the sender measures
the stream from the schema message's size, learnt once per schema, plus
each batch's size (``get_record_batch_size``), instead of writing the whole
stream twice; the receiver reads the schema message once per schema and
each batch message against it (``read_record_batch``), instead of opening
a stream reader per message. Streams with dictionaries (whose dictionary
messages vary per message), and any stream these fast paths do not
recognise, take the general path: a measuring pass, and
``pyarrow.ipc.open_stream``.
"""

from __future__ import annotations

from struct import error as StructError
from struct import unpack_from
from typing import Any, Callable, NamedTuple

KIND = b"hprm.kind"

# An IPC message's prefix: this marker, then the int32 length of its
# flatbuffer header (padded to 8 bytes); a zero length ends the stream.
CONTINUATION = 0xFFFFFFFF
# The flatbuffer Message's header types (Arrow's Message.fbs) read here.
RECORD_BATCH = 3

# Most schemas each side remembers; past that the cache starts over (a
# program has one schema per output, rarely more).
MOST_RECEIVING = 64


class _Sending(NamedTuple):
    """What a sender learnt of one (schema, kind): the schema written (with
    ``hprm.kind``), the size of its schema message, and whether its streams
    can be measured without a pass (no dictionaries)."""

    schema: Any
    schema_size: int
    measurable: bool


class _Receiving(NamedTuple):
    """What a receiver learnt of one schema message: the schema given back
    (without ``hprm.kind``), the kind, and whether its batches can be read
    one message at a time (no dictionaries)."""

    schema: Any
    kind: bytes
    direct: bool


# (kind, schema as given, what was learnt), most recent first. Looked up by
# `equals(check_metadata=True)`: pyarrow's `==` and hash leave metadata out,
# and the metadata is part of what is written. Replaced whole, never
# changed in place, so threads (free-threaded Python) read it safely.
_SENDING: tuple[tuple[bytes, Any, _Sending], ...] = ()
MOST_SENDING = 16
# The schema message's bytes -> _Receiving.
_RECEIVING: dict[bytes, _Receiving] = {}


def _has_dictionary(t: Any) -> bool:
    """Whether type `t` is, or holds at any depth, a dictionary type (whose
    values travel in dictionary messages of their own). True when unsure:
    the general path reads anything."""
    import pyarrow as pa

    try:
        if pa.types.is_dictionary(t):
            return True
        if isinstance(t, pa.BaseExtensionType):
            return _has_dictionary(t.storage_type)
        return any(_has_dictionary(t.field(i).type) for i in range(t.num_fields))
    except (AttributeError, TypeError, IndexError):
        return True


def _sending(kind: bytes, schema: Any) -> _Sending:
    global _SENDING
    for known_kind, known_schema, known in _SENDING:
        if known_kind == kind and (known_schema is schema or known_schema.equals(schema, check_metadata=True)):
            return known
    metadata = dict(schema.metadata or {})
    metadata[KIND] = kind
    tagged = schema.with_metadata(metadata)
    measurable = not any(_has_dictionary(f.type) for f in schema)
    known = _Sending(tagged, tagged.serialize().size, measurable)
    _SENDING = ((kind, schema, known),) + _SENDING[: MOST_SENDING - 1]
    return known


def plan_ipc(obj: Any) -> tuple[int, Callable[[Any], None]] | None:
    """The size of the Arrow IPC stream of a pyarrow Table, RecordBatch,
    Array or ChunkedArray, and a function that writes that stream into a
    writable buffer of exactly that size; None for anything else.

    The codec creates the store object of that size and has the function
    write the stream straight into it (the Arrow buffers copied once, into
    the object that is sent). Measured without writing anything where the
    schema has no dictionaries: the schema message's size (learnt once per
    schema), each batch message's (``get_record_batch_size``, which lays out
    the header without touching the data) and the end-of-stream marker;
    else by a pass that counts the bytes of the whole stream."""
    import pyarrow as pa

    if isinstance(obj, pa.RecordBatch):
        kind, batches, schema = b"batch", [obj], obj.schema
    elif isinstance(obj, pa.Table):
        kind, batches, schema = b"table", obj.to_batches(), obj.schema
    elif isinstance(obj, pa.ChunkedArray):
        table = pa.table({"values": obj})
        kind, batches, schema = b"chunked", table.to_batches(), table.schema
    elif isinstance(obj, pa.Array):
        batch = pa.RecordBatch.from_arrays([obj], names=["values"])
        kind, batches, schema = b"array", [batch], batch.schema
    else:
        return None
    plan = _sending(kind, schema)

    # The writer compares each batch's schema with its own without the
    # metadata, so the batches go as they are, under the tagged schema.
    def stream_into(sink: Any) -> None:
        with pa.ipc.new_stream(sink, plan.schema) as writer:
            for batch in batches:
                writer.write_batch(batch)

    if plan.measurable:
        size = plan.schema_size + sum(pa.ipc.get_record_batch_size(b) for b in batches) + 8
    else:
        mock = pa.MockOutputStream()
        stream_into(mock)
        size = mock.size()

    def write(target: Any) -> None:
        # Nothing over `target` outlives the call, even on an error: the
        # error raised carries the text of what failed, not its traceback
        # (whose frames would keep the sink). The codec then releases the
        # buffer it lent, which fails while anything still exports it.
        failed = None
        sink = None
        try:
            sink = pa.FixedSizeBufferWriter(pa.py_buffer(target))
            stream_into(sink)
            if sink.tell() != size:
                failed = f"{sink.tell()} bytes written where {size} were measured"
        except Exception as e:  # noqa: BLE001 -- re-raised below, as text
            failed = f"{type(e).__name__}: {e}"
        sink = None
        if failed is not None:
            raise RuntimeError(f"writing the Arrow IPC stream failed: {failed}")

    return size, write


def to_ipc(obj: Any) -> Any:
    """The Arrow IPC stream of a pyarrow Table, RecordBatch, Array or
    ChunkedArray, as a numpy uint8 array (``plan_ipc`` written into it), or
    None for anything else. Inside ``store_memory`` a large one is a store
    object. (The codec does not call this: it writes the stream straight
    into the object it sends.)"""
    import numpy as np

    plan = plan_ipc(obj)
    if plan is None:
        return None
    size, write = plan
    stream = np.empty(size, np.uint8)
    write(stream)
    return stream


def _message(raw: Any, at: int, end: int) -> tuple[int, int] | None:
    """The header type and the end of the IPC message at `at` (a
    continuation-marked one), or None at the end of the stream. Reads the
    flatbuffer Message table's `header_type` (field 1) and `bodyLength`
    (field 3) by hand; raises ValueError where it is not such a message."""
    marker, length = unpack_from("<Ii", raw, at)
    if marker != CONTINUATION or length < 0:
        raise ValueError("not a continuation-marked message")
    if length == 0:
        return None
    start = at + 8
    stop = start + length
    table = start + unpack_from("<I", raw, start)[0]
    vtable = table - unpack_from("<i", raw, table)[0]
    if not (start <= vtable < stop and start <= table < stop):
        raise ValueError("a message header out of its bounds")
    vtable_size = unpack_from("<H", raw, vtable)[0]

    def field(i: int) -> int:
        slot = 4 + 2 * i
        return unpack_from("<H", raw, vtable + slot)[0] if slot < vtable_size else 0

    header_type = raw[table + field(1)] if field(1) else 0
    body = unpack_from("<q", raw, table + field(3))[0] if field(3) else 0
    if body < 0 or stop + body > end:
        raise ValueError("a message body past the stream's end")
    return header_type, stop + body


def _receiving(head: bytes) -> _Receiving:
    import pyarrow as pa

    known = _RECEIVING.get(head)
    if known is None:
        schema = pa.ipc.read_schema(pa.py_buffer(head))
        metadata = dict(schema.metadata or {})
        kind = metadata.pop(KIND, b"table")
        direct = not any(_has_dictionary(f.type) for f in schema)
        known = _Receiving(schema.with_metadata(metadata) if metadata else schema.remove_metadata(), kind, direct)
        if len(_RECEIVING) >= MOST_RECEIVING:
            _RECEIVING.clear()
        _RECEIVING[head] = known
    return known


def _direct(buffer: Any) -> tuple[bytes, Any, list[Any]] | None:
    """The kind, schema and batches of a stream read one message at a time
    against its schema message's cached schema; None where the stream has
    other messages than record batches (dictionaries) or is not laid out as
    every HPRM writer lays it out (continuation markers, schema first)."""
    import pyarrow as pa

    raw = memoryview(buffer).cast("B") if not isinstance(buffer, bytes) else buffer
    end = len(raw)
    try:
        marker, length = unpack_from("<Ii", raw, 0)
        if marker != CONTINUATION or length <= 0 or 8 + length > end:
            return None
        at = 8 + length
        known = _receiving(bytes(raw[:at]))
        if not known.direct:
            return None
        whole = pa.py_buffer(buffer)
        batches = []
        while at < end:
            message = _message(raw, at, end)
            if message is None:
                break
            header_type, next_at = message
            if header_type != RECORD_BATCH:
                return None
            batches.append(pa.ipc.read_record_batch(whole.slice(at, next_at - at), known.schema))
            at = next_at
        return known.kind, known.schema, batches
    except (StructError, ValueError, IndexError, pa.ArrowException):
        # The general path reads it, or says what is wrong with it.
        return None


def from_ipc(buffer: Any) -> Any:
    """The pyarrow object an ``to_ipc`` stream holds, over ``buffer``'s
    memory (no copy)."""
    import pyarrow as pa

    read = _direct(buffer)
    if read is not None:
        kind, schema, batches = read
        if kind in (b"batch", b"array") and len(batches) == 1:
            return batches[0] if kind == b"batch" else batches[0].column(0)
        table = pa.Table.from_batches(batches, schema=schema)
    else:
        reader = pa.ipc.open_stream(pa.py_buffer(buffer))
        metadata = dict(reader.schema.metadata or {})
        kind = metadata.pop(KIND, b"table")
        table = reader.read_all().replace_schema_metadata(metadata or None)
    if kind == b"table":
        return table
    if kind == b"chunked":
        return table.column("values")
    batches = table.to_batches()
    batch = batches[0] if len(batches) == 1 else table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=table.schema)
    if kind == b"batch":
        return batch
    return batch.column(0)
