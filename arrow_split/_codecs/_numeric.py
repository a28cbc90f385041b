"""The numeric core shared by the per-token, tensor and scalar codecs.

Numbers take one of two paths. Python lists go through ``pyarrow.array`` with an explicit wide type
(the column's integer type, or float64), so that pyarrow does not infer one; numpy
arrays are concatenated once. Either way the column ends as one flat numpy array (and offsets)
that :mod:`arrow_split._codecs._checks` validates in vectorised passes before it is cast to the
column's type.

pyarrow truncates a Python float to an integer column without a word (1.5 becomes 1), so integer
columns from Python lists carry one more check: the Python sum of the values stays an ``int`` only
if no float was among them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from arrow_split._codecs._arrow import numpy_dtype
from arrow_split._codecs._base import EncodeOptions
from arrow_split._codecs._checks import (
    check_flag,
    check_float32_exact,
    check_int_range,
    locate_python_value,
)
from arrow_split._codecs._pylists import flat_from_lists, is_bool_value
from arrow_split.errors import ColumnTypeError, ValueRangeError
from arrow_split.schema import ColumnSpec

__all__ = [
    "ARROW_ERRORS",
    "as_array",
    "check_array_dtype",
    "check_only_bools",
    "exact_integers",
    "finish",
    "flat_from_arrays",
    "flat_from_python",
    "is_array",
    "is_flag",
    "offsets_from_lengths",
    "only_bools",
    "target_dtype",
]

ARROW_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def is_array(value: object) -> bool:
    """Whether a sample is array-like, not a list.

    Numpy arrays, anything with ``__array__`` or ``__dlpack__`` (a CPU torch tensor), and any
    object exporting the buffer protocol (``array.array``, ``memoryview``), but not ``str`` or
    ``bytes``.
    """
    if isinstance(value, (list, tuple, str, bytes, bytearray)):
        return False
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        return True
    if hasattr(value, "__dlpack__"):
        return True
    try:
        memoryview(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def as_array(value: object, name: str, location: str) -> np.ndarray:
    """``np.asarray(value)``, or a :class:`ColumnTypeError` naming where it could not be made.

    A masked array with masked values is refused: ``np.asarray`` would keep whatever the masked
    slots hold. An object with ``__dlpack__`` but no ``__array__`` is read with
    ``np.from_dlpack`` (no copy; CPU memory only).
    """
    if isinstance(value, np.ma.MaskedArray) and np.ma.is_masked(value):
        masked = int(np.count_nonzero(np.ma.getmaskarray(value)))
        msg = (
            f"{location}: `{name}` is a masked array with {masked} masked values; fill them "
            "first (`.filled(...)`) or drop the samples they belong to"
        )
        raise ColumnTypeError(msg)
    try:
        if hasattr(value, "__dlpack__") and not hasattr(value, "__array__"):
            return np.from_dlpack(value)
        return np.asarray(value)
    except (TypeError, ValueError, OverflowError, RuntimeError, BufferError) as exc:
        msg = (
            f"{location}: `{name}` is not a rectangular array of numbers ({exc}); pass a list of "
            "numbers or a numeric numpy array"
        )
        raise ColumnTypeError(msg) from None


def target_dtype(spec: ColumnSpec) -> np.dtype:
    """The numpy dtype of a numeric column's values."""
    value_type = spec.value_type
    if not isinstance(value_type, pa.DataType):  # pragma: no cover - ColumnSpec guarantees it
        msg = f"column `{spec.name}` has no value type"
        raise ColumnTypeError(msg)
    return numpy_dtype(value_type)


def is_flag(spec: ColumnSpec) -> bool:
    """Whether a column holds 0/1 values: a declared flag, or any column of Arrow type ``bool``.

    A declared flag (``flag=True``: ``loss_masks``, ``truncated``, which RL frameworks fill with
    the ints 0 and 1) takes bools and the ints 0 and 1, whatever their container. A column of
    Arrow type ``bool`` not declared a flag takes bools only (:func:`only_bools`). Both refuse
    anything else (a 2, a float); a bool column is never filled by ``astype(bool)``.
    """
    return spec.flag or pa.types.is_boolean(spec.value_type)  # the one Arrow type of kind "b"


