"""The codecs of list columns: ``per_token``, ``per_sample_tensor`` and ``per_token_list``.

A tensor's trailing shape lives in its type (nested ``fixed_size_list``); a list per token comes
as lists of lists, a 2-D array or :class:`TokenLists` (CSR), its errors naming token and item.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from arrow_split._codecs._base import (
    Codec,
    EncodeOptions,
    FlatNumbers,
    RunsMemo,
    TypeFields,
    is_list,
    leaf_type,
    list_type,
    nest,
    numpy_dtype,
    ragged_values,
    split_by_offsets,
    stored_type,
    take_runs,
    trailing_shape,
)
from arrow_split._codecs._numeric import (
    At,
    as_array,
    check_array_dtype,
    check_list_samples,
    concatenate,
    finish,
    flat_from_arrays,
    flat_from_python,
    is_array,
    locate_python_value,
    offsets_from_lengths,
    target_dtype,
)
from arrow_split.errors import ArrowSplitError, ColumnTypeError, RaggedLengthError, ValueRangeError
from arrow_split.schema import ColumnSpec

__all__ = [
    "RaggedCodec",
    "TensorCodec",
    "TokenLists",
    "TokenListsCodec",
    "check_nonempty",
    "token_list_values",
]


class RaggedCodec(Codec):
    """Ragged lists of numbers; a take copies each row's values as one run."""

    tensor_role = "ragged"

    def encode(
        self, spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
    ) -> tuple[pa.Array, ColumnSpec]:
        # the common case: plain lists (in a list, or in a numpy object array); an empty column
        # goes the array way, which takes an empty list and an empty 2-D array alike
        if len(samples) and all(type(sample) is list for sample in samples):
            values, offsets = flat_from_python(spec, samples)
        elif all(is_array(sample) for sample in samples):
            values, offsets = flat_from_arrays(spec, samples)
        else:
            mixed = [
                as_array(s, spec.name, At(sample=i)).tolist() if is_array(s) else s
                for i, s in enumerate(samples)
            ]
            check_list_samples(spec.name, mixed)
            values, offsets = flat_from_python(spec, mixed)
        values = finish(spec, values, offsets, options)
        return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values)), spec

    def decode(self, spec: ColumnSpec, array: pa.Array) -> list[object]:
        values, offsets = ragged_values(array)
        return [part.tolist() for part in split_by_offsets(values, offsets)]

    def arrow_type(self, spec: ColumnSpec, fields: TypeFields | None = None) -> pa.DataType:
        return list_type(stored_type(spec, fields))

    def type_fields(self, arrow_type: pa.DataType) -> TypeFields | None:
        if not is_list(arrow_type) or trailing_shape(arrow_type):
            return None
        return TypeFields(storage=arrow_type.value_type)

    def lengths(self, array: pa.Array) -> np.ndarray:
        return np.diff(array.offsets.to_numpy())

    def flat_numbers(self, array: pa.Array) -> FlatNumbers:
        return FlatNumbers(*ragged_values(array))

    def take(self, array: pa.Array, indices: np.ndarray, memo: RunsMemo | None = None) -> pa.Array:
        return take_runs(array, indices, memo)


# --- per_sample_tensor ---------------------------------------------------------------------------


def _flatten_nested(value: object) -> list[object]:
    """The leaves of nested lists and tuples, in row-major order (a non-list is one leaf)."""
    if not isinstance(value, (list, tuple)):
        return [value]
    leaves: list[object] = []
    for item in value:
        leaves.extend(_flatten_nested(item))
    return leaves


def _locate_nested(spec: ColumnSpec, sample: int, value: object, dtype: np.dtype) -> None:
    """For nested Python lists numpy could not type as numbers: raise on the first bad value."""
    numbers = "biuf" if target_dtype(spec).kind == "f" else "biu"
    if is_array(value) or dtype.kind in numbers:
        return
    locate_python_value(
        spec.name,
        [_flatten_nested(value)],
        target=target_dtype(spec),
        flag=spec.flag,
        ragged=True,
        cause=f"an array of dtype {dtype}",
        start=sample,
    )


def _tensor_array(spec: ColumnSpec, sample: int, value: object) -> np.ndarray:
    array = as_array(value, spec.name, At(sample=sample))
    if array.size and array.ndim:
        _locate_nested(spec, sample, value, array.dtype)
    if array.ndim == 0:
        expected, got = "an array of shape [rows, ...] per sample", f"the scalar {value!r:.40}"
        raise ColumnTypeError(key=spec.name, sample=sample, expected=expected, got=got)
    if array.size and array.dtype.kind not in "biuf":
        expected = "numbers"
        got = f"an array of dtype {array.dtype} (None values, or rows of different lengths?)"
        msg = f"`{spec.name}` must hold {expected}, got {got}"
        raise ColumnTypeError(msg, key=spec.name, sample=sample, expected=expected, got=got)
    if array.size:
        check_array_dtype(spec, array.dtype, At(sample=sample), value)
    return array


