"""Random corruption of valid train data: a valid result, or a typed error; never a mutation.

Valid batches of every column kind (:func:`arrow_split.testing.strategies.train_data`, lists and
numpy forms) are corrupted at random: wrong types at the key, sample and value level, wrong numpy
dtypes and shapes, wrong lengths, None/NaN/inf, huge ints, nested junk, unknown keys and bad
batch-global values. Whatever the corruption, :meth:`RolloutBatch.from_train_data` either returns
a batch whose shards put back together give the batch again, or raises an
:class:`~arrow_split.ArrowSplitError` that is also a ``TypeError`` or ``ValueError``; and the
input is left exactly as it was.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arrow_split import (
    KNOWN_COLUMNS,
    ArrowSplitError,
    RolloutBatch,
    split_train_data_by_dp_raw,
)
from arrow_split.testing.strategies import train_data

# A shared sentinel: deep copies keep it (memo), so "not mutated" compares it by identity.
_OPAQUE = object()

_JUNK_SCALARS: list[Any] = [
    "x",
    "",
    b"\x00",
    {"a": 1},
    {1, 2},
    _OPAQUE,
    None,
    math.nan,
    math.inf,
    -math.inf,
    1.5,
    -0.0,
    True,
    False,
    2**31,
    2**63,
    2**64,
    2**70,
    -(2**70),
    -(2**31) - 1,
    -1,
    complex(1, 2),
    np.float64(math.nan),
    np.float32(math.inf),
    np.int64(2**62),
    np.uint64(2**63),
    np.bool_(True),
    np.datetime64("2024-01-01"),
    np.str_("7"),
    np.complex64(1),
    np.float16(0.5),
    Ellipsis,
]
_JUNK_NESTED: list[Any] = [
    [],
    [[]],
    [1, [2]],
    [[1, 2], [3]],
    [[[1]]],
    [None],
    ["1"],
    [1.5],
    [2**70],
    (1, 2),
    [{"a": 1}],
    [[1, 2], None],
    range(3),
]
_DTYPES: list[Any] = [
    object,
    np.float64,
    np.float32,
    np.float16,
    np.bool_,
    np.complex128,
    "datetime64[s]",
    "timedelta64[s]",
    "U3",
    "S3",
    np.int8,
    np.uint8,
    np.int16,
    np.uint16,
    np.uint32,
    np.int64,
    np.uint64,
]
_ARRAYS: list[Callable[[], Any]] = [
    lambda: np.array(5),
    lambda: np.array([[1, 2], [3, 4]]),
    lambda: np.zeros((2, 0)),
    lambda: np.array([1, None], dtype=object),
    lambda: np.array([[1], [2, 3]], dtype=object),
    lambda: np.array([2**63], dtype=np.uint64),
    lambda: np.array([2**40, -(2**40)], dtype=np.int64),
    lambda: np.array([math.nan, math.inf]),
    lambda: np.array(["a", "b"]),
    lambda: np.array([1 + 2j]),
    lambda: np.array(["2024-01-01"], dtype="datetime64[D]"),
    lambda: np.array([True, False]),
    lambda: np.empty(0, dtype=object),
    lambda: np.ma.masked_array([1, 2], mask=[0, 1]),
]

# objects JSON cannot keep are pickled, as these tests mean: the warning is expected
pytestmark = pytest.mark.filterwarnings("ignore::arrow_split.ObjectFallbackWarning")


def _junk(draw: st.DrawFn) -> Any:
    """One junk value: a bad scalar, nested junk, or a bad numpy array."""
    family = draw(st.sampled_from(["scalar", "nested", "array"]))
    if family == "scalar":
        return draw(st.sampled_from(_JUNK_SCALARS))
    if family == "nested":
        return copy.deepcopy(draw(st.sampled_from(_JUNK_NESTED)))
    return draw(st.sampled_from(_ARRAYS))()


def _is_sequence(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim >= 1 and len(value) > 0
    return isinstance(value, (list, tuple)) and len(value) > 0


def _per_sample_keys(data: dict[str, Any], *, numeric: bool = False) -> list[str]:
    """The known per-sample keys that still hold a non-empty sequence (numeric ones only)."""
    return [
        key
        for key in data
        if key in KNOWN_COLUMNS
        and KNOWN_COLUMNS[key].is_per_sample
        and (KNOWN_COLUMNS[key].value_type is not None or not numeric)
        and _is_sequence(data[key])
    ]


def _global_keys(data: dict[str, Any]) -> list[str]:
    return [key for key in data if key in KNOWN_COLUMNS and not KNOWN_COLUMNS[key].is_per_sample]


def _pick_sample(
    draw: st.DrawFn, data: dict[str, Any], *, numeric: bool = False
) -> tuple[str, int] | None:
    keys = _per_sample_keys(data, numeric=numeric)
    if not keys:
        return None
    key = draw(st.sampled_from(keys))
    return key, draw(st.integers(0, len(data[key]) - 1))


def _cast(value: Any, dtype: Any) -> np.ndarray:
    """``value`` as an array of ``dtype`` (wrapping around), or an object array if numpy refuses."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return np.asarray(value).astype(dtype)
    except (TypeError, ValueError, OverflowError):
        array_like = isinstance(value, np.ndarray) and value.ndim > 0
        iterable = isinstance(value, (list, tuple)) or array_like
        items = list(value) if iterable else [value]
        array = np.empty(len(items), dtype=object)
        array[:] = items
        return array


