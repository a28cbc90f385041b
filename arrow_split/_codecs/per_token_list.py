"""The ``per_token_list`` kind: a list of numbers per token (``large_list<large_list<...>>``).

A sample comes as lists of lists, a 2-D array or :class:`TokenLists` (CSR), its errors naming
token and item; a take is Arrow's (fresh buffers at both levels).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from arrow_split._codecs._base import (
    EncodeOptions,
    is_list,
    list_type,
    ragged_values,
)
from arrow_split._codecs._checks import At
from arrow_split._codecs._kind import FlatNumbers, TypeFields, stored_type
from arrow_split._codecs._numeric import (
    as_array,
    finish,
    flat_from_arrays,
    flat_from_python,
    is_array,
    offsets_from_lengths,
)
from arrow_split._codecs.per_token import RaggedCodec
from arrow_split.errors import ArrowSplitError, ColumnTypeError, RaggedLengthError, ValueRangeError

if TYPE_CHECKING:
    from arrow_split.schema import ColumnSpec

__all__ = [
    "TokenLists",
    "TokenListsCodec",
    "token_list_values",
]


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


class TokenListsCodec(RaggedCodec):
    """Lists of numbers per token, its lengths counting tokens; a take is Arrow's (both levels)."""

    text = "one list of values per token"

    tensor_role = "token_lists"
    takes_nonempty = True

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

    def flat_numbers(self, array: pa.Array) -> FlatNumbers:
        values, sample_offsets, token_offsets = token_list_values(array)
        return FlatNumbers(values, token_offsets[sample_offsets], token_offsets)

    def check_content(self, spec: ColumnSpec, array: pa.Array) -> None:
        super().check_content(spec, array)
        if spec.nonempty:
            _, sample_offsets, token_offsets = token_list_values(array)
            check_nonempty(spec, sample_offsets, token_offsets)

    def tensor_values(self, array: pa.Array) -> FlatNumbers:
        values, sample_offsets, token_offsets = token_list_values(array)
        return FlatNumbers(values, sample_offsets, token_offsets)

    def fill(self, array: pa.Array, rows: np.ndarray, value: int) -> pa.Array:
        return array  # a padding row keeps the copy of the last row: no value per token