def _tensor_arrays(spec: ColumnSpec, samples: Sequence[object]) -> list[np.ndarray]:
    """Per-sample arrays of one trailing shape (empty samples reshaped to it)."""
    arrays = [_tensor_array(spec, sample, value) for sample, value in enumerate(samples)]
    shaped = [(i, a) for i, a in enumerate(arrays) if a.size or a.ndim > 1]
    trailing = shaped[0][1].shape[1:] if shaped else ()
    for sample, array in shaped:
        if array.shape[1:] != trailing:
            msg = (
                f"`{spec.name}` has trailing shape {array.shape[1:]} but an earlier sample has "
                f"{trailing}; every sample must have the same shape after the first axis"
            )
            raise RaggedLengthError(
                msg, key=spec.name, sample=sample, expected=str(trailing), got=str(array.shape[1:])
            )
    if 0 in trailing:
        msg = (
            f"`{spec.name}` has trailing shape {trailing}; every axis after the first must have "
            "at least one element (an empty sample is shape [0, ...])"
        )
        raise RaggedLengthError(msg, key=spec.name, sample=shaped[0][0], got=str(trailing))
    target = target_dtype(spec)
    return [
        array if array.size else np.empty((len(array), *trailing), dtype=target) for array in arrays
    ]


def _bounds(arrays: Sequence[np.ndarray]) -> tuple[int, int]:
    """The smallest and largest value of integer arrays (0, 0 for arrays that fit uint8)."""
    low = high = 0
    for array in arrays:
        if np.can_cast(array.dtype, np.uint8):
            continue
        low, high = min(low, int(array.min())), max(high, int(array.max()))
    return low, high


def _fits(arrow_type: pa.DataType, low: int, high: int) -> bool:
    info = np.iinfo(numpy_dtype(arrow_type))
    return bool(info.min <= low and high <= info.max)


def _narrow_values(spec: ColumnSpec, arrays: Sequence[np.ndarray]) -> pa.Array | None:
    """The flat values in the narrowest storage type; ``None`` if one is out of range."""
    filled = [array for array in arrays if array.size]
    low, high = _bounds(filled)
    if not _fits(spec.storage_types[-1], low, high):
        return None  # the exact path locates the value and raises
    storage = next(t for t in spec.storage_types if _fits(t, low, high))
    dtype = numpy_dtype(storage)
    count = sum(array.size for array in filled)
    buffer = pa.allocate_buffer(count * dtype.itemsize)
    flat = np.frombuffer(buffer, dtype=dtype)
    if filled:
        np.concatenate([a.reshape(-1) for a in filled], out=flat, casting="unsafe")
    return pa.Array.from_buffers(storage, count, [None, buffer])


class TensorCodec(RaggedCodec):
    """Per-sample arrays whose trailing shape lives in the Arrow type (lengths count rows)."""

    def encode(
        self, spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
    ) -> tuple[pa.Array, ColumnSpec]:
        arrays = _tensor_arrays(spec, samples)
        trailing: tuple[int, ...] = arrays[0].shape[1:] if arrays else ()
        rows = np.fromiter((len(array) for array in arrays), dtype=np.int64, count=len(arrays))
        offsets = offsets_from_lengths(rows)
        child = _narrow_values(spec, arrays) if spec.storage == "narrow" else None
        if child is None:
            stacked = concatenate(spec, arrays)
            width = int(np.prod(trailing, dtype=np.int64))
            child = pa.array(finish(spec, stacked.reshape(-1), offsets * width, options))
        return pa.LargeListArray.from_arrays(pa.array(offsets), nest(child, trailing)), spec

    def decode(self, spec: ColumnSpec, array: pa.Array) -> list[object]:
        values, offsets = ragged_values(array)
        target = target_dtype(spec)
        if values.dtype != target:  # narrow storage: give back the logical type
            values = values.astype(target)
        return list(split_by_offsets(values, offsets))

    def arrow_type(self, spec: ColumnSpec, fields: TypeFields | None = None) -> pa.DataType:
        trailing = fields.trailing if fields is not None else ()
        return list_type(stored_type(spec, fields), trailing)

    def type_fields(self, arrow_type: pa.DataType) -> TypeFields | None:
        if not is_list(arrow_type):
            return None
        return TypeFields(storage=leaf_type(arrow_type), trailing=trailing_shape(arrow_type))

    def flat_numbers(self, array: pa.Array) -> FlatNumbers:
        values, offsets = ragged_values(array)
        width = int(np.prod(values.shape[1:], dtype=np.int64))
        return FlatNumbers(values.reshape(-1), offsets * width)