# --- the corruptions: each takes the drawn data and changes it in place -----------------------


def _key_junk(draw: st.DrawFn, data: dict[str, Any]) -> None:
    """A whole key replaced by junk (a str, a dict, None, a 0-d or 2-d array, ...)."""
    key = draw(st.sampled_from(sorted(data)))
    data[key] = _junk(draw)


def _sample_junk(draw: st.DrawFn, data: dict[str, Any]) -> None:
    """One sample of a per-sample key replaced by junk."""
    picked = _pick_sample(draw, data)
    if picked is None:
        return
    key, sample = picked
    values = list(data[key])
    values[sample] = _junk(draw)
    data[key] = values if draw(st.booleans()) else tuple(values)


def _items(value: Any) -> list[Any] | None:
    """The items of a list, tuple or array of at least one dimension; ``None`` otherwise."""
    if isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim >= 1):
        return list(value)
    return None


def _value_junk(draw: st.DrawFn, data: dict[str, Any]) -> None:
    """One value inside a list sample (a token, a mask, a log-prob) replaced by junk."""
    picked = _pick_sample(draw, data)
    if picked is None:
        return
    key, sample = picked
    values = list(data[key])
    inner = _items(values[sample])
    if not inner:
        values[sample] = [_junk(draw)]
    else:
        inner[draw(st.integers(0, len(inner) - 1))] = _junk(draw)
        values[sample] = inner
    data[key] = values


def _numpy_dtype(draw: st.DrawFn, data: dict[str, Any]) -> None:
    """A key's arrays (or one sample's array) cast to another dtype."""
    picked = _pick_sample(draw, data)
    if picked is None:
        return
    key, sample = picked
    dtype = draw(st.sampled_from(_DTYPES))
    values = list(data[key])
    if isinstance(data[key], np.ndarray) and draw(st.booleans()):
        data[key] = _cast(data[key], dtype)
    elif draw(st.booleans()):
        data[key] = [_cast(value, dtype) for value in values]
    else:
        values[sample] = _cast(values[sample], dtype)
        data[key] = values


def _huge_in_numpy(draw: st.DrawFn, data: dict[str, Any]) -> None:
    """A value beyond the column's integer type, in a Python list or a numpy array."""
    picked = _pick_sample(draw, data, numeric=True)
    if picked is None:
        return
    key, sample = picked
    huge = draw(
        st.sampled_from([2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), -(2**31) - 1])
    )
    dtype = np.uint64 if huge >= 2**63 else np.int64
    values = list(data[key])
    inner = _items(values[sample])
    if inner:
        inner[0] = huge
        values[sample] = _cast(inner, dtype) if draw(st.booleans()) else inner
    elif draw(st.booleans()):
        values[sample] = huge
    else:
        data[key] = np.array([huge] * len(values), dtype=dtype)
        return
    data[key] = values


def _wrong_length(draw: st.DrawFn, data: dict[str, Any]) -> None:
    """A sample one shorter or longer, or a key shorter or longer than `tokens`."""
    picked = _pick_sample(draw, data)
    if picked is None:
        return
    key, sample = picked
    values = list(data[key])
    inner = _items(values[sample])
    if draw(st.booleans()):
        values = values[:-1] if draw(st.booleans()) else [*values, values[-1]]
    elif inner is None:
        values[sample] = [values[sample]]
    else:
        inner = inner[:-1] if inner and draw(st.booleans()) else [*inner, inner[-1] if inner else 0]
        values[sample] = inner if draw(st.booleans()) else _cast(inner, np.int64)
    data[key] = values


def _wrong_shape(draw: st.DrawFn, data: dict[str, Any]) -> None:
    """Ragged nested lists inside a tensor, a scalar where a list is needed, and the reverse."""
    picked = _pick_sample(draw, data)
    if picked is None:
        return
    key, sample = picked
    values = list(data[key])
    inner = _items(values[sample])
    choice = draw(st.sampled_from(["ragged", "scalar", "wrap", "deeper"]))
    if choice == "ragged" and inner and len(inner) > 1:
        first = _items(inner[0]) or [inner[0]]
        inner[0] = [*first, *first]
        values[sample] = [_items(row) or row for row in inner]
    elif choice == "scalar":
        values[sample] = draw(st.sampled_from([0, 1, 1.0, np.int32(3), np.array(2)]))
    elif choice == "wrap":
        values[sample] = [values[sample]]
    elif inner is not None:
        values[sample] = [[item] for item in inner]
    data[key] = values


