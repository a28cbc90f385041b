"""The ``batch_global`` kind: one value for the whole batch, never split.

Checked once against its documented shape (``global_shape``), kept as Python values and numpy
arrays beside the record batch, carried whole by every shard. It has no column, so no codec.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrow_split._args import as_choice
from arrow_split._codecs._kind import Kind
from arrow_split._codecs.per_sample_scalar import is_int
from arrow_split.errors import ColumnTypeError, SchemaError, SchemaTypeError, ValueRangeError

if TYPE_CHECKING:
    from arrow_split.schema import ColumnSpec

__all__ = [
    "BatchGlobal",
    "Shape",
    "check_batch_global",
    "check_per_sample_values",
    "global_to_python",
    "owned_globals",
    "read_only_globals",
    "unpadded_samples",
]

Shape = Literal["int", "int_list", "int_map", "str_list", "float_per_sample"]
"""The shapes of a batch-global value (``arrow_split.schema.GlobalShape``)."""


class BatchGlobal(Kind):
    """One value per batch: its spec names a shape, and no number type."""

    text = "one value for the whole batch"

    per_sample = False
    numbers = False

    def check_spec(self, spec: ColumnSpec) -> None:
        super().check_spec(spec)
        as_choice(
            "global_shape",
            spec.global_shape,
            Shape,
            type_error=SchemaTypeError,
            value_error=SchemaError,
        )


_SHAPE_TEXT = {
    "int": "one int",
    "int_list": "a list of ints",
    "int_map": "a dict of int keys to non-negative int values",
    "str_list": "a list of str",
    "float_per_sample": "one number per sample of the whole batch",
}


def _shape_error(spec: ColumnSpec, value: object, detail: str) -> SchemaError:
    expected = _SHAPE_TEXT[spec.global_shape or "int"]
    msg = (
        f"batch-global key `{spec.name}` must be {expected}, got {type(value).__name__} "
        f"{value!r:.60}: {detail}"
    )
    return SchemaError(msg, key=spec.name, expected=expected, got=f"{value!r:.60}")


_NOT_REAL = (bool, np.bool_, complex, np.complexfloating)


def _as_list(spec: ColumnSpec, value: object) -> list[object]:
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise _shape_error(spec, value, f"an array of shape {value.shape}")
        return list(value.tolist())
    if not isinstance(value, (list, tuple)):
        raise _shape_error(spec, value, "not a list")
    return list(value)


def _per_sample_floats(
    spec: ColumnSpec, items: list[object], num_samples: int, allow_nonfinite: bool
) -> np.ndarray:
    """A per-sample global's items as a read-only float64 array, refused unless real numbers."""
    if len(items) != num_samples:
        msg = (
            f"batch-global key `{spec.name}` has {len(items)} values but the batch has "
            f"{num_samples} samples; it holds one value per sample of the WHOLE batch"
        )
        raise SchemaError(msg, key=spec.name)
    for sample, item in enumerate(items):
        if isinstance(item, _NOT_REAL) or not isinstance(item, (int, float, np.number)):
            msg = (
                f"`{spec.name}` must hold real numbers (int or float), got "
                f"{type(item).__name__} {item!r:.40}"
            )
            raise ColumnTypeError(msg, key=spec.name, sample=sample)
    floats = _floats(spec, items)
    if not allow_nonfinite and not np.isfinite(floats).all():
        sample = int(np.argmin(np.isfinite(floats)))
        msg = (
            f"`{spec.name}` holds {items[sample]!r}; NaN and infinity are "
            "rejected by default; pass `allow_nonfinite=True` to keep them"
        )
        raise ValueRangeError(msg, key=spec.name, sample=sample)
    floats.flags.writeable = False
    return floats


def _floats(spec: ColumnSpec, items: list[object]) -> np.ndarray:
    """The items as float64; an int too large for a float64 is a :class:`ValueRangeError`."""
    try:
        return np.asarray(items, dtype=np.float64)
    except OverflowError:
        sample = next(i for i, item in enumerate(items) if not _fits_float64(item))
        msg = (
            f"`{spec.name}` value {items[sample]!r:.60} is too large for a "
            "float64; fix the value in the producer"
        )
        raise ValueRangeError(msg, key=spec.name, sample=sample) from None


