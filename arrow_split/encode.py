"""Per-sample values (Python lists or numpy arrays) -> Arrow arrays, one pass per column.

Numbers take one of two paths. Python lists go through ``pyarrow.array`` with an explicit wide type
(int64 or float64), which is faster than letting pyarrow infer one; numpy arrays are concatenated
once. Either way the column ends as one flat numpy array (and offsets) that
:mod:`arrow_split.checks` validates in vectorised passes before it is cast to the column's type and
wrapped, without a copy, as an Arrow array.

pyarrow truncates a Python float to an integer column without a word (1.5 becomes 1), so integer
columns from Python lists carry one more check: the Python sum of the values stays an ``int`` only
if no float was among them.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from arrow_split.checks import (
    check_finite,
    check_flag,
    check_float32_exact,
    check_int_range,
    locate_python_value,
)
from arrow_split.errors import ColumnTypeError, RaggedLengthError
from arrow_split.schema import ColumnSpec

__all__ = [
    "EncodeOptions",
    "encode_object",
    "encode_ragged",
    "encode_scalar",
    "encode_tensor",
    "is_array",
]

_ARROW_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


@dataclasses.dataclass(frozen=True, slots=True)
class EncodeOptions:
    """Switches of :meth:`RolloutBatch.from_train_data` that change how values are checked."""

    allow_nonfinite: bool = False
    round_floats: bool = False


def is_array(value: object) -> bool:
    """Whether a sample is array-like (numpy, or anything with ``__array__``), not a list."""
    return isinstance(value, np.ndarray) or (
        hasattr(value, "__array__") and not isinstance(value, (list, tuple))
    )


def _target_dtype(spec: ColumnSpec) -> np.dtype:
    value_type = spec.value_type
    if not isinstance(value_type, pa.DataType):  # pragma: no cover - ColumnSpec guarantees it
        msg = f"column `{spec.name}` has no value type"
        raise ColumnTypeError(msg)
    dtype: np.dtype = np.dtype(value_type.to_pandas_dtype())
    return dtype


def _allowed_kinds(spec: ColumnSpec) -> str:
    if spec.flag:
        return "iub"
    return "iuf" if _target_dtype(spec).kind == "f" else "iu"


def _check_array_dtype(spec: ColumnSpec, dtype: np.dtype, location: str) -> None:
    if dtype.kind not in _allowed_kinds(spec):
        kind = "a float" if _target_dtype(spec).kind == "f" else "an integer"
        msg = (
            f"{location}: `{spec.name}` is {kind} column ({spec.value_type}) but the array has "
            f"dtype {dtype}; convert it with `.astype(...)` in the producer, or declare the "
            "column's type with a ColumnSpec"
        )
        raise ColumnTypeError(msg)


def _finish(
    spec: ColumnSpec, values: np.ndarray, offsets: np.ndarray | None, options: EncodeOptions
) -> np.ndarray:
    """Check flat ``values`` for ``spec`` and cast them to the column's dtype."""
    target = _target_dtype(spec)
    if spec.flag:
        check_flag(spec.name, values, offsets)
    elif target.kind in "iu":
        check_int_range(spec.name, values, target, offsets)
    elif target.kind == "f":
        wide = values if values.dtype.kind == "f" else values.astype(np.float64)
        with np.errstate(over="ignore"):
            values = wide.astype(target, copy=False)
        if not options.round_floats:
            check_float32_exact(spec.name, wide, values, offsets)
        if spec.finite and not options.allow_nonfinite:
            check_finite(spec.name, values, offsets)
    return values.astype(target, copy=False)


