"""pyarrow values as Arrow IPC streams (ext 5 of the wire format).

The codec calls ``to_ipc`` for objects of pyarrow's own types and sends the
stream as one buffer (out-of-band when large); ``from_ipc`` rebuilds the
object over the received bytes without copying them (pyarrow's arrays then
point into the store's shared memory). The schema's metadata key
``hprm.kind`` carries what the sender had, so a table comes back a table,
a record batch a record batch, an array an array.
"""

from __future__ import annotations

from typing import Any

KIND = b"hprm.kind"


def to_ipc(obj: Any) -> Any:
    """The Arrow IPC stream of a pyarrow Table, RecordBatch, Array or
    ChunkedArray, as a numpy uint8 array, or None for anything else.

    The stream is measured first (a mock stream counts the bytes without
    writing them), then written straight into an array of that size: inside
    a reaction numpy allocates a large one in the store (``store_memory``),
    so the Arrow buffers are copied once, into the store object that is sent."""
    import numpy as np
    import pyarrow as pa

    if isinstance(obj, pa.Table):
        kind, data = b"table", obj
    elif isinstance(obj, pa.RecordBatch):
        kind, data = b"batch", obj
    elif isinstance(obj, pa.ChunkedArray):
        kind, data = b"chunked", pa.table({"values": obj})
    elif isinstance(obj, pa.Array):
        kind, data = b"array", pa.RecordBatch.from_arrays([obj], names=["values"])
    else:
        return None
    metadata = dict(data.schema.metadata or {})
    metadata[KIND] = kind
    data = data.replace_schema_metadata(metadata)

    def write(sink: Any) -> None:
        with pa.ipc.new_stream(sink, data.schema) as writer:
            if isinstance(data, pa.Table):
                writer.write_table(data)
            else:
                writer.write_batch(data)

    mock = pa.MockOutputStream()
    write(mock)
    stream = np.empty(mock.size(), np.uint8)
    sink = pa.FixedSizeBufferWriter(pa.py_buffer(stream))
    write(sink)
    if sink.tell() != stream.size:
        raise RuntimeError(f"Arrow IPC stream: {sink.tell()} bytes written where {stream.size} were measured")
    return stream


def from_ipc(buffer: Any) -> Any:
    """The pyarrow object an ``to_ipc`` stream holds, over ``buffer``'s
    memory (no copy)."""
    import pyarrow as pa

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
