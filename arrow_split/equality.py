"""Equality of batches with NaN equal to NaN at the same place.

Arrow's ``equals`` follows IEEE 754: a NaN is unequal to itself, so a batch holding a NaN log-prob
(``allow_nonfinite=True``) would not equal itself. The rule here is a *NaN-position* compare:
two float values are equal when they are equal as numbers, or when both are NaN, whatever the
NaN's sign or payload bits. ``0.0`` and ``-0.0`` are equal, as numbers. Nulls are equal when they
are at the same rows. Dictionary arrays (objects stored once) are equal when their rows' values
are: a rank's zero-copy slice keeps its node's whole dictionary, a take only the values it uses.
:meth:`arrow_split.RolloutBatch.equals` and the assertions of :mod:`arrow_split.testing` both
use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from arrow_split._codecs import parts

__all__ = ["arrays_equal", "record_batches_equal", "values_equal"]


def _holds_floats(data_type: pa.DataType) -> bool:
    if pa.types.is_floating(data_type):
        return True
    return any(_holds_floats(data_type.field(i).type) for i in range(data_type.num_fields))


def arrays_equal(left: pa.Array, right: pa.Array) -> bool:
    """Whether two Arrow arrays are equal, NaN equal to NaN at the same place."""
    if left.type != right.type or len(left) != len(right):
        return False
    if left.equals(right):
        return True
    if pa.types.is_dictionary(left.type):  # the same values, whatever each dictionary holds
        value_type = left.type.value_type
        return arrays_equal(left.cast(value_type), right.cast(value_type))
    if not _holds_floats(left.type) or not left.is_null().equals(right.is_null()):
        return False
    if pa.types.is_floating(left.type):
        return bool(
            np.array_equal(
                left.to_numpy(zero_copy_only=False),
                right.to_numpy(zero_copy_only=False),
                equal_nan=True,
            )
        )
    left_parts, right_parts = parts(left), parts(right)
    if left_parts is None or right_parts is None:
        return False
    return all(arrays_equal(a, b) for a, b in zip(left_parts, right_parts, strict=True))


def record_batches_equal(left: pa.RecordBatch, right: pa.RecordBatch) -> bool:
    """Same schema (metadata aside, as ``RecordBatch.equals``), columns by :func:`arrays_equal`."""
    return left.schema.equals(right.schema) and all(
        arrays_equal(a, b) for a, b in zip(left.columns, right.columns, strict=True)
    )


def values_equal(left: object, right: object) -> bool:
    """Python values (batch globals, decoded) equal, NaN equal to NaN; arrays by dtype too."""
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        if not (isinstance(left, np.ndarray) and isinstance(right, np.ndarray)):
            return False
        if left.dtype != right.dtype or left.shape != right.shape:
            return False
        nan_aware = left.dtype.kind in "fc"
        return bool(np.array_equal(left, right, equal_nan=nan_aware))
    if isinstance(left, float) and isinstance(right, float):
        return left == right or (math.isnan(left) and math.isnan(right))
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return (
            type(left) is type(right)
            and len(left) == len(right)
            and all(values_equal(a, b) for a, b in zip(left, right, strict=True))
        )
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(values_equal(left[k], right[k]) for k in left)
    return bool(left == right)