def _offsets_from_lengths(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _flat_from_arrays(spec: ColumnSpec, samples: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
    arrays = [np.asarray(sample) for sample in samples]
    for sample, array in enumerate(arrays):
        if array.ndim != 1:
            msg = f"sample {sample}: `{spec.name}` must be 1-D per sample, got shape {array.shape}"
            raise ColumnTypeError(msg)
        if array.size:
            _check_array_dtype(spec, array.dtype, f"sample {sample}")
    lengths = np.fromiter((len(array) for array in arrays), dtype=np.int64, count=len(arrays))
    filled = [array for array in arrays if array.size]  # an empty float array must not upcast ints
    values = np.concatenate(filled) if filled else np.empty(0, dtype=_target_dtype(spec))
    return values, _offsets_from_lengths(lengths)


def _flat_from_python(spec: ColumnSpec, samples: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
    target = _target_dtype(spec)
    integer = target.kind != "f"
    # Integers convert straight to the column's type (Arrow checks the range); floats go through
    # float64, so that a value which is not exactly a float32 can be caught.
    wide = spec.value_type if target.kind in "iu" else pa.float64()

    def locate(cause: str) -> None:
        locate_python_value(
            spec.name, samples, target=target, flag=spec.flag, ragged=True, cause=cause
        )

    try:
        array = pa.array(samples, type=pa.large_list(wide))
    except _ARROW_ERRORS as exc:
        if not spec.flag:
            locate(str(exc))
        try:  # a flag column given as bools, or as bools and ints mixed
            array = pa.array(samples, type=pa.large_list(pa.bool_()))
        except _ARROW_ERRORS:
            return _flat_from_mixed_flags(spec, samples, locate)
    if array.null_count or array.values.null_count:
        locate("null values")
    if integer and pa.types.is_integer(array.type.value_type):
        total = sum(map(sum, samples))  # type: ignore[arg-type]
        if not isinstance(total, (int, np.integer)):
            locate("a float among integer values")
    offsets = array.offsets.to_numpy()
    return array.values.to_numpy(zero_copy_only=False), offsets


def _flat_from_mixed_flags(
    spec: ColumnSpec, samples: Sequence[object], locate: Callable[[str], None]
) -> tuple[np.ndarray, np.ndarray]:
    """The slow path for a flag column whose lists mix bools and ints."""
    arrays = []
    for sample in samples:
        array = np.asarray(sample)
        if array.ndim != 1 or (array.size and array.dtype.kind not in "biu"):
            locate("values that are neither bool nor int")
        arrays.append(array.astype(np.int64))
    return _flat_from_arrays(spec, arrays)


def encode_ragged(
    spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
) -> pa.LargeListArray:
    """Encode a ``per_token`` column: one list of numbers per sample."""
    if len(samples) and all(is_array(sample) for sample in samples):
        values, offsets = _flat_from_arrays(spec, samples)
    else:
        mixed = [np.asarray(s).tolist() if is_array(s) else s for s in samples]
        values, offsets = _flat_from_python(spec, mixed)
    values = _finish(spec, values, offsets, options)
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))


def _tensor_array(spec: ColumnSpec, sample: int, value: object) -> np.ndarray:
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        msg = f"sample {sample}: `{spec.name}` is not a rectangular array of numbers: {exc}"
        raise ColumnTypeError(msg) from None
    if array.ndim == 0:
        msg = (
            f"sample {sample}: `{spec.name}` must be an array of shape [rows, ...] per sample, "
            f"got the scalar {value!r:.40}"
        )
        raise ColumnTypeError(msg)
    if array.size and array.dtype.kind not in "biuf":
        msg = (
            f"sample {sample}: `{spec.name}` must hold numbers, got an array of dtype "
            f"{array.dtype} (None values, or rows of different lengths?)"
        )
        raise ColumnTypeError(msg)
    if array.size:
        _check_array_dtype(spec, array.dtype, f"sample {sample}")
    return array


def _tensor_arrays(spec: ColumnSpec, samples: Sequence[object]) -> list[np.ndarray]:
    """Per-sample arrays of one trailing shape and the column's dtype (empty samples reshaped)."""
    arrays = [_tensor_array(spec, sample, value) for sample, value in enumerate(samples)]
    shaped = [(i, a) for i, a in enumerate(arrays) if a.size or a.ndim > 1]
    trailing = shaped[0][1].shape[1:] if shaped else ()
    for sample, array in shaped:
        if array.shape[1:] != trailing:
            msg = (
                f"sample {sample}: `{spec.name}` has trailing shape {array.shape[1:]} but sample "
                f"{shaped[0][0]} has {trailing}; every sample must have the same shape after the "
                "first axis"
            )
            raise RaggedLengthError(msg)
    target = _target_dtype(spec)
    return [
        array if array.size else np.empty((len(array), *trailing), dtype=target) for array in arrays
    ]


def encode_tensor(
    spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
) -> pa.LargeListArray:
    """Encode a ``per_sample_tensor`` column: one ``[rows, *trailing]`` array per sample.

    The trailing shape becomes nested ``fixed_size_list`` types, so it travels with the column.
    """
    arrays = _tensor_arrays(spec, samples)
    target = _target_dtype(spec)
    trailing: tuple[int, ...] = arrays[0].shape[1:] if arrays else ()
    rows = np.fromiter((len(array) for array in arrays), dtype=np.int64, count=len(arrays))
    offsets = _offsets_from_lengths(rows)
    stacked = np.concatenate(arrays) if arrays else np.empty(0, dtype=target)
    width = int(np.prod(trailing, dtype=np.int64))
    child: pa.Array = pa.array(_finish(spec, stacked.reshape(-1), offsets * width, options))
    for size in reversed(trailing):
        child = pa.FixedSizeListArray.from_arrays(child, size)
    return pa.LargeListArray.from_arrays(pa.array(offsets), child)


def encode_scalar(spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions) -> pa.Array:
    """Encode a ``per_sample_scalar`` column: one number per sample."""
    integer = _target_dtype(spec).kind != "f"
    if is_array(samples):
        values = np.array(samples, copy=True)  # the batch must not share the caller's memory
        if values.ndim != 1:
            msg = f"`{spec.name}` must be 1-D (one number per sample), got shape {values.shape}"
            raise ColumnTypeError(msg)
        if values.size:
            _check_array_dtype(spec, values.dtype, "the array")
    else:
        values = _scalars_from_python(spec, samples, integer=integer)
    return pa.array(_finish(spec, values, None, options))


def _scalars_from_python(
    spec: ColumnSpec, samples: Sequence[object], *, integer: bool
) -> np.ndarray:
    def locate(cause: str) -> None:
        target = _target_dtype(spec)
        locate_python_value(
            spec.name, samples, target=target, flag=spec.flag, ragged=False, cause=cause
        )

    if spec.flag:  # bools, 0/1 ints, or both mixed
        flags = np.asarray(samples) if len(samples) else np.zeros(0, dtype=np.bool_)
        if flags.ndim != 1 or flags.dtype.kind not in "biu":
            locate("values that are neither bool nor int")
        return flags
    wide = pa.int64() if integer else pa.float64()
    try:
        array = pa.array(samples, type=wide)
    except _ARROW_ERRORS as exc:
        locate(str(exc))
    if array.null_count:
        locate("null values")
    if integer and pa.types.is_int64(array.type):
        total = sum(samples)  # type: ignore[arg-type]
        if not isinstance(total, (int, np.integer)):
            locate("a float among integer values")
    return np.asarray(array.to_numpy(zero_copy_only=False))


def encode_object(spec: ColumnSpec, samples: Sequence[object]) -> tuple[pa.Array, ColumnSpec]:
    """Encode a ``per_sample_object`` column; return the array and the spec of the codec used.

    A ``string`` column whose samples are not all ``str`` falls back to ``pickle``.
    """
    if spec.codec == "string":
        if all(isinstance(value, str) for value in samples):
            return pa.array(samples, type=pa.large_string()), spec
        spec = dataclasses.replace(spec, codec="pickle")
    if spec.codec == "string_list":
        for sample, value in enumerate(samples):
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                msg = (
                    f"sample {sample}: `{spec.name}` must be a list of str per sample, got "
                    f"{value!r:.60}"
                )
                raise ColumnTypeError(msg)
        return pa.array(samples, type=pa.large_list(pa.large_string())), spec
    pickled = [None if value is None else pickle.dumps(value, protocol=5) for value in samples]
    return pa.array(pickled, type=pa.large_binary()), spec
