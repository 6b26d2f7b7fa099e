"""Writes the FileDescriptorSets of the Foxglove schemas HPRM records
(foxglove.RawImage, foxglove.PointCloud) into this directory, as Foxglove's
own writers register them (mcap_protobuf.schema.build_file_descriptor_set).
The recorder embeds these bytes as the schemas' data (hprm-cli/src/foxglove.rs).

    python -m venv /tmp/fg && /tmp/fg/bin/pip install foxglove-schemas-protobuf mcap-protobuf-support
    /tmp/fg/bin/python hprm-cli/src/foxglove/regen.py

Generated from foxglove-schemas-protobuf 0.4.0; the field numbers that
foxglove.rs writes are printed, to compare with its constants."""

from pathlib import Path

from foxglove_schemas_protobuf.PointCloud_pb2 import PointCloud
from foxglove_schemas_protobuf.RawImage_pb2 import RawImage
from mcap_protobuf.schema import build_file_descriptor_set

here = Path(__file__).parent
for cls in (RawImage, PointCloud):
    data = build_file_descriptor_set(cls).SerializeToString()
    (here / f"{cls.DESCRIPTOR.name}.fds").write_bytes(data)
    print(cls.DESCRIPTOR.full_name, len(data), "bytes")
    for f in cls.DESCRIPTOR.fields:
        print(f"  {f.number} {f.name} type={f.type}")