def _fits_float64(item: object) -> bool:
    try:
        float(item)  # type: ignore[arg-type]
    except OverflowError:
        return False
    return True


def check_per_sample_values(spec: ColumnSpec, value: object, allow_nonfinite: bool) -> None:
    """The checks of a per-sample global that need no batch size (its length comes later)."""
    items = _as_list(spec, value)
    _per_sample_floats(spec, items, len(items), allow_nonfinite)


def check_batch_global(
    spec: ColumnSpec, value: object, num_samples: int, allow_nonfinite: bool
) -> object:
    """A private copy of a batch-global value, checked once against ``spec.global_shape``.

    Raises SchemaError (shape), ColumnTypeError or ValueRangeError (a per-sample global's value).
    """
    shape = spec.global_shape
    if shape == "float_per_sample":
        return _per_sample_floats(spec, _as_list(spec, value), num_samples, allow_nonfinite)
    if shape == "int":
        if not is_int(value):
            raise _shape_error(spec, value, "not an int")
        if int(value) < 0:  # type: ignore[call-overload]
            raise _shape_error(spec, value, "a negative count")
        return int(value)  # type: ignore[call-overload]
    if shape == "int_map":
        return _check_int_map(spec, value)
    items = _as_list(spec, value)
    wanted = is_int if shape == "int_list" else (lambda item: isinstance(item, str))
    for position, item in enumerate(items):
        if not wanted(item):
            raise _shape_error(spec, value, f"item {position} is {item!r:.40}")
    return [int(item) for item in items] if shape == "int_list" else items  # type: ignore[call-overload]


def _check_int_map(spec: ColumnSpec, value: object) -> dict[int, int]:
    """A dict of int keys to non-negative int values, copied with plain ints."""
    if not isinstance(value, Mapping):
        raise _shape_error(spec, value, "not a dict")
    checked: dict[int, int] = {}
    for key, item in value.items():
        if not is_int(key):
            raise _shape_error(spec, value, f"key {key!r:.40} is not an int")
        if not is_int(item) or int(item) < 0:
            raise _shape_error(spec, value, f"the value of key {key!r} is {item!r:.40}")
        checked[int(key)] = int(item)
    return checked


def unpadded_samples(num_samples: int, columns: Mapping[str, pa.Array], marker: str | None) -> int:
    """The samples a per-sample global covers: every row but :func:`~arrow_split.pad_to_dp`'s.

    ``marker`` is the padding column's name (``Roles.padding``), resolved once by the caller.
    """
    if marker is None or marker not in columns:
        return num_samples
    flags = columns[marker]
    return num_samples - int(pc.sum(flags.fill_null(False)).as_py() or 0)


def global_to_python(values: Mapping[str, object]) -> dict[str, object]:
    """Return the batch-global values in the classic layout (lists, ints), as fresh objects.

    From the kept values or their read-only view alike: an array or a tuple gives a list, a
    mapping (a mapping proxy too) a dict.
    """
    return {key: _copy(value) for key, value in values.items()}


def _copy(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return dict(value)
    return list(value) if isinstance(value, (list, tuple)) else value


def _owned(value: object) -> object:
    """A batch-global value as the batch keeps it: its own list, dict or read-only array."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, np.ndarray) and value.flags.writeable:
        array = value.copy()
        array.flags.writeable = False
        return array
    return value


def _read_only(value: object) -> object:
    """The read-only view of a kept batch-global value (a tuple, a mapping proxy, the array)."""
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, dict):
        return MappingProxyType(value)
    return value


def owned_globals(values: Mapping[str, object]) -> Mapping[str, object]:
    """Batch-global values as a batch keeps them (:func:`_owned` each), in a read-only mapping."""
    return MappingProxyType({key: _owned(value) for key, value in values.items()})


def read_only_globals(values: Mapping[str, object]) -> Mapping[str, object]:
    """The read-only view of a batch's kept values (:func:`_read_only` each)."""
    return MappingProxyType({key: _read_only(value) for key, value in values.items()})
