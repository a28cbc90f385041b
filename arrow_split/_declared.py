"""What a declared :class:`~arrow_split.ColumnSpec` may be, at every door that takes one.

A key the library adds to train data itself is never a column: a user's values under it would
be dropped or overwritten. An override of a known key keeps the known key's role
(docs/columns.md, "Roles"): ``register_column(..., replace=True)`` and a per-batch
``specs=[...]`` alike.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from arrow_split.errors import SchemaError

if TYPE_CHECKING:
    from arrow_split.schema import ColumnSpec

__all__ = ["LIBRARY_KEYS", "declared_spec", "refuse_library_key"]

LIBRARY_KEYS = {  # the first is arrow_split.schema.TOTAL_LENGTHS
    "total_lengths": "each sample's token count, derived from the length source",
    "partition": "the key of a shard's rows' indices in `to_train_data(layout='rollout')`",
    "global_total_lengths": "the key of the batch's `total_lengths` in a shard's "
    "`to_train_data(layout='actor')`",
}
"""The keys the library adds to train data itself, and what each holds."""


def refuse_library_key(name: str) -> None:
    """Raise :class:`SchemaError` if ``name`` is one of :data:`LIBRARY_KEYS`."""
    if name in LIBRARY_KEYS:
        msg = f"`{name}` is {LIBRARY_KEYS[name]}: it cannot be a column"
        raise SchemaError(msg, key=name, fix="give the column another name")


def declared_spec(spec: ColumnSpec, known: ColumnSpec | None) -> ColumnSpec:
    """``spec`` declared over ``known`` (the known spec of its key, if any), with its role.

    Raises :class:`SchemaError` for a key of :data:`LIBRARY_KEYS`, or an override of another
    kind than the known key's role needs (the role would be lost).
    """
    refuse_library_key(spec.name)
    if known is None or known.role is None or spec.role is not None:
        return spec
    try:
        return dataclasses.replace(spec, role=known.role)
    except SchemaError as error:  # the override cannot play the role
        fix = f"an override of `{spec.name}` keeps its role; declare a kind that can play it"
        raise error.replaced(fix=fix) from None
