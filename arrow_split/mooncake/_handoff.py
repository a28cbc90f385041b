"""The hand-off on Mooncake: the driver puts a step's batch once, each rank takes its own rows.

The entry points a store backend calls (miles' object-store singleton among them): a put
returns a :data:`MooncakeBatchRef`, plain JSON across the wire; a take accepts it or its JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mooncake.store import MooncakeDistributedStore

from arrow_split import NotARolloutBatchError, OptionTypeError, RolloutBatch, Shard
from arrow_split._args import as_flag
from arrow_split.errors import mistake
from arrow_split.mooncake._client import MooncakeStore, check_open
from arrow_split.stores import StoredBatchRef
from arrow_split.stores import put_batch as _put
from arrow_split.stores import remove_batch as _remove
from arrow_split.stores import take_rank as _take

__all__ = ["MooncakeBatchRef", "put_batch", "remove", "take_rank"]

MooncakeBatchRef = StoredBatchRef
"""The reference a put returns: keys, schema, plan; ``to_json()`` / ``from_json()``."""


def _store(client: object) -> MooncakeStore:
    """``client`` as a ByteStore; a closed one is refused here, before anything else."""
    if isinstance(client, (MooncakeStore, MooncakeDistributedStore)):
        store = client if isinstance(client, MooncakeStore) else MooncakeStore(client)
        check_open(store.client, "client")
        return store
    msg = (
        f"`client` must be a Mooncake client (`arrow_split.mooncake.connect`), got "
        f"{type(client).__name__}"
    )
    raise OptionTypeError(msg, key="client", got=type(client).__name__)


def _ref(ref: object) -> StoredBatchRef:
    if isinstance(ref, StoredBatchRef):
        return ref
    if isinstance(ref, (str, bytes)):
        return StoredBatchRef.from_json(ref)
    msg = (
        f"`ref` must be what `put_batch` returned or its `to_json()`, got {type(ref).__name__}; "
        "a Ray object reference goes to `arrow_split.ray.process_rollout_data`"
    )
    raise NotARolloutBatchError(msg, key="ref", got=type(ref).__name__)


def put_batch(
    client: object,
    data_or_batch: RolloutBatch | Mapping[str, Any],
    *,
    dp_size: int | None = None,
    balance_data: bool = False,
    step: int | None = None,
) -> StoredBatchRef:
    """Put a batch (or a train-data dict) into Mooncake once, as its Arrow buffers.

    Everything is checked before anything is written; the batch's plan for ``dp_size`` ranks
    travels with it. With ``dp_size=None`` (the ranks' size not known yet) no plan is made
    (``balance_data`` must then be False: each rank passes its own to :func:`take_rank`,
    and plans for its own size there); a batch that carries a plan is put with it.

    Raises
    ------
    OptionError
        ``client`` is closed, or ``balance_data=True`` with ``dp_size=None``.
    SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError
        ``data_or_batch`` is not a valid batch.
    PlanError
        A bad ``dp_size``, or a balanced plan the batch's sample count cannot meet.
    PlanMismatchError
        The batch carries a plan other than the one for ``dp_size`` and ``balance_data``.
    DumpError
        A batch-global value the stored form cannot hold.
    TransportError
        The store is full, a value too large, or the master down: what was written is removed.
    """
    store = _store(client)
    if as_flag("balance_data", balance_data) and dp_size is None:
        fix = "pass `dp_size` to plan at the put, or `balance_data` to each rank's `take_rank`"
        expected = "False with `dp_size=None` (no plan is made)"
        raise mistake("option_value", key="balance_data", expected=expected, got="True", fix=fix)
    if isinstance(data_or_batch, RolloutBatch):
        batch = data_or_batch
    else:
        batch = RolloutBatch.from_train_data(data_or_batch)
    plan = None if dp_size is None else batch.make_plan(dp_size, balance_data=balance_data)
    return _put(store, batch, plan, step=step)


def take_rank(
    client: object,
    ref: StoredBatchRef | str | bytes,
    dp_rank: int,
    dp_size: int,
    *,
    balance_data: bool | None = None,
    resplit: bool = False,
    pad_to_dp: bool = False,
    step: int | None = None,
    trust_objects: bool = False,
) -> Shard:
    """Rank ``dp_rank``'s shard, reading only the byte ranges of its rows from Mooncake.

    ``ref`` is what :func:`put_batch` returned or its JSON; value-equal to
    :func:`arrow_split.shard_for_rank` of the batch put. A batch put without a plan, or with
    ``resplit`` for another ``dp_size``, is planned by the rank from the stored lengths; it
    reads its rows as runs of the stored order (:func:`arrow_split.stores.take_rank`).

    Raises
    ------
    OptionError
        ``client`` is closed.
    PlanError, PlanMismatchError
        A bad ``dp_rank`` or ``dp_size``; another plan than the put's (without ``resplit``).
    NotARolloutBatchError
        ``ref`` is not a stored-batch reference.
    TransportError
        An object missing (removed, or lost with the client that put it) or the master down;
        the key and the step are named.
    """
    return _take(
        _store(client),
        _ref(ref),
        dp_rank,
        dp_size,
        balance_data=balance_data,
        resplit=resplit,
        pad_to_dp=pad_to_dp,
        step=step,
        trust_objects=trust_objects,
    )


def remove(client: object, ref: StoredBatchRef | str | bytes) -> None:
    """Remove a batch from Mooncake once every rank has taken its rows.

    Raises
    ------
    OptionError
        ``client`` is closed.
    TransportError
        The store refused a removal (the master down).
    """
    _remove(_store(client), _ref(ref))
