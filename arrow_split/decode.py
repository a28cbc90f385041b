"""Arrow columns -> numpy views and classic Python values.

:func:`ragged_values` is the one place that reads a list column's values and offsets: it honours a
slice offset (``ListArray.values`` ignores it, ``offsets[0]`` does not) and returns numpy views, not
copies. A view of read-only memory (the object store's) is read-only; a view of memory this process
allocated is writable.
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from arrow_split.schema import ColumnSpec

__all__ = ["column_to_python", "numpy_view", "ragged_values", "split_by_offsets"]


def numpy_view(array: pa.Array) -> np.ndarray:
    """A numpy view of a primitive array without nulls (booleans are unpacked: a copy)."""
    if pa.types.is_boolean(array.type):
        return np.asarray(array.to_numpy(zero_copy_only=False))
    return np.asarray(array.to_numpy(zero_copy_only=True))


def ragged_values(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(values, offsets)`` of a list column as numpy, offsets starting at 0.

    For a ``per_sample_tensor`` column the values have shape ``[rows, *trailing]``, with the
    trailing shape read from the nested ``fixed_size_list`` types.
    """
    raw_offsets = array.offsets.to_numpy()
    start, stop = int(raw_offsets[0]), int(raw_offsets[-1])
    child = array.values.slice(start, stop - start)
    trailing: list[int] = []
    while pa.types.is_fixed_size_list(child.type):
        trailing.append(child.type.list_size)
        child = child.flatten()
    values = numpy_view(child).reshape(-1, *trailing) if trailing else numpy_view(child)
    offsets = raw_offsets - start if start else raw_offsets
    return values, offsets


def split_by_offsets(values: np.ndarray, offsets: np.ndarray) -> Iterator[np.ndarray]:
    """Yield one view of ``values`` per sample."""
    for begin, end in itertools.pairwise(offsets.tolist()):
        yield values[begin:end]


def _ragged_to_python(array: pa.Array) -> list[object]:
    values, offsets = ragged_values(array)
    return [part.tolist() for part in split_by_offsets(values, offsets)]


def column_to_python(spec: ColumnSpec, array: pa.Array) -> list[object]:
    """Decode one per-sample column into the classic layout: one Python value per sample.

    ``per_token`` columns become lists of Python numbers; ``per_sample_tensor`` columns become one
    numpy array per sample (views of one buffer, read-only when the buffer is shared); objects are
    decoded with their codec.
    """
    if spec.kind == "per_token":
        return _ragged_to_python(array)
    if spec.kind == "per_sample_tensor":
        values, offsets = ragged_values(array)
        return list(split_by_offsets(values, offsets))
    if spec.kind == "per_sample_scalar":
        return list(numpy_view(array).tolist())
    if spec.codec == "pickle":
        return [None if value is None else pickle.loads(value) for value in _binary_views(array)]
    return list(array.to_pylist())


def _binary_views(array: pa.Array) -> Iterator[memoryview | None]:
    for scalar in array:
        yield None if not scalar.is_valid else memoryview(scalar.as_buffer())
