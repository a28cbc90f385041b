"""Keys miles adds before this library knows them: carried with an inferred spec, not fatal.

miles' own split forgets a key it does not know; the core (:meth:`RolloutBatch.from_train_data`)
refuses it. Neither suits a drop-in: when miles adds a key (``teacher_tokens``,
``advantages``...), the step should go on and the key should reach the rank. So the drop-in
infers a :class:`~arrow_split.ColumnSpec` from the values of a key that is neither known nor
declared, and warns once per key and process (:class:`~arrow_split.UnknownKeyWarning`) with the
``ColumnSpec(...)`` line that declares it:

- one number per sample: ``per_sample_scalar`` (``bool`` if every value is a bool, ``int64`` if
  every one is an int, else ``float64``);
- one list (or 1-D array) of numbers per sample: ``per_token`` with no length rule (the
  sample's own length is kept; ``int64`` for ints, ``float32`` for floats, as log-probs are);
- anything else per sample: a pickled ``per_sample_object``;
- a value that is not one per sample: a batch-global ``int``, ``int_list`` or ``str_list``
  when it has that shape (else the core's error).

``strict_keys=True`` restores the core's error for every unknown key. A declared spec always
wins over the inference; declare the keys you rely on.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split import KNOWN_COLUMNS, ColumnSpec, UnknownKeyWarning
from arrow_split.schema import role_column

__all__ = ["infer_unknown_specs"]

_WARNED: set[str] = set()
_TYPE_NAMES = {"bool": "bool_", "int64": "int64", "float": "float32", "double": "float64"}
_DERIVED = frozenset({"total_lengths"})


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
    unknown = [
        key
        for key in data
        if isinstance(key, str) and key not in KNOWN_COLUMNS and key not in names
    ]
    unknown = [key for key in unknown if key not in _DERIVED]
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
        value_type = _list_type([found for found in numbers if found is not None])
        type_name = _TYPE_NAMES[str(value_type)]
        line = f'ColumnSpec("{key}", "per_token", pa.{type_name}(), length="response")'
        return ColumnSpec(key, "per_token", value_type), line
    line = f'ColumnSpec("{key}", "per_sample_object")'
    return ColumnSpec(key, "per_sample_object"), line


def _per_sample_items(value: object, num_samples: int | None) -> list[Any] | None:
    if num_samples is None:
        return None
    if isinstance(value, np.ndarray) and value.ndim >= 1 and len(value) == num_samples:
        return list(value)
    if isinstance(value, (list, tuple)) and len(value) == num_samples:
        return list(value)
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


def _list_type(kinds: Sequence[str]) -> pa.DataType:
    if "float" in kinds or all(kind == "empty" for kind in kinds):
        return pa.float32()
    return pa.int64()


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
