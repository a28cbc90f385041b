"""miles' keys on arrow_split columns: the sampling masks' two keys, and keys nobody declared.

miles #2595 sends a sampling mask as two per-sample keys (flat ids, per-token offsets): they
travel as one ``rollout_sampling_masks`` column and come back as miles' two keys. A key neither
known nor declared gets a spec inferred from its values and one
:class:`~arrow_split.UnknownKeyWarning` per key and process.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split import (
    KNOWN_COLUMNS,
    ArrowSplitError,
    ColumnSpec,
    RaggedLengthError,
    RolloutBatch,
    SchemaError,
    TokenLists,
    UnknownKeyWarning,
)
from arrow_split.schema import TOTAL_LENGTHS, role_column

__all__ = ["from_miles_keys", "infer_unknown_specs", "miles_key_note", "to_miles_keys"]

_IDS = "rollout_sampling_mask_ids"
_OFFSETS = "rollout_sampling_mask_offsets"
_COLUMN = str(role_column(KNOWN_COLUMNS, "sampling_mask"))


def from_miles_keys(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` (unchanged) with miles' two sampling-mask keys as one column, in the ids' place."""
    present = [key for key in (_IDS, _OFFSETS) if key in data]
    if not present:
        return data
    if len(present) == 1:
        missing = _OFFSETS if present[0] == _IDS else _IDS
        msg = (
            f"`{present[0]}` is given without `{missing}`; miles' sampling masks need both "
            "(flat ids and per-token offsets per sample), or neither"
        )
        raise SchemaError(msg, key=missing)
    if _COLUMN in data:
        msg = f"give the sampling masks once: `{_COLUMN}`, or miles' `{_IDS}` and `{_OFFSETS}`"
        raise SchemaError(msg)
    ids, offsets = data[_IDS], data[_OFFSETS]
    for key, value in ((_IDS, ids), (_OFFSETS, offsets)):
        if not isinstance(value, (list, tuple)):
            msg = f"`{key}` must be a list with one list per sample, got {type(value).__name__}"
            raise SchemaError(msg, key=key)
    if len(ids) != len(offsets):
        msg = (
            f"`{_IDS}` has {len(ids)} samples but `{_OFFSETS}` has {len(offsets)}; both have one "
            "list per sample"
        )
        raise RaggedLengthError(msg, key=_IDS)
    masks = [TokenLists(i, o) for i, o in zip(ids, offsets, strict=True)]
    converted: dict[str, Any] = {}
    for key, value in data.items():
        if key == _IDS:
            converted[_COLUMN] = masks
        elif key != _OFFSETS:
            converted[key] = value
    return converted


def miles_key_note(error: ArrowSplitError) -> ArrowSplitError:
    """``error`` saying which of miles' keys ``rollout_sampling_masks`` came from."""
    if error.key != _COLUMN:
        return error
    note = f"`{_COLUMN}` holds miles' `{_IDS}` and `{_OFFSETS}`"
    return error.replaced(fix=f"{error.fix} ({note})" if error.fix else note)


def to_miles_keys(shard: RolloutBatch, train_data: dict[str, Any]) -> dict[str, Any]:
    """``train_data`` with ``rollout_sampling_masks`` given back as miles' two keys, in place."""
    if _COLUMN not in train_data:
        return train_data
    (column,) = [c for c in shard.numeric_columns() if c.spec.name == _COLUMN]
    values = column.values
    sample_offsets = np.asarray(column.offsets, dtype=np.int64)
    token_offsets = np.asarray(column.token_offsets, dtype=np.int64)
    ids: list[list[int]] = []
    offsets: list[list[int]] = []
    for begin, end in itertools.pairwise(sample_offsets.tolist()):
        start = int(token_offsets[begin])
        ids.append(values[start : int(token_offsets[end])].tolist())
        offsets.append((token_offsets[begin : end + 1] - start).tolist())
    converted: dict[str, Any] = {}
    for key, value in train_data.items():
        if key == _COLUMN:
            converted[_IDS], converted[_OFFSETS] = ids, offsets
        else:
            converted[key] = value
    train_data.clear()
    train_data.update(converted)
    return train_data


_WARNED: set[str] = set()
_TYPE_NAMES = {"bool": "bool_", "int64": "int64", "float": "float32", "double": "float64"}


