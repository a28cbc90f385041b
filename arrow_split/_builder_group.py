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
from typing import Any, cast

import numpy as np
import pyarrow as pa

from arrow_split._codecs import codec_for
from arrow_split._journal import (
    Record,
    pack_value,
    spec_from_json,
    spec_to_json,
    unpack_value,
)
from arrow_split.errors import ArrowSplitError
from arrow_split.schema import ColumnSpec

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
        "globals": pack_value(group.globals),
    }
    arrays = [group.columns[name] for name in names]
    arrays += [pa.array(group.sample_globals[key]) for key in sample_globals]
    return meta, arrays


def group_from_record(record: Record, source: str) -> Group:
    """The group a ``group`` record holds."""
    meta: dict[str, Any] = record.meta
    names, sample_globals = list(meta["names"]), list(meta["sample_globals"])
    specs = [spec_from_json(item, source) for item in meta["specs"]]
    used = {spec.name: spec for spec in specs}
    columns = {  # a journal of an older version: its columns in this version's form
        name: codec_for(used[name]).stored(used[name], array) if name in used else array
        for name, array in zip(names, record.arrays[: len(names)], strict=True)
    }
    values: dict[str, object] = {
        key: array.to_numpy(zero_copy_only=False)
        for key, array in zip(sample_globals, record.arrays[len(names) :], strict=True)
    }
    group_globals = cast(dict[str, object], unpack_value(meta["globals"]))
    return Group(
        columns,
        used,
        {**group_globals, **values},
        tuple(meta["sample_keys"]),
    )


def shifted(error: ArrowSplitError, base: int) -> ArrowSplitError:
    """The same error, its sample positions moved from the group's to the batch's."""
    if base == 0:
        return error
    text = _SAMPLE_AT.sub(lambda match: f"sample {int(match.group(1)) + base}", str(error))
    return type(error)(text)
