"""The concatenation of batches of one schema: ``RolloutBatch.concat``'s parts.

The rows of every batch, in order, each column's narrow-stored ids widened to one type; the
batch-global values kept once (equal in every batch), a ``float_per_sample`` one (``raw_reward``)
concatenated where each batch holds one value per row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split._args import describe
from arrow_split._codecs import codec_for
from arrow_split._codecs.batch_global import global_to_python, owned_globals
from arrow_split.batch._columns import values_equal
from arrow_split.batch._frame import Frame, RolloutBatch
from arrow_split.errors import SchemaError, mistake
from arrow_split.schema import ColumnSpec

__all__ = ["as_list", "concat_batches"]


def as_list(batches: object) -> list[Any]:
    """``batches`` as a non-empty list (a single batch or a str is a typo for a list)."""
    if isinstance(batches, str | bytes | Frame) or not isinstance(batches, Iterable):
        fix = "pass a list, e.g. `[batch]`" if isinstance(batches, Frame) else None
        got = type(batches).__name__
        msg = f"`batches` must be a list of RolloutBatch, got {got}"
        raise mistake("data_type", msg, key="batches", got=got, fix=fix)
    listed = list(batches)
    if not listed:
        msg = "`batches` is empty: concatenate at least one batch"
        raise SchemaError(msg, key="batches", got="[]")
    return listed


def concat_batches(
    batches: Sequence[RolloutBatch],
) -> tuple[pa.RecordBatch, Mapping[str, ColumnSpec], Mapping[str, object], bool]:
    """The parts of one batch holding the rows of ``batches`` in order (same specs, schema).

    With the globals as a batch keeps them, and whether the batch trusts its objects.
    """
    first = batches[0]
    for position, batch in enumerate(batches[1:], start=1):
        _check_specs(first.specs, batch.specs, position)
    pieces = [batch for batch in batches if batch.num_samples] or [first]  # rows to join
    columns = []
    for name in first.record_batch.schema.names:
        arrays = [batch.record_batch.column(name) for batch in pieces]
        if len({array.type for array in arrays}) > 1:  # ids stored in other widths or shapes
            arrays = _widened(arrays, first.specs[name])
        columns.append(pa.concat_arrays(arrays))
    record_batch = pa.RecordBatch.from_arrays(columns, names=first.record_batch.schema.names)
    trust = all(batch.trust_objects for batch in batches)
    return record_batch, first.specs, owned_globals(_concat_globals(batches)), trust


def _check_specs(
    first: Mapping[str, ColumnSpec], other: Mapping[str, ColumnSpec], position: int
) -> None:
    """Raise :class:`SchemaError` unless batch ``position`` has the keys and specs of batch 0."""
    if set(other) != set(first):
        missing, extra = sorted(set(first) - set(other)), sorted(set(other) - set(first))
        parts = [f"lacks {', '.join(missing)}"] * bool(missing)
        parts += [f"has {', '.join(extra)} too"] * bool(extra)
        msg = f"batch {position} has other keys than batch 0: it {' and '.join(parts)}"
        raise SchemaError(msg, key=f"batches[{position}]", fix=_SAME_SCHEMA)
    for key, spec in first.items():
        if other[key] != spec:
            fields = [field.name for field in dataclasses.fields(spec)]
            changed = [name for name in fields if getattr(other[key], name) != getattr(spec, name)]
            got, expected = (_spec_text(held, changed) for held in (other[key], spec))
            msg = (
                f"key `{key}` is stored otherwise in batch {position} ({got}) than in batch 0 "
                f"({expected})"
            )
            raise SchemaError(msg, key=key, expected=expected, got=got, fix=_SAME_SCHEMA)


_SAME_SCHEMA = "concatenate batches of the same schema (the same keys, each stored alike)"


def _spec_text(spec: ColumnSpec, names: list[str]) -> str:
    """``spec``'s fields ``names`` as ``codec='pickle', value_type=int32``."""
    texts = []
    for name in names:
        value = getattr(spec, name)
        texts.append(f"{name}={value}" if isinstance(value, pa.DataType) else f"{name}={value!r}")
    return ", ".join(texts)


def _widened(arrays: list[pa.Array], spec: ColumnSpec) -> list[pa.Array]:
    """Narrow-stored columns cast to the narrowest type that holds them all (same shape)."""
    codec = codec_for(spec)
    fields = [codec.type_fields(array.type) for array in arrays]
    known = [found for found in fields if found is not None]
    shapes = sorted({str(found.trailing) for found in known})
    if len(known) < len(fields) or len(shapes) > 1:
        msg = (
            f"column `{spec.name}` has other shapes in the batches ({', '.join(shapes)}); "
            "concatenate batches whose values have the same shape (the same layers and top_k)"
        )
        raise SchemaError(msg, key=spec.name, got=", ".join(shapes))
    stored = [found.storage or spec.value_type for found in known]
    widest = np.result_type(*(pa.array([], type=kind).to_numpy().dtype for kind in stored))
    wide = dataclasses.replace(known[0], storage=pa.from_numpy_dtype(widest))
    return [array.cast(codec.arrow_type(spec, wide)) for array in arrays]


def _concat_globals(batches: Sequence[RolloutBatch]) -> dict[str, object]:
    """Equal globals kept once; one number per sample (``raw_reward``) concatenated."""
    merged: dict[str, object] = {}
    for key, spec in batches[0].specs.items():
        if spec.is_per_sample:
            continue
        positions = list(range(len(batches)))
        if spec.global_shape == "float_per_sample":  # a batch without rows holds none of its
            positions = [i for i in positions if batches[i].num_samples] or positions[:1]
        values = [batches[i].batch_globals[key] for i in positions]
        plain = [global_to_python({key: value})[key] for value in values]
        if spec.global_shape == "float_per_sample" and _per_row(key, batches, positions, plain):
            merged[key] = np.concatenate([np.asarray(value, np.float64) for value in plain])
        elif all(values_equal(value, plain[0]) for value in plain):
            merged[key] = values[0]  # the batch's own form (an array stays an array)
        else:
            msg = (
                f"batch-global key `{key}` differs between the batches; a concatenated batch "
                "holds one value per batch-global key (make them equal first)"
            )
            raise SchemaError(msg, key=key)
    return merged


def _per_row(
    key: str, batches: Sequence[RolloutBatch], positions: list[int], plain: list[object]
) -> bool:
    """Whether each batch at ``positions`` holds one value of ``key`` per row (to concatenate).

    ``False`` where none does: slices, each holding its batch's whole value (kept once if
    equal). Raises :class:`SchemaError` for a mix: the batch made would not hold one per row.
    """
    per_row = {
        position: isinstance(value, list) and len(value) == batches[position].num_samples
        for position, value in zip(positions, plain, strict=True)
    }
    if all(per_row.values()) or not any(per_row.values()):
        return all(per_row.values())
    rows = next(position for position, flag in per_row.items() if flag)
    whole = next(position for position, flag in per_row.items() if not flag)
    held = describe(plain[positions.index(whole)])
    msg = (
        f"batch-global key `{key}` holds one value per row in batch {rows}, but batch {whole} "
        f"holds {held} for its {batches[whole].num_samples} rows (a slice keeps its batch's "
        "whole value)"
    )
    raise SchemaError(msg, key=key, fix="concatenate whole batches, or slices of one batch")
