"""One builder call's samples, encoded and checked: kept in memory, journaled, read back.

A :class:`Group` is what :class:`~arrow_split.RolloutBatchBuilder` adds in one step of its own
(its ``_commit``): the per-sample columns as the codecs encoded them, the specs as used, the
per-sample batch-global values and the group's other batch-global values. A journal stores one
``group`` record per accepted call (:func:`group_record`) and recovery rebuilds the same group
(:func:`group_from_record`), so replaying the records rebuilds the builder exactly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split._codecs import codec_for
from arrow_split._convert import check_content
from arrow_split._journal import Record, spec_from_json, spec_to_json
from arrow_split._journal_values import check_v1_value, pack_value, unpack_value, unpickle_v1
from arrow_split.errors import ArrowSplitError, JournalError
from arrow_split.schema import KNOWN_COLUMNS, TOTAL_LENGTHS, ColumnSpec, role_column

__all__ = ["Group", "group_from_record", "group_record", "shifted"]

_SAMPLE_AT = re.compile(r"\bsample (\d+)\b")


class Group:
    """One append or extend, encoded and checked, not yet added to the builder."""

    __slots__ = ("columns", "count", "globals", "sample_globals", "sample_keys", "used")

    def __init__(
        self,
        columns: dict[str, pa.Array],
        used: dict[str, ColumnSpec],
        batch_globals: dict[str, object],
        sample_keys: tuple[str, ...],
    ) -> None:
        self.columns = columns
        self.used = used
        self.sample_keys = sample_keys
        self.sample_globals = {
            k: np.asarray(v, dtype=np.float64) for k, v in batch_globals.items() if k in sample_keys
        }
        self.globals = {k: v for k, v in batch_globals.items() if k not in sample_keys}
        self.count = len(next(iter(columns.values())))  # the length source is always there

    def take(self, rows: Sequence[int]) -> Group:
        """The group of the samples at ``rows`` only (a replay's samples dropped)."""
        picked = np.asarray(rows, dtype=np.int64)
        columns = {
            name: codec_for(self.used[name]).take(array, picked)
            for name, array in self.columns.items()
        }
        values: dict[str, object] = {k: v[picked] for k, v in self.sample_globals.items()}
        return Group(columns, self.used, {**self.globals, **values}, self.sample_keys)


def group_record(group: Group) -> tuple[dict[str, object], list[pa.Array]]:
    """The JSON and the columns of the journal record of ``group``."""
    names = list(group.columns)
    sample_globals = list(group.sample_globals)
    meta: dict[str, object] = {
        "names": names,
        "sample_globals": sample_globals,
        "sample_keys": list(group.sample_keys),
        "specs": [spec_to_json(spec) for spec in group.used.values()],
        "globals": {
            key: pack_value(group.used[key], value) for key, value in group.globals.items()
        },
    }
    arrays = [group.columns[name] for name in names]
    arrays += [pa.array(group.sample_globals[key]) for key in sample_globals]
    return meta, arrays


def _names(meta: dict[str, Any], field: str) -> list[str]:
    """A record's list of distinct key names (a :class:`JournalError` if it is not one)."""
    value = meta.get(field)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        msg = f"its `{field}` must be a list of str, got {value!r:.60}"
        raise JournalError(msg)
    if len(set(value)) != len(value):
        msg = f"its `{field}` names a key twice: {value!r:.60}"
        raise JournalError(msg)
    return list(value)


def _record_specs(meta: dict[str, Any], source: str) -> dict[str, ColumnSpec]:
    items = meta.get("specs")
    if not isinstance(items, list):
        msg = f"its `specs` must be a list, got {items!r:.60}"
        raise JournalError(msg)
    used = {}
    for item in items:
        spec = spec_from_json(item, source)
        if spec.name in used:
            msg = f"its `specs` declare `{spec.name}` twice"
            raise JournalError(msg)
        used[spec.name] = spec
    return used


def group_from_record(record: Record, source: str, allow_nonfinite: bool) -> Group:
    """The group a ``group`` record holds, every field checked with the library's rules.

    Raises
    ------
    JournalError
        A field is missing or of the wrong kind, a column does not fit its spec, or the
        content breaks a rule of :meth:`~arrow_split.RolloutBatch.from_train_data`.
    """
    meta: dict[str, Any] = record.meta
    names, sample_globals = _names(meta, "names"), _names(meta, "sample_globals")
    sample_keys = _names(meta, "sample_keys")
    used = _record_specs(meta, source)
    if len(record.arrays) != len(names) + len(sample_globals):
        msg = f"it has {len(record.arrays)} columns for {len(names) + len(sample_globals)} keys"
        raise JournalError(msg)
    columns = _columns(used, names, record.arrays[: len(names)])
    count = len(next(iter(columns.values())))
    values = _sample_globals(used, sample_globals, record.arrays[len(names) :], count)
    missing = sorted(set(sample_keys) - set(columns) - set(values) - {TOTAL_LENGTHS})
    if missing:
        msg = f"its `sample_keys` name {missing} but it holds no such column"
        raise JournalError(msg)
    group_globals = _group_globals(meta, used, record.sequence < 0, allow_nonfinite)
    _check_content(columns, used)
    return Group(columns, used, {**group_globals, **values}, tuple(sample_keys))


def _columns(
    used: dict[str, ColumnSpec], names: list[str], arrays: Sequence[pa.Array]
) -> dict[str, pa.Array]:
    columns = {}
    for name, array in zip(names, arrays, strict=True):
        spec = used.get(name)
        if spec is None or not spec.is_per_sample:
            msg = f"its column `{name}` has no per-sample spec in the record"
            raise JournalError(msg)
        array = codec_for(spec).stored(spec, array)  # a format-1 column in this version's form
        if not codec_for(spec).holds(spec, array.type):
            msg = f"its column `{name}` is {array.type}, which its spec {spec} never makes"
            raise JournalError(msg)
        columns[name] = array
    source = role_column(used, "length_source")
    if source is None or source not in columns:
        msg = f"it has no length-source column (`{role_column(KNOWN_COLUMNS, 'length_source')}`)"
        raise JournalError(msg)
    lengths = {name: len(array) for name, array in columns.items()}
    if len(set(lengths.values())) != 1 or lengths[source] == 0:
        msg = f"its columns have different or no rows: {lengths}"
        raise JournalError(msg)
    return columns


def _sample_globals(
    used: dict[str, ColumnSpec], keys: list[str], arrays: Sequence[pa.Array], count: int
) -> dict[str, object]:
    values: dict[str, object] = {}
    for key, array in zip(keys, arrays, strict=True):
        spec = used.get(key)
        if spec is None or spec.global_shape != "float_per_sample":
            msg = f"its per-sample batch-global `{key}` has no such spec in the record"
            raise JournalError(msg)
        if array.type != pa.float64() or array.null_count or len(array) != count:
            msg = f"its `{key}` must be {count} float64 values, not nulls, got {array.type}"
            raise JournalError(msg)
        values[key] = array.to_numpy(zero_copy_only=False)
    return values


def _group_globals(
    meta: dict[str, Any], used: dict[str, ColumnSpec], version_1: bool, allow_nonfinite: bool
) -> dict[str, object]:
    stored = unpickle_v1(meta.get("globals")) if version_1 else meta.get("globals")
    if not isinstance(stored, dict):
        msg = f"its `globals` must be an object, got {stored!r:.60}"
        raise JournalError(msg)
    values = {}
    for key, value in stored.items():
        spec = used.get(key) if isinstance(key, str) else None
        if spec is None or spec.is_per_sample or spec.global_shape == "float_per_sample":
            msg = f"its batch-global value `{key!r:.40}` has no batch-global spec in the record"
            raise JournalError(msg)
        if version_1:
            values[key] = check_v1_value(spec, value, allow_nonfinite)
        else:
            values[key] = unpack_value(spec, value, allow_nonfinite)
    return values


def _check_content(columns: dict[str, pa.Array], used: dict[str, ColumnSpec]) -> None:
    record_batch = pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))
    try:
        check_content(record_batch, {name: used[name] for name in columns}, {})
    except ArrowSplitError as exc:
        msg = f"its content breaks a rule of the library: {exc}"
        raise JournalError(msg) from None


def shifted(error: ArrowSplitError, base: int) -> ArrowSplitError:
    """The same error, its sample positions moved from the group's to the batch's."""
    if base == 0:
        return error
    text = _SAMPLE_AT.sub(lambda match: f"sample {int(match.group(1)) + base}", str(error))
    return type(error)(text)