def only_bools(spec: ColumnSpec) -> bool:
    """Whether a column takes bools only: Arrow type ``bool`` and not declared ``flag=True``.

    The one rule for a bool: it is a ``bool`` or ``numpy.bool_`` (a bool array), the same as for
    a flag argument; ``[1, 0]`` is refused, as ``"False"`` is where a flag argument goes.
    """
    return target_dtype(spec).kind == "b" and not spec.flag


def _allowed_kinds(spec: ColumnSpec) -> str:
    if only_bools(spec):
        return "b"
    if is_flag(spec):
        return "iub"
    return "iuf" if target_dtype(spec).kind == "f" else "iu"


def check_array_dtype(spec: ColumnSpec, dtype: np.dtype, location: str) -> None:
    """Raise :class:`ColumnTypeError` if an array's dtype cannot hold the column's values."""
    if dtype.kind not in _allowed_kinds(spec):
        kind = {"f": "a float", "b": "a bool"}.get(target_dtype(spec).kind, "an integer")
        msg = (
            f"{location}: `{spec.name}` is {kind} column ({spec.value_type}) but the array has "
            f"dtype {dtype}; convert it with `.astype(...)` in the producer, or declare the "
            "column's type with a ColumnSpec"
        )
        raise ColumnTypeError(msg)


def finish(
    spec: ColumnSpec, values: np.ndarray, offsets: np.ndarray | None, options: EncodeOptions
) -> np.ndarray:
    """Check flat ``values`` for ``spec`` and cast them to the column's dtype.

    Finiteness is checked once the whole batch is encoded (it depends on the loss mask): see
    :func:`arrow_split._convert.check_finite_columns`.
    """
    target = target_dtype(spec)
    if is_flag(spec):
        check_flag(spec.name, values, offsets)
    elif target.kind in "iu":
        check_int_range(spec.name, values, target, offsets)
    elif target.kind == "f":
        wide = values if values.dtype.kind == "f" else values.astype(np.float64)
        with np.errstate(over="ignore"):
            values = wide.astype(target, copy=False)
        if options.exact_floats:
            check_float32_exact(spec.name, wide, values, offsets)
    return values.astype(target, copy=False)


