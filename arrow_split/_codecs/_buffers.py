"""Number columns read straight from their Arrow buffers: no ``to_numpy`` on a rank's hot path.

:func:`number_view` and :func:`number_lists` give what ``numpy_view`` and ``ragged_values`` of
:mod:`arrow_split._codecs._base` give in the common case (fixed-width numbers without a validity
buffer, large lists of them), read-only as ``to_numpy`` gives them; ``None`` for anything else,
which those read through Arrow.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["number_lists", "number_view"]

_PLAIN_DTYPES = {
    pa.from_numpy_dtype(dtype).id: dtype
    for dtype in map(np.dtype, ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"))
}  # (``to_pandas_dtype`` would import pandas on older pyarrow)
"""numpy's dtype of each fixed-width Arrow number type, by type id."""

_INT64 = np.dtype(np.int64)


def _read_only_view(buffer: pa.Buffer, dtype: np.dtype, count: int, first: int) -> np.ndarray:
    """``count`` items of ``buffer`` from item ``first``, read-only."""
    view = np.frombuffer(buffer, dtype=dtype, count=count, offset=first * dtype.itemsize)
    view.flags.writeable = False
    return view


def number_view(array: pa.Array) -> np.ndarray | None:
    """The numbers of a column without a validity buffer; ``None`` for any other column."""
    dtype = _PLAIN_DTYPES.get(array.type.id)
    if dtype is None or not len(array):
        return None
    buffers = array.buffers()
    if buffers[0] is not None:
        return None
    return _read_only_view(buffers[1], dtype, len(array), array.offset)


def number_lists(array: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """``(values, offsets from 0)`` of a large list of numbers without nulls, else ``None``."""
    arrow_type = array.type
    if not pa.types.is_large_list(arrow_type) or not len(array):
        return None
    dtype = _PLAIN_DTYPES.get(arrow_type.value_type.id)
    buffers = array.buffers()
    if dtype is None or len(buffers) != 4 or buffers[2] is not None:  # nested, or nulls
        return None
    raw_offsets = _read_only_view(buffers[1], _INT64, len(array) + 1, array.offset)
    start, stop = int(raw_offsets[0]), int(raw_offsets[-1])
    if stop <= start:
        return None
    values = _read_only_view(buffers[3], dtype, stop - start, array.values.offset + start)
    return values, raw_offsets - start if start else raw_offsets