def infer_unknown_specs(
    data: Mapping[str, Any], specs: Iterable[ColumnSpec], *, strict_keys: bool
) -> list[ColumnSpec]:
    """``specs`` plus an inferred spec for each key of ``data`` neither known nor declared.

    With ``strict_keys`` nothing is inferred (the core then refuses the unknown key).
    """
    declared = list(specs)
    if strict_keys:
        return declared
    names = {spec.name for spec in declared if isinstance(spec, ColumnSpec)}
    names |= {*KNOWN_COLUMNS, TOTAL_LENGTHS}
    unknown = [key for key in data if isinstance(key, str) and key not in names]
    if not unknown:
        return declared
    num_samples = _num_samples(data)
    inferred = []
    for key in unknown:
        found = _infer(key, data[key], num_samples)
        if found is None:
            continue  # the core names the key and how to declare it
        spec, line = found
        _warn_once(key, spec, line)
        inferred.append(spec)
    return [*declared, *inferred]


def _num_samples(data: Mapping[str, Any]) -> int | None:
    source = role_column(KNOWN_COLUMNS, "length_source")
    values = data.get(source) if source is not None else None
    try:
        return len(values)  # type: ignore[arg-type]
    except TypeError:
        return None


def _infer(key: str, value: object, num_samples: int | None) -> tuple[ColumnSpec, str] | None:
    items = _per_sample_items(value, num_samples)
    if items is None:
        return _infer_global(key, value)
    if items and all(_is_number(item) for item in items):
        value_type = _scalar_type(items)
        line = f'ColumnSpec("{key}", "per_sample_scalar", pa.{_TYPE_NAMES[str(value_type)]}())'
        flag = value_type == pa.bool_()
        return ColumnSpec(key, "per_sample_scalar", value_type, flag=flag), line
    numbers = [_numbers(item) for item in items]
    if items and all(found is not None for found in numbers):
        floats = "float" in numbers or all(found == "empty" for found in numbers)
        value_type = pa.float32() if floats else pa.int64()
        type_name = _TYPE_NAMES[str(value_type)]
        line = f'ColumnSpec("{key}", "per_token", pa.{type_name}(), length="response")'
        return ColumnSpec(key, "per_token", value_type), line
    line = f'ColumnSpec("{key}", "per_sample_object")'
    return ColumnSpec(key, "per_sample_object"), line


def _per_sample_items(value: object, num_samples: int | None) -> list[Any] | None:
    if (isinstance(value, np.ndarray) and value.ndim >= 1) or isinstance(value, (list, tuple)):
        return list(value) if len(value) == num_samples else None
    return None


def _is_number(item: object) -> bool:
    return isinstance(item, (Real, np.number, np.bool_)) and not isinstance(item, np.ndarray)


def _scalar_type(items: Sequence[object]) -> pa.DataType:
    if all(isinstance(item, (bool, np.bool_)) for item in items):
        return pa.bool_()
    if all(isinstance(item, Integral) and not isinstance(item, bool) for item in items):
        return pa.int64()
    return pa.float64()


def _numbers(item: object) -> str | None:
    """``"int"``, ``"float"`` or ``"empty"`` for a flat list of numbers, else ``None``."""
    if isinstance(item, np.ndarray):
        if item.ndim != 1 or item.dtype.kind not in "iuf":
            return None
        return "float" if item.dtype.kind == "f" else "int"
    if not isinstance(item, (list, tuple)):
        return None
    if not item:
        return "empty"
    if not all(_is_number(value) and not isinstance(value, (bool, np.bool_)) for value in item):
        return None
    return "int" if all(isinstance(value, Integral) for value in item) else "float"


def _infer_global(key: str, value: object) -> tuple[ColumnSpec, str] | None:
    if isinstance(value, Integral) and not isinstance(value, bool):
        shape = "int"
    elif isinstance(value, (list, tuple)) and all(
        isinstance(item, Integral) and not isinstance(item, bool) for item in value
    ):
        shape = "int_list"
    elif isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        shape = "str_list"
    else:
        return None
    line = f'ColumnSpec("{key}", "batch_global", global_shape="{shape}")'
    return ColumnSpec(key, "batch_global", global_shape=shape), line  # type: ignore[arg-type]


def _warn_once(key: str, spec: ColumnSpec, line: str) -> None:
    if key in _WARNED:
        return
    _WARNED.add(key)
    msg = (
        f"unknown key `{key}`: carried to the ranks as a {spec.kind} column inferred from its "
        f"values; declare it to fix its type and silence this warning: "
        f"`install(specs=[{line}])` (or `specs=[...]`), with the length rule it follows "
        "(`strict_keys=True` refuses unknown keys instead)"
    )
    warnings.warn(msg, UnknownKeyWarning, stacklevel=4)