def offsets_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """Offsets (int64, ``n + 1`` values from 0) of samples of ``lengths`` values."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def flat_from_arrays(spec: ColumnSpec, samples: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
    """Flat values and offsets of a column given as one 1-D array per sample."""
    arrays = [as_array(sample, spec.name, f"sample {i}") for i, sample in enumerate(samples)]
    for sample, array in enumerate(arrays):
        if array.ndim != 1:
            msg = f"sample {sample}: `{spec.name}` must be 1-D per sample, got shape {array.shape}"
            raise ColumnTypeError(msg)
        if array.size:
            check_array_dtype(spec, array.dtype, f"sample {sample}")
    lengths = np.fromiter((len(array) for array in arrays), dtype=np.int64, count=len(arrays))
    filled = [array for array in arrays if array.size]  # an empty float array must not upcast ints
    if target_dtype(spec).kind in "iu":
        filled = exact_integers(spec.name, filled, arrays)
    values = np.concatenate(filled) if filled else np.empty(0, dtype=target_dtype(spec))
    return values, offsets_from_lengths(lengths)


def exact_integers(
    name: str, filled: list[np.ndarray], arrays: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """``filled`` (the non-empty ``arrays``), made safe to concatenate into an integer column.

    numpy concatenates uint64 with signed integers through float64, rounding values above 2**53:
    when the two are mixed, the uint64 arrays become int64. A uint64 value above the int64
    maximum fits no integer column type and is reported by sample and position.
    """
    unsigned = [array.dtype == np.uint64 for array in filled]
    if not any(unsigned) or all(unsigned):
        return filled
    limit = np.iinfo(np.int64).max
    for sample, array in enumerate(arrays):
        if array.dtype == np.uint64 and array.size and array.max() > limit:
            position = int(np.argmax(array.reshape(-1) > limit))
            msg = (
                f"sample {sample}, position {position}: `{name}` value "
                f"{array.reshape(-1)[position].item()!r} is out of range for every integer column "
                f"type (at most {limit}); fix the value"
            )
            raise ValueRangeError(msg)
    return [array.astype(np.int64) if array.dtype == np.uint64 else array for array in filled]


def flat_from_python(spec: ColumnSpec, samples: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
    """Flat values and offsets of a column given as one Python list of numbers per sample."""
    target = target_dtype(spec)
    fast = flat_from_lists(target, samples, flag=is_flag(spec))
    if fast is not None:
        return fast
    integer = target.kind != "f"
    # Integers convert straight to the column's type (Arrow checks the range); floats go through
    # float64, so that a value which is not exactly a float32 can be caught.
    wide = spec.value_type if target.kind in "iu" else pa.float64()

    def locate(cause: str) -> None:
        locate_python_value(
            spec.name, samples, target=target, flag=is_flag(spec), ragged=True, cause=cause
        )

    if only_bools(spec):
        check_only_bools(spec, samples, ragged=True)
    try:
        array = pa.array(samples, type=pa.large_list(wide))
    except ARROW_ERRORS as exc:
        if not is_flag(spec):
            locate(str(exc))
        try:  # a flag column given as bools, or as bools and ints mixed
            array = pa.array(samples, type=pa.large_list(pa.bool_()))
        except ARROW_ERRORS:
            return _flat_from_mixed_flags(spec, samples, locate)
    if array.null_count or array.values.null_count:
        locate("null values")
    if not is_flag(spec) and _holds_a_bool(samples):
        locate("a bool among numbers")  # pyarrow would store 0 or 1 silently
    if integer and pa.types.is_integer(array.type.value_type):
        try:
            with np.errstate(all="ignore"):  # numpy integers may wrap: only the type matters
                total = sum(map(sum, samples))  # type: ignore[arg-type]
        except ARROW_ERRORS as exc:
            locate(str(exc))
        if not isinstance(total, (int, np.integer)):
            locate("a float among integer values")
    offsets = array.offsets.to_numpy()
    return array.values.to_numpy(zero_copy_only=False), offsets


def check_only_bools(spec: ColumnSpec, samples: Sequence[object], *, ragged: bool) -> None:
    """Raise :class:`ColumnTypeError` on a value that is not a bool in a bool-only column.

    See :func:`only_bools`; ``ragged`` says whether each sample is a list of values.
    """
    for sample, values in enumerate(samples):
        items = values if ragged and isinstance(values, (list, tuple)) else [values]
        for position, value in enumerate(items):
            if not is_bool_value(value):
                at = f"sample {sample}, position {position}" if ragged else f"sample {sample}"
                msg = (
                    f"{at}: `{spec.name}` is a bool column but holds {type(value).__name__} "
                    f"{value!r:.40}; pass True/False (0 and 1 are ints), or declare the column "
                    "with `flag=True` to take 0/1 ints"
                )
                raise ColumnTypeError(msg)


def _holds_a_bool(samples: Sequence[object]) -> bool:
    """Whether a sample's list holds a bool (the careful path only: one look per value)."""
    return any(
        is_bool_value(value)
        for sample in samples
        if isinstance(sample, (list, tuple))
        for value in sample
    )


def _flat_from_mixed_flags(
    spec: ColumnSpec, samples: Sequence[object], locate: Callable[[str], None]
) -> tuple[np.ndarray, np.ndarray]:
    """The slow path for a flag column whose lists mix bools and ints."""
    arrays = []
    for sample, values in enumerate(samples):
        array = as_array(values, spec.name, f"sample {sample}")
        if array.ndim != 1 or (array.size and array.dtype.kind not in "biu"):
            locate("values that are neither bool nor int")
        arrays.append(array.astype(np.int64))
    return flat_from_arrays(spec, arrays)
