"""W&B's run file (``run-<id>.wandb``, the transaction log ``wandb sync`` uploads) → its records.

The file is a LevelDB-style log of ``wandb.proto.wandb_internal_pb2.Record`` protobufs (wandb
0.31.0's wandb-core writes it: core/internal/transactionlog/writer.go, core/pkg/leveldb/record.go;
the Python SDK before wandb-core, wandb/sdk/internal/datastore.py, wrote the same format):

- a 7-byte header: ``:W&B``, magic 0xBEE1 (little-endian uint16), version 0;
- 32 KiB blocks (the header counts in the first) of chunks: CRC-32 (IEEE, over the type byte and
  the data; little-endian uint32), length (uint16), type (1 full, 2 first, 3 middle, 4 last), data.
  A chunk never crosses a block; fewer than 7 bytes left in a block are zero padding.

wandb ships no reader of its own for Python any more (wandb-core's Go reader skips damaged data);
this one reads the framing above and refuses any damage by byte offset, and parses each record
with the installed wandb's protobuf classes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from .tracker_presets import TrackerError
from .tracker_run import missing_extra

_BLOCK, _HEAD = 32768, 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_CRC = {t: zlib.crc32(bytes([t])) for t in (_FULL, _FIRST, _MIDDLE, _LAST)}


def _chunks(data: bytes, file: Path) -> Iterator[tuple[int, int, bytes]]:
    """(offset, type, data) of each chunk after the header."""
    pos = _HEAD
    while pos < len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEAD:  # the block's zero trailer
            pos += left
            continue
        if pos + _HEAD > len(data):
            raise TrackerError(f"{file}: ends inside a record at byte {pos} (the run was stopped mid-write?)")
        crc, n, kind = struct.unpack_from("<IHB", data, pos)
        if crc == n == kind == 0:  # the rest of the block is unused (how wandb-core's reader reads it too)
            if any(data[pos:pos + left]):
                raise TrackerError(f"{file}: a damaged record at byte {pos}")
            pos += left
            continue
        end = pos + _HEAD + n
        if end > len(data):
            raise TrackerError(f"{file}: ends inside a record at byte {pos} (the run was stopped mid-write?)")
        if n > left - _HEAD or kind not in _CRC or zlib.crc32(data[pos + _HEAD:end], _CRC[kind]) != crc:
            raise TrackerError(f"{file}: a damaged record at byte {pos} (its checksum does not match)")
        yield pos, kind, data[pos + _HEAD:end]
        pos = end


def records(file: str | Path) -> Iterator:
    """The ``Record`` protobufs of one ``.wandb`` file, in the order written."""
    file = Path(file)
    try:
        from google.protobuf.message import DecodeError
        from wandb.proto import wandb_internal_pb2 as pb
    except ImportError:
        raise missing_extra("W&B run files (.wandb)", "wandb") from None
    data = file.read_bytes()
    head = struct.unpack_from("<4sHB", data) if len(data) >= _HEAD else None
    if head is None or head[0] != b":W&B" or head[1] != 0xBEE1:
        raise TrackerError(f"{file}: not a W&B run file (it does not start with the ':W&B' header)")
    if head[2] != 0:
        raise TrackerError(f"{file}: a W&B run file of format version {head[2]}; this reader knows version 0")
    start, parts = None, []
    for pos, kind, chunk in _chunks(data, file):
        if (kind in (_FULL, _FIRST)) != (start is None):
            raise TrackerError(f"{file}: a damaged record at byte {pos} (a record's parts are out of order)")
        if kind in (_FULL, _FIRST):
            start = pos
        parts.append(chunk)
        if kind in (_FULL, _LAST):
            rec = pb.Record()
            try:
                rec.ParseFromString(b"".join(parts))
            except DecodeError:
                raise TrackerError(f"{file}: the record at byte {start} is not a W&B record") from None
            yield rec
            start, parts = None, []
    if start is not None:
        raise TrackerError(f"{file}: ends inside a record at byte {start} (the run was stopped mid-write?)")