def _unknown_or_global(draw: st.DrawFn, data: dict[str, Any]) -> None:
    """An unknown key, a missing key, or a batch-global key holding junk."""
    choice = draw(st.sampled_from(["unknown", "drop", "global", "known"]))
    if choice == "unknown":
        data[draw(st.sampled_from(["nope", "", "total_lengths", "Tokens"]))] = _junk(draw)
    elif choice == "drop" and data:
        del data[draw(st.sampled_from(sorted(data)))]
    elif choice == "global" and _global_keys(data):
        key = draw(st.sampled_from(_global_keys(data)))
        value, junk = data[key], _junk(draw)
        if isinstance(value, list) and value and draw(st.booleans()):
            value[draw(st.integers(0, len(value) - 1))] = junk
        else:
            data[key] = junk
    elif choice == "known":
        key = draw(st.sampled_from(sorted(set(KNOWN_COLUMNS) - set(data))))
        data[key] = _junk(draw)


CORRUPTIONS: dict[str, Callable[[st.DrawFn, dict[str, Any]], None]] = {
    "key": _key_junk,
    "sample": _sample_junk,
    "value": _value_junk,
    "dtype": _numpy_dtype,
    "huge-int": _huge_in_numpy,
    "length": _wrong_length,
    "shape": _wrong_shape,
    "key-set-and-globals": _unknown_or_global,
}


@st.composite
def corrupted_train_data(draw: st.DrawFn, corruption: str) -> dict[str, Any]:
    """Valid train data with one to three corruptions of the given family (then any)."""
    data = draw(train_data(max_samples=6, cap=5))
    CORRUPTIONS[corruption](draw, data)
    for _ in range(draw(st.integers(0, 2))):
        CORRUPTIONS[draw(st.sampled_from(sorted(CORRUPTIONS)))](draw, data)
    return data


# --- what must hold --------------------------------------------------------------------------


def _snapshot(data: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(data, memo={id(_OPAQUE): _OPAQUE})


def _same(left: Any, right: Any) -> bool:
    """Deep equality: arrays by dtype, shape, values and writeability; NaN equals NaN."""
    if type(left) is not type(right):
        return False
    if isinstance(left, np.ndarray):
        if left.dtype != right.dtype or left.shape != right.shape:
            return False
        if left.flags.writeable != right.flags.writeable:
            return False
        if left.dtype.kind in "fcmM":
            return bool(np.array_equal(left, right, equal_nan=True))
        return (
            bool(np.array_equal(left, right))
            if left.dtype != object
            else _same(left.tolist(), right.tolist())
        )
    if isinstance(left, (list, tuple)):
        return len(left) == len(right) and all(map(_same, left, right))
    if isinstance(left, dict):
        return list(left) == list(right) and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, float) and math.isnan(left):
        return math.isnan(right)
    if isinstance(left, np.generic) and left.dtype.kind in "fcmM" and np.isnan(left):
        return bool(np.isnan(right))
    try:
        return bool(left == right) or left is right
    except (TypeError, ValueError):
        return left is right


def _plain(record_batch: pa.RecordBatch) -> pa.RecordBatch:
    """Objects stored once (dictionaries: each shard has its own) as one value per row."""
    columns = [
        column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column
        for column in record_batch.columns
    ]
    return pa.RecordBatch.from_arrays(columns, names=record_batch.schema.names)


def _check_reassembles(data: dict[str, Any], batch: RolloutBatch) -> None:
    """Every split of ``batch`` puts back together (undoing the permutation) into the batch."""
    whole = pa.Table.from_batches([_plain(batch.record_batch)])
    n = batch.num_samples
    requests: list[tuple[Any, int, bool]] = [
        (data, 2, False),
        (batch, 3, False),
        *((batch, k, True) for k in (2, 3) if n >= k and n % k == 0),
    ]
    for source, dp_size, balance in requests:
        shards = split_train_data_by_dp_raw(source, dp_size, balance_data=balance)
        assert len(shards) == dp_size
        partition = np.concatenate([shard.partition for shard in shards])
        np.testing.assert_array_equal(np.sort(partition), np.arange(n))
        table = pa.Table.from_batches(
            [_plain(shard.record_batch) for shard in shards], whole.schema
        )
        assert table.take(pa.array(np.argsort(partition), pa.int64())).equals(whole)
        for shard in shards:
            assert dict(shard.specs) == dict(batch.specs)
            assert shard.batch_globals.keys() == batch.batch_globals.keys()
            for key, value in batch.batch_globals.items():
                assert _same(shard.batch_globals[key], value), key
    batch.to_train_data()  # decodes without error


def _convert(train: dict[str, Any]) -> RolloutBatch | ArrowSplitError:
    try:
        return RolloutBatch.from_train_data(train)
    except ArrowSplitError as exc:  # anything else escapes and fails the test
        return exc


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
@settings(deadline=None, suppress_health_check=list(HealthCheck))  # examples: the profile's
@given(data=st.data())
def test_corrupted_train_data_is_accepted_or_rejected_with_a_typed_error(
    corruption: str, data: st.DataObject
) -> None:
    train = data.draw(corrupted_train_data(corruption))
    before = _snapshot(train)
    result = _convert(train)
    if isinstance(result, RolloutBatch):
        _check_reassembles(train, result)
    else:
        assert isinstance(result, (TypeError, ValueError)), repr(result)
        assert str(result), "an error message must say what is wrong"
    assert _same(train, before), "the input was mutated"
