"""miles' Mooncake store under the drop-in: a whole train-data dict is put once as Arrow buffers.

With ``object_store_backend="mooncake"`` miles' store singleton is a ``MooncakeObjectStore``
(``put(value, value_spec)``, ``get(ref)``, ``remove(ref)``) whose ``_transfer.store`` is its
Mooncake client. :func:`mooncake_methods` gives the methods :mod:`._store` binds on that class:
a whole train-data dict is converted once and put without a plan
(:func:`arrow_split.stores.put_batch`: the trainers' ``dp_size`` is not known at the put), and
the reference is miles' own ``Box`` holding the plain JSON of the
:class:`~arrow_split.stores.StoredBatchRef`. A delayed rank (:func:`take_stored`, from the
drop-in's ``process_rollout_data``) plans for its own size and reads only its rows; a ``get``
by code the drop-in does not patch returns miles' dict of the whole batch; ``remove`` removes
every key the put wrote. Any other value or reference goes to miles' own methods.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from arrow_split import (
    KNOWN_COLUMNS,
    RolloutBatch,
    Shard,
    TransportError,
)
from arrow_split.compat.miles._keys import to_miles_keys
from arrow_split.schema import role_column
from arrow_split.stores import StoredBatchRef, put_batch, remove_batch, take_rank

__all__ = ["MOONCAKE_STORE", "mooncake_methods", "stored_ref", "take_stored"]

MOONCAKE_STORE = "MooncakeObjectStore"
"""miles' Mooncake store class, in :data:`._store.STORE_MODULE`."""

_PREFIX = '{"format":"arrow_split.stored_batch/'
_WITNESS = str(role_column(KNOWN_COLUMNS, "witness"))
_LENGTH_SOURCE = str(role_column(KNOWN_COLUMNS, "length_source"))
_PUTS = itertools.count(1)  # this process's puts of a whole batch, numbered from 1


def stored_ref(ref: object) -> StoredBatchRef | None:
    """The stored-batch reference a ``Box`` of the drop-in's put holds, else ``None``."""
    inner = getattr(ref, "inner", None)
    if isinstance(inner, str) and inner.startswith(_PREFIX):
        return StoredBatchRef.from_json(inner)
    return None


def _client(instance: object, who: str) -> Any:
    """A store instance's own Mooncake client (``instance._transfer.store``), as a ByteStore."""
    from mooncake.store import MooncakeDistributedStore

    from arrow_split.mooncake import MooncakeStore

    client = getattr(getattr(instance, "_transfer", None), "store", None)
    if not isinstance(client, MooncakeDistributedStore):
        msg = (
            f"{who}: miles' store singleton is a {type(instance).__name__} with no Mooncake "
            "client at `_transfer.store`; a batch put in Mooncake is taken through a "
            "`MooncakeObjectStore` (`--object-store-backend mooncake` on every process)"
        )
        raise TransportError(msg)
    return MooncakeStore(client)


def take_stored(
    instance: object,
    ref: StoredBatchRef,
    dp_rank: int,
    dp_size: int,
    *,
    balance_data: bool,
    witness_ids: Any,
    pad_to_dp: bool,
) -> Shard:
    """A rank's rows of a batch the drop-in put in Mooncake, through miles' store ``instance``."""
    who = f"step {ref.step}, dp_rank {dp_rank}" if ref.step is not None else f"dp_rank {dp_rank}"
    shard = take_rank(
        _client(instance, who),
        ref,
        dp_rank,
        dp_size,
        balance_data=balance_data,
        resplit=True,  # miles splits for the train side's own `dp_size`
        pad_to_dp=pad_to_dp,
    )
    if witness_ids is None:
        return shard
    whole = len(shard.batch_total_lengths)
    checked = RolloutBatch.from_train_data({_LENGTH_SOURCE: [[]] * whole, _WITNESS: witness_ids})
    values = checked.record_batch.column(_WITNESS).to_numpy()
    return shard.with_rows(shard.rows.add_train_data({_WITNESS: values[shard.partition]}))


def mooncake_methods(
    module: ModuleType,
    originals: Mapping[str, Callable[..., Any]],
    whole_batch: Callable[[object], RolloutBatch | None],
) -> dict[str, Callable[..., Any]]:
    """The converting ``put``, ``get`` and ``remove`` of miles' Mooncake store class.

    ``whole_batch`` converts a value that is a whole batch's train-data dict (else ``None``).
    """
    box = getattr(module, "StoreObjectRef", None) or module.Box
    result_type = module.ObjectStoreGetResult
    put, get, remove = originals["put"], originals["get"], originals["remove"]

    def arrow_put(self: Any, value: Any, value_spec: Any = None) -> Any:
        batch = whole_batch(value)
        if batch is None:
            return put(self, value, value_spec)
        number = next(_PUTS)
        ref = put_batch(_client(self, f"step {number}"), batch, None, step=number)
        return box(ref.to_json())

    def arrow_get(self: Any, ref: Any) -> Any:
        stored = stored_ref(ref)
        if stored is None:
            return get(self, ref)
        who = "the whole batch" if stored.step is None else f"step {stored.step}"
        rows = take_rank(_client(self, who), stored, 0, 1, balance_data=False).rows  # all, in order
        return result_type(value=to_miles_keys(rows, dict(rows.to_train_data())), release_fn=_noop)

    def arrow_remove(self: Any, ref: Any) -> None:
        stored = stored_ref(ref)
        if stored is None:
            remove(self, ref)
        else:
            remove_batch(_client(self, f"`{stored.prefix}`"), stored)

    return {"put": arrow_put, "get": arrow_get, "remove": arrow_remove}


def _noop(value: object) -> None:
    """A dict read whole holds fresh objects: nothing to release."""
