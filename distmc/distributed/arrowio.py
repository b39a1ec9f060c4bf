"""Packed keys and numpy columns as Arrow arrays and IPC files, with no Python object per state.

One-word keys are an Arrow ``uint64`` column; wider keys a ``fixed_size_binary(8 * words)`` column over the same
bytes. The Ray driver's frontier exchange and the checkpoints (:mod:`distmc.distributed.checkpoint`) both use these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from distmc._internal.atomic import atomic_path

__all__ = ["keys_from_arrow", "keys_to_arrow", "read_table", "write_table"]


def keys_to_arrow(keys: np.ndarray, key_dtype: np.dtype) -> pa.Array:
    """Keys ``[N]`` (uint64, or void of 8 x words bytes) -> an Arrow array (zero copy for uint64)."""
    if np.dtype(key_dtype) == np.dtype(np.uint64):
        return pa.array(keys, type=pa.uint64())
    width = np.dtype(key_dtype).itemsize
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(keys), [None, pa.py_buffer(np.ascontiguousarray(keys).tobytes())]
    )


def keys_from_arrow(col: Any, key_dtype: np.dtype) -> np.ndarray:
    """The inverse of :func:`keys_to_arrow` (a chunked column is combined first)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if np.dtype(key_dtype) == np.dtype(np.uint64):
        return col.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    width = np.dtype(key_dtype).itemsize
    buf = col.buffers()[1]
    if buf is None:  # an empty column
        return np.zeros(0, dtype=key_dtype)
    raw = np.frombuffer(buf, dtype=np.uint8)[col.offset * width : (col.offset + len(col)) * width]
    return raw.view(key_dtype).copy()


def write_table(path: Path, columns: dict[str, Any], note: str = "") -> int:
    """Write ``columns`` (numpy arrays or Arrow arrays of one length) as an Arrow IPC file, atomically.

    The file appears under its name only once it is complete (:func:`~distmc._internal.atomic.atomic_path`:
    written to a temporary name, fsynced, renamed), so a worker killed while writing leaves no truncated
    checkpoint behind. Returns the bytes written.

    Raises:
        StorageError: the file cannot be written (``note``: what was kept).
    """
    batch = pa.RecordBatch.from_arrays(
        [c if isinstance(c, pa.Array) else pa.array(c) for c in columns.values()], names=list(columns)
    )
    with atomic_path(path, sync=True, note=note) as tmp:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
            writer.write_batch(batch)
        size = int(tmp.stat().st_size)
    return size


def read_table(path: Path) -> pa.Table:
    """An Arrow IPC file, read into memory."""
    with pa.OSFile(str(path), "rb") as source:
        return pa.ipc.open_file(source).read_all()
