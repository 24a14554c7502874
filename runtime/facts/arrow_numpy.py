"""Arrow arrays to numpy and back by their buffers, for the trajectory reader and the Parquet writer.

pyarrow's own conversions (`np.asarray(array)`, `to_numpy`, `pa.array`, `pa.scalar`, `fill_null` with a Python
value) import pandas whenever it is installed, a sixth of a second of every `tracec score`; these read and write the
buffers themselves. They take what the reader meets: numbers and booleans of fixed width, and strings.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


def _bits(buffer: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """n bits of an Arrow bitmap from bit `offset` on (least significant first), as bools."""
    return np.unpackbits(np.frombuffer(buffer, np.uint8), count=offset + n, bitorder="little")[offset:].view(np.bool_)


def to_numpy(values: pa.Array | pa.ChunkedArray, fill: float = 0) -> np.ndarray:
    """The values of a numeric or boolean array as numpy (its dtype: int64 stays int64), nulls as `fill`; a view of
    Arrow's memory (read-only) where there are no nulls to fill."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    n, offset = len(values), values.offset
    validity, data = values.buffers()[:2] if len(values.buffers()) > 1 else (None, None)
    if pa.types.is_boolean(values.type):
        out = _bits(data, offset, n) if data is not None else np.zeros(n, np.bool_)
    else:
        dtype = np.dtype(values.type.to_pandas_dtype())
        out = np.frombuffer(data, dtype, n, offset * dtype.itemsize) if data is not None else np.zeros(n, dtype)
    if values.null_count:
        known = _bits(validity, offset, n) if validity is not None else np.zeros(n, np.bool_)  # the null type
        out = np.where(known, out, np.array(fill).astype(out.dtype))
    return out


def from_numpy(values: np.ndarray) -> pa.Array:
    """A 1-D numeric numpy array as an Arrow array of its type, without nulls (a copy only if not contiguous)."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def strings(values: Sequence[str]) -> pa.Array:
    """Python strings as an Arrow string array (large_string past 2 GiB of text)."""
    encoded = [value.encode("utf-8") for value in values]
    ends = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=ends[1:])
    kind, offsets = (pa.string(), ends.astype(np.int32)) if ends[-1] < 2**31 else (pa.large_string(), ends)
    return pa.Array.from_buffers(kind, len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])
