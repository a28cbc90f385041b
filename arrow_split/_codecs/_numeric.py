"""Numbers in: a user's column (lists, numpy, any array-like) -> flat, checked numpy, once.

Checks are vectorised (``_checks``); only a failing one locates the bad value. Python lists: one
``struct.pack`` per sample, else ``pyarrow.array`` with a wide type (its float truncation caught).
"""

from __future__ import annotations

import functools
import struct
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

import numpy as np
import pyarrow as pa

from arrow_split._args import INT64_MAX
from arrow_split._codecs._base import EncodeOptions, numpy_dtype
from arrow_split._codecs._checks import (
    At,
    check_flag,
    check_float32_exact,
    check_int_range,
    locate_python_value,
)
from arrow_split.errors import ColumnTypeError, ValueRangeError

if TYPE_CHECKING:
    from arrow_split.schema import ColumnSpec

__all__ = [
    "ARROW_ERRORS",
    "array_1d",
    "as_array",
    "check_array_dtype",
    "concatenate",
    "finish",
    "flat_from_arrays",
    "flat_from_lists",
    "flat_from_python",
    "is_array",
    "is_bool_value",
    "is_flag",
    "offsets_from_lengths",
    "python_locator",
    "target_dtype",
]

ARROW_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def is_array(value: object) -> bool:
    """Whether a sample is array-like (numpy, ``__array__``, ``__dlpack__``, a buffer)."""
    if isinstance(value, (list, tuple, str, bytes, bytearray)):
        return False
    if isinstance(value, np.ndarray) or hasattr(value, "__array__") or hasattr(value, "__dlpack__"):
        return True
    try:
        memoryview(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def as_array(value: object, name: str, at: At) -> np.ndarray:
    """``np.asarray(value)`` (``np.from_dlpack`` without ``__array__``), or a ColumnTypeError.

    A masked array with masked values is refused: ``np.asarray`` would keep the masked slots.
    """
    if type(value) is np.ndarray and value.dtype.kind != "V":  # the common case, taken as is
        return value  # (ml_dtypes' bfloat16, a void kind, is widened below)
    if isinstance(value, np.ma.MaskedArray) and np.ma.is_masked(value):
        masked = int(np.count_nonzero(np.ma.getmaskarray(value)))
        msg = f"`{name}` is a masked array with {masked} masked values"
        fix = "fill them first (`.filled(...)`) or drop the samples they belong to"
        raise ColumnTypeError(msg, key=name, fix=fix, **at)
    value = _widened_bfloat16(value)
    try:
        if hasattr(value, "__dlpack__") and not hasattr(value, "__array__"):
            return np.from_dlpack(value)
        return np.asarray(value)
    except (TypeError, ValueError, OverflowError, RuntimeError, BufferError) as exc:
        msg = f"`{name}` is not a rectangular array of numbers ({exc})"
        fix = "pass a list of numbers or a numeric numpy array"
        raise ColumnTypeError(msg, key=name, fix=fix, **at) from None


def _widened_bfloat16(value: object) -> object:
    """A bfloat16 tensor or array as float32, which holds every bfloat16 value exactly.

    numpy has no bfloat16 (``np.asarray`` of a torch bfloat16 tensor fails); trainers keep
    log-probs in it. torch is never imported: the tensor converts itself (``.float()``).
    """
    dtype = str(getattr(value, "dtype", ""))
    if dtype == "torch.bfloat16":
        return value.float()  # type: ignore[attr-defined]
    if dtype == "bfloat16" and isinstance(value, np.ndarray):  # ml_dtypes' numpy bfloat16
        return value.astype(np.float32)
    return value


def target_dtype(spec: ColumnSpec) -> np.dtype:
    """The numpy dtype of a numeric column's values."""
    return numpy_dtype(spec.value_type)


def is_flag(spec: ColumnSpec) -> bool:
    """Whether a column holds 0/1 values: a declared flag (bools, 0 and 1) or a ``bool`` column."""
    return spec.flag or pa.types.is_boolean(spec.value_type)  # the one Arrow type of kind "b"


def _only_bools(spec: ColumnSpec) -> bool:
    """Whether a column takes bools only (``bool``, ``numpy.bool_``): Arrow ``bool``, no flag."""
    return target_dtype(spec).kind == "b" and not spec.flag


def _allowed_kinds(spec: ColumnSpec) -> str:
    if _only_bools(spec):
        return "b"
    if is_flag(spec):
        return "iub"
    return "iuf" if target_dtype(spec).kind == "f" else "iu"


def check_array_dtype(spec: ColumnSpec, dtype: np.dtype, at: At, given: object) -> None:
    """Raise if an array's dtype cannot hold the column's values, hinting ``given``'s own cast."""
    if dtype.kind not in _allowed_kinds(spec):
        kind = {"f": "a float", "b": "a bool"}.get(target_dtype(spec).kind, "an integer")
        msg = f"`{spec.name}` is {kind} column ({spec.value_type}) but the array has dtype {dtype}"
        fix = (
            f"convert it with {_cast_hint(spec, given)} in the producer, or declare the column's "
            "type with a ColumnSpec"
        )
        raise ColumnTypeError(
            msg, key=spec.name, expected=str(spec.value_type), got=str(dtype), fix=fix, **at
        )


def _cast_hint(spec: ColumnSpec, given: object) -> str:
    """``.to(torch.float32)`` for a torch tensor (torch is never imported), else ``.astype``."""
    name = target_dtype(spec).name
    if type(given).__module__.split(".")[0] == "torch":
        return f"`.to(torch.{name})`"
    return f"`.astype(np.{'bool_' if name == 'bool' else name})`"


def array_1d(spec: ColumnSpec, value: object, at: At, shape: str) -> np.ndarray:
    """``value`` as a 1-D array of numbers the column takes; ``shape`` says what 1-D means."""
    array = as_array(value, spec.name, at)
    if array.ndim != 1:
        expected, got = f"1-D {shape}", f"shape {array.shape}"
        raise ColumnTypeError(key=spec.name, expected=expected, got=got, **at)
    if array.size:
        check_array_dtype(spec, array.dtype, at, value)
    return array


def finish(
    spec: ColumnSpec, values: np.ndarray, offsets: np.ndarray | None, options: EncodeOptions
) -> np.ndarray:
    """Check flat ``values`` for ``spec`` and cast them (finiteness waits for the loss mask)."""
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
    arrays = [array_1d(spec, value, At(sample=i), "per sample") for i, value in enumerate(samples)]
    lengths = np.fromiter((len(array) for array in arrays), dtype=np.int64, count=len(arrays))
    return concatenate(spec, arrays), offsets_from_lengths(lengths)


def concatenate(spec: ColumnSpec, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The samples' arrays one after the other (an empty float array must not upcast ints)."""
    target = target_dtype(spec)
    filled = [array for array in arrays if array.size]
    if target.kind in "iu":
        filled = _exact_integers(spec.name, filled, arrays)
    return np.concatenate(filled) if filled else np.empty(0, dtype=target)


def _exact_integers(
    name: str, filled: list[np.ndarray], arrays: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """``filled`` (the non-empty ``arrays``), safe to concatenate into an integer column.

    numpy mixes uint64 and signed integers through float64 (rounding above 2**53): uint64 arrays
    become int64, and a value above the int64 maximum is reported.
    """
    unsigned = [array.dtype == np.uint64 for array in filled]
    if not any(unsigned) or all(unsigned):
        return filled
    for sample, array in enumerate(arrays):
        if array.dtype == np.uint64 and array.size and array.max() > INT64_MAX:
            position = int(np.argmax(array.reshape(-1) > INT64_MAX))
            msg = (
                f"`{name}` value {array.reshape(-1)[position].item()!r} is out of range for every "
                f"integer column type (at most {INT64_MAX})"
            )
            raise ValueRangeError(
                msg, key=name, sample=sample, position=position, fix="fix the value"
            )
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
    locate = python_locator(spec, samples, ragged=True)
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


def python_locator(
    spec: ColumnSpec, samples: Sequence[object], *, ragged: bool
) -> Callable[[str], NoReturn]:
    """What raises at the first Python value the column cannot hold (bool-only: checked now)."""
    if _only_bools(spec):
        _check_only_bools(spec, samples, ragged=ragged)
    return functools.partial(
        locate_python_value,
        spec.name,
        samples,
        target=target_dtype(spec),
        flag=is_flag(spec),
        ragged=ragged,
    )


def _check_only_bools(spec: ColumnSpec, samples: Sequence[object], *, ragged: bool) -> None:
    """Raise :class:`ColumnTypeError` on a value that is not a bool in a bool-only column."""
    for sample, values in enumerate(samples):
        items = values if ragged and isinstance(values, (list, tuple)) else [values]
        for position, value in enumerate(items):
            if not is_bool_value(value):
                at = At(sample=sample, position=position) if ragged else At(sample=sample)
                msg = (
                    f"`{spec.name}` is a bool column but holds {type(value).__name__} {value!r:.40}"
                )
                fix = (
                    "pass True/False (0 and 1 are ints), or declare the column with `flag=True` "
                    "to take 0/1 ints"
                )
                raise ColumnTypeError(msg, key=spec.name, fix=fix, **at)


def _holds_a_bool(samples: Sequence[object]) -> bool:
    """Whether a sample's list holds a bool (the careful path only: one look per value)."""
    return any(
        is_bool_value(value)
        for sample in samples
        if isinstance(sample, (list, tuple))
        for value in sample
    )


def _flat_from_mixed_flags(
    spec: ColumnSpec, samples: Sequence[object], locate: Callable[[str], NoReturn]
) -> tuple[np.ndarray, np.ndarray]:
    """The slow path for a flag column whose lists mix bools and ints."""
    arrays = []
    for sample, values in enumerate(samples):
        array = as_array(values, spec.name, At(sample=sample))
        if array.ndim != 1 or (array.size and array.dtype.kind not in "biu"):
            locate("values that are neither bool nor int")
        arrays.append(array.astype(np.int64))
    return flat_from_arrays(spec, arrays)


# --- the fast path for Python lists --------------------------------------------------------------

_MAX_LOOKS = 64  # 0/1 values looked at one by one, plus one per 64 values


def _typecode(target: np.dtype, *, flag: bool) -> str | None:
    """The ``struct`` typecode that holds ``target``'s values, ``bytes`` for 0/1 masks."""
    if target.kind == "f":
        return "d"  # float64: a value a float32 column would round is judged later
    if target.kind not in "iu":
        return None
    return "bytes" if flag and target == np.uint8 else target.char  # numpy's are struct's


def _hides_a_bool(
    samples: Sequence[list[Any]], values: np.ndarray, offsets: np.ndarray
) -> bool | None:
    """Whether a 0/1 value is a ``bool``; ``None`` if there are too many 0/1 values to look."""
    if values.dtype.kind == "f":
        candidates = np.flatnonzero((values == 0) | (values == 1))
    else:
        unsigned = values.view(np.dtype(f"u{values.dtype.itemsize}"))
        candidates = np.flatnonzero(unsigned <= 1)
    if not len(candidates):
        return False
    if len(candidates) > _MAX_LOOKS + len(values) // 64:
        return None
    rows = np.searchsorted(offsets, candidates, side="right") - 1
    for index, row in zip(candidates.tolist(), rows.tolist(), strict=True):
        if is_bool_value(samples[row][index - int(offsets[row])]):
            return True
    return False


def is_bool_value(value: object) -> bool:
    """Whether ``value`` is a bool in any container: ``bool``, ``numpy.bool_``, a 0-d bool array."""
    if isinstance(value, (bool, np.bool_)):
        return True
    return str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def _beyond_exact_ints(values: np.ndarray) -> bool:
    """Whether a value is as large as 2**53 (where an int may not be exact as a double)."""
    if not values.size:
        return False
    # fmax / fmin skip NaN (max would return it and hide a large value); no float64 copy
    return bool(np.fmax.reduce(values) >= 2.0**53 or np.fmin.reduce(values) <= -(2.0**53))


def _join(code: str, lists: Sequence[list[Any]]) -> bytes:
    """The C values of every list, one after the other (raises on a value refused).

    Packing floats, a warning (a numpy complex's real part) is an error.
    """
    if code == "bytes":  # bytearray(list) takes a fast path that bytes(list) does not (3x)
        return b"".join([bytearray(values) for values in lists])
    with warnings.catch_warnings():
        if code == "d":
            warnings.simplefilter("error")
        return b"".join([struct.pack(f"{len(values)}{code}", *values) for values in lists])


def flat_from_lists(
    target: np.dtype, samples: Sequence[object], *, flag: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """Flat values (ints as ``target``, floats as float64) and offsets; ``None``: careful path."""
    code = _typecode(target, flag=flag)
    # len(), not truthiness: `samples` may be a numpy object array of lists
    if code is None or len(samples) == 0:
        return None
    if not all(type(sample) is list for sample in samples):
        return None
    lists = cast("Sequence[list[Any]]", samples)
    try:
        joined = _join(code, lists)
    except (TypeError, ValueError, OverflowError, struct.error, Warning):
        return None
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    offsets = offsets_from_lengths(lengths)
    wide: dict[str, np.dtype] = {"d": np.dtype(np.float64), "bytes": np.dtype(np.uint8)}
    values = np.frombuffer(joined, dtype=wide.get(code, target))
    if code == "d" and _beyond_exact_ints(values):
        return None
    if not flag and _hides_a_bool(lists, values, offsets) is not False:
        return None
    return values, offsets
