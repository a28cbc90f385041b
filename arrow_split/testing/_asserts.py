"""Assertions for tests: two batches (or shards) are equal, or the first difference is named."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import pyarrow as pa

from arrow_split.batch import arrays_equal, values_equal

__all__ = ["assert_batches_equal", "assert_shards_equal"]

_MISSING = object()


class _BatchLike(Protocol):
    """What the assertions read: a RolloutBatch, or a shard of one."""

    @property
    def record_batch(self) -> pa.RecordBatch: ...

    @property
    def specs(self) -> Mapping[str, Any]: ...

    @property
    def batch_globals(self) -> Mapping[str, object]: ...


def _fail(what: str, left: object, right: object) -> None:
    msg = f"{what} differ\n[left]:  {left!r:.200}\n[right]: {right!r:.200}"
    raise AssertionError(msg)


def _first_differing_row(left: pa.Array, right: pa.Array) -> int:
    """The first row at which two arrays of equal length and type differ (NaN equals NaN)."""
    for row in range(len(left)):
        if not arrays_equal(left.slice(row, 1), right.slice(row, 1)):
            return row
    return len(left)


def _check_record_batches(left: pa.RecordBatch, right: pa.RecordBatch) -> None:
    if left.schema.names != right.schema.names:
        _fail("column names", left.schema.names, right.schema.names)
    if left.num_rows != right.num_rows:
        _fail("numbers of rows", left.num_rows, right.num_rows)
    for name, left_column, right_column in zip(
        left.schema.names, left.columns, right.columns, strict=True
    ):
        if left_column.type != right_column.type:
            _fail(f"types of column `{name}`", left_column.type, right_column.type)
        if not arrays_equal(left_column, right_column):
            row = _first_differing_row(left_column, right_column)
            _fail(
                f"column `{name}`, row {row}: values",
                left_column[row].as_py(),
                right_column[row].as_py(),
            )
    if not left.schema.equals(right.schema, check_metadata=True):
        _fail("record batches (schema metadata)", left.schema, right.schema)


def _check_mapping(what: str, left: Mapping[str, Any], right: Mapping[str, Any]) -> None:
    if list(left) != list(right):
        _fail(f"keys of {what}", list(left), list(right))
    for key, value in left.items():
        if not values_equal(value, right[key]):
            _fail(f"{what}[`{key}`]", value, right[key])


def assert_batches_equal(left: _BatchLike, right: _BatchLike) -> None:
    """Assert that two rollout batches hold the same columns, specs and batch globals.

    NaN equals NaN at the same place (a NaN-position compare, as :meth:`RolloutBatch.equals`).

    Parameters
    ----------
    left, right
        :class:`arrow_split.RolloutBatch` objects (or shards).

    Raises
    ------
    AssertionError
        Naming the first difference: a column's name, type, or first differing row (with both
        values), a spec, or a batch-global key; or that one side is not a batch at all.

    Examples
    --------
    >>> from arrow_split import RolloutBatch
    >>> from arrow_split.testing import assert_batches_equal
    >>> batch = RolloutBatch.from_train_data({"tokens": [[1, 2], [3]]})
    >>> assert_batches_equal(batch, RolloutBatch.from_train_data({"tokens": [[1, 2], [3]]}))
    """
    for side, value in (("left", left), ("right", right)):
        if not all(hasattr(value, name) for name in ("record_batch", "specs", "batch_globals")):
            _fail(f"types ({side} is not a rollout batch)", type(left), type(right))
    _check_record_batches(left.record_batch, right.record_batch)
    _check_mapping("specs", left.specs, right.specs)
    _check_mapping("batch globals", left.batch_globals, right.batch_globals)


def assert_shards_equal(left: _BatchLike, right: _BatchLike) -> None:
    """Assert that two shards are equal: as batches, and in what makes them shards.

    Compares what :func:`assert_batches_equal` does, then ``partition``,
    ``batch_total_lengths`` and ``plan_fingerprint``, each where both sides have it.

    Parameters
    ----------
    left, right
        Shards (what a split returns), or whole batches.

    Raises
    ------
    AssertionError
        Naming the first difference.
    """
    assert_batches_equal(left, right)
    for name in ("partition", "batch_total_lengths", "plan_fingerprint"):
        left_value = getattr(left, name, _MISSING)
        right_value = getattr(right, name, _MISSING)
        if left_value is _MISSING or right_value is _MISSING:
            continue
        if not values_equal(left_value, right_value):
            _fail(f"`{name}`", left_value, right_value)