# --- per_token_list ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class TokenLists:
    """One sample of a ``per_token_list`` column in CSR form.

    Parameters
    ----------
    values
        The flat values of every token, one token's list after the other (a list or 1-D array).
    offsets
        ``tokens + 1`` integers: token ``t`` holds ``values[offsets[t]:offsets[t + 1]]``. They
        start at 0, never decrease and end at ``len(values)``.

    Examples
    --------
    >>> from arrow_split import TokenLists
    >>> TokenLists(values=[0, 7, 1, 8, 9], offsets=[0, 2, 5])  # token 0: [0, 7]; 1: [1, 8, 9]
    TokenLists(values=[0, 7, 1, 8, 9], offsets=[0, 2, 5])
    """

    values: object
    offsets: object


def token_list_values(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(values, sample_offsets, token_offsets)`` of a ``per_token_list`` column: numpy views.

    Sample offsets index the tokens, token offsets the values; both start at 0.
    """
    raw = array.offsets.to_numpy()
    start, stop = int(raw[0]), int(raw[-1])
    values, token_offsets = ragged_values(array.values.slice(start, stop - start))
    return values, raw - start if start else raw, token_offsets


def check_nonempty(spec: ColumnSpec, sample_offsets: np.ndarray, token_offsets: np.ndarray) -> None:
    """Raise :class:`ValueRangeError` on the first empty token list of a ``nonempty`` column."""
    if not spec.nonempty or len(token_offsets) < 2:
        return
    empty = token_offsets[1:] == token_offsets[:-1]
    if not empty.any():
        return
    token = int(np.argmax(empty))
    sample = int(np.searchsorted(sample_offsets, token, side="right")) - 1
    position = token - int(sample_offsets[sample])
    msg = (
        f"`{spec.name}` has an empty list for this token (offsets {int(token_offsets[token])} -> "
        f"{int(token_offsets[token + 1])}); the column is `nonempty`: every token needs at least "
        "one value, so a sample's offsets must be strictly increasing"
    )
    fix = "fix the producer, or drop the sample"
    raise ValueRangeError(msg, key=spec.name, sample=sample, position=position, fix=fix)


def _integer_offsets(spec: ColumnSpec, sample: int, offsets: object, count: int) -> np.ndarray:
    """A :class:`TokenLists`' offsets as int64, checked: from 0, non-decreasing, to ``count``."""
    array = as_array(offsets, spec.name, At(sample=sample))
    if array.ndim != 1 or len(array) < 1 or (array.size and array.dtype.kind not in "iu"):
        msg = (
            f"`{spec.name}` offsets must be a 1-D list of ints with one more entry than the "
            f"sample has tokens, got {array.dtype} of shape {array.shape}"
        )
        raise ColumnTypeError(msg, key=spec.name, sample=sample)
    result = array.astype(np.int64)
    if int(result[0]) != 0:
        msg = f"`{spec.name}` offsets must start at 0, got {int(result[0])}"
        raise ValueRangeError(msg, key=spec.name, sample=sample, got=str(int(result[0])))
    falling = np.flatnonzero(np.diff(result) < 0)
    if falling.size:
        token = int(falling[0])
        msg = (
            f"`{spec.name}` offsets fall from {int(result[token])} to {int(result[token + 1])}; "
            "offsets never decrease"
        )
        raise ValueRangeError(msg, key=spec.name, sample=sample, position=token)
    if int(result[-1]) != count:
        msg = (
            f"`{spec.name}` offsets end at {int(result[-1])} but the sample has {count} values; "
            "the last offset is the number of values"
        )
        raise RaggedLengthError(
            msg, key=spec.name, sample=sample, expected=str(count), got=str(int(result[-1]))
        )
    return result


def _token_list(value: object) -> bool:
    if isinstance(value, (list, tuple)):
        return True
    return is_array(value) and np.ndim(value) == 1  # type: ignore[arg-type]


def _csr(spec: ColumnSpec, sample: int, value: object) -> tuple[object, np.ndarray]:
    """One sample as ``(flat values, per-token offsets)``; the values are not checked yet."""
    if isinstance(value, TokenLists):
        values = value.values
        if is_array(values):
            values = as_array(values, spec.name, At(sample=sample))
        if not isinstance(values, (list, tuple, np.ndarray)):
            msg = (
                f"`{spec.name}` values must be a list or a 1-D array, got "
                f"{type(values).__name__} {values!r:.40}"
            )
            raise ColumnTypeError(msg, key=spec.name, sample=sample)
        return values, _integer_offsets(spec, sample, value.offsets, len(values))
    if is_array(value) and np.ndim(value) == 2:  # type: ignore[arg-type]
        array = as_array(value, spec.name, At(sample=sample))
        width = array.shape[1]
        return array.reshape(-1), np.arange(len(array) + 1, dtype=np.int64) * width
    if isinstance(value, (list, tuple)) and all(map(_token_list, value)):
        lengths = np.fromiter(map(len, value), dtype=np.int64, count=len(value))
        if value and all(map(is_array, value)):
            arrays = [as_array(item, spec.name, At(sample=sample)) for item in value]
            filled = [array for array in arrays if array.size]  # an empty one must not upcast
            return (np.concatenate(filled) if filled else []), offsets_from_lengths(lengths)
        flat: list[object] = []
        for item in value:
            flat.extend(item.tolist() if is_array(item) else item)
        return flat, offsets_from_lengths(lengths)
    expected = (
        "one list of numbers per token (a list of lists, a 2-D array or "
        "TokenLists(values, offsets))"
    )
    got = f"{type(value).__name__} {value!r:.40}"
    raise ColumnTypeError(key=spec.name, sample=sample, expected=expected, got=got)


def _at_token(error: ArrowSplitError, token_offsets: Sequence[np.ndarray]) -> ArrowSplitError:
    """Say which token a value error is at: its sample's value ``position`` -> token and item."""
    if error.sample is None or error.position is None or error.item is not None:
        return error
    offsets = token_offsets[error.sample]
    token = int(np.searchsorted(offsets, error.position, side="right")) - 1
    return error.replaced(position=token, item=error.position - int(offsets[token]))


class TokenListsCodec(Codec):
    """Lists of numbers per token; a take is Arrow's (fresh buffers at both levels)."""

    tensor_role = "token_lists"

    def encode(
        self, spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
    ) -> tuple[pa.Array, ColumnSpec]:
        parts = [_csr(spec, sample, value) for sample, value in enumerate(samples)]
        token_offsets = [offsets for _, offsets in parts]
        flats = [values for values, _ in parts]
        try:
            if flats and all(isinstance(values, np.ndarray) for values in flats):
                values, value_offsets = flat_from_arrays(spec, flats)
            else:
                lists = [v.tolist() if isinstance(v, np.ndarray) else list(v) for v in flats]  # type: ignore[call-overload]
                values, value_offsets = flat_from_python(spec, lists)
            values = finish(spec, values, value_offsets, options)
        except ArrowSplitError as error:
            raise _at_token(error, token_offsets) from None
        counts = np.fromiter((len(o) - 1 for o in token_offsets), dtype=np.int64, count=len(parts))
        sample_offsets = offsets_from_lengths(counts)
        bases = value_offsets.tolist()
        inner = [o[:-1] + base for o, base in zip(token_offsets, bases, strict=False)]
        inner.append(np.array([int(value_offsets[-1])], dtype=np.int64))
        all_tokens = np.concatenate(inner)
        check_nonempty(spec, sample_offsets, all_tokens)
        tokens = pa.LargeListArray.from_arrays(pa.array(all_tokens), pa.array(values))
        return pa.LargeListArray.from_arrays(pa.array(sample_offsets), tokens), spec

    def decode(self, spec: ColumnSpec, array: pa.Array) -> list[object]:
        values, sample_offsets, token_offsets = token_list_values(array)
        flat, tokens = values.tolist(), token_offsets.tolist()
        return [
            [flat[tokens[t] : tokens[t + 1]] for t in range(start, stop)]
            for start, stop in itertools.pairwise(sample_offsets.tolist())
        ]

    def arrow_type(self, spec: ColumnSpec, fields: TypeFields | None = None) -> pa.DataType:
        return list_type(list_type(stored_type(spec, fields)))

    def type_fields(self, arrow_type: pa.DataType) -> TypeFields | None:
        if not is_list(arrow_type) or not is_list(arrow_type.value_type):
            return None
        return TypeFields(storage=arrow_type.value_type.value_type)

    def lengths(self, array: pa.Array) -> np.ndarray:
        return np.diff(array.offsets.to_numpy())

    def flat_numbers(self, array: pa.Array) -> FlatNumbers:
        values, sample_offsets, token_offsets = token_list_values(array)
        return FlatNumbers(values, token_offsets[sample_offsets], token_offsets)
