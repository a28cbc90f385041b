"""Ray leaf: put a rollout batch into the object store; each data-parallel rank takes its own rows.

Two hand-offs, named by ``delay`` in :func:`split_train_data_by_dp`:

eager (``delay=False``)
    The driver splits the batch with the core (one ``take`` per rank) and puts one object per
    rank. Each object holds only its rank's rows, in fresh compact buffers (never a slice view of
    the batch, which would ship the whole parent buffer). A rank fetches ``refs[dp_rank]`` alone.
delayed (``delay=True``)
    The driver puts the whole batch once. Each rank maps it read-only from its node's shared
    memory (no copy, no deserialization of the columns' values), computes the plan from the
    ``tokens`` offsets and gathers its own rows into fresh buffers. No rank gathers, converts or
    copies another rank's rows. The same reference can be split again for another ``dp_size``
    (a rank died, data parallelism shrank) without a new put.

Serialization. Ray 2.60 registers its own reducers for ``pyarrow.Table`` and ``pyarrow.Schema``
only (``ray._private.arrow_serialization``); a ``RecordBatch`` goes through pyarrow's pickling,
whose buffers Ray's pickle protocol 5 writes out of band into the object. :func:`ray.get` then
wraps them as read-only Arrow buffers that point into the store's shared memory: nothing is
copied or allocated by pyarrow on a get. A batch whose record batch is a slice of a larger one
ships its parent's buffers (ARROW-10739): put what :meth:`RolloutBatch.from_train_data` or a
split returns.

Lifetimes and ownership. The process that puts owns the objects: call
:func:`split_train_data_by_dp` on the driver, not in an actor that may die, so that losing a
train actor never loses a step's data. An object lives while any reference to it lives, on the
driver or passed to an actor; to free a step, drop the references (``del refs``) once every rank
has called :func:`process_rollout_data`: Ray frees the objects shortly after (Ray 2.60 has no
public call that frees an object still referenced, so this module offers none). On the actor:

- the shard :func:`process_rollout_data` returns in delayed mode owns fresh buffers and keeps no
  view of the fetched batch, so it never pins the batch in the store; the rank may write to its
  buffers (nobody else sees them);
- the shard it returns in eager mode *is* the rank's object: its buffers are read-only views of
  the store and keep that one object (a shard, not the batch) alive until the shard is dropped.
  Copy before writing (converting to tensors does).

Cluster scale. Ray moves an object between nodes whole: a delayed rank whose node does not hold
the batch would pull all of it. By default (``locality="auto"``) such a rank has its rows taken on
a node that holds the batch and fetches only its shard, so about as many bytes cross nodes as in
eager mode; ``locality="local"`` is the plain delayed split. See :mod:`arrow_split.ray_locality`
for the design, its failure handling and :func:`~arrow_split.ray_locality.cross_node_bytes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

try:
    import ray
    from ray import exceptions as ray_exceptions
except ImportError:
    msg = "arrow_split.ray needs Ray; install it with `pip install arrow-split[ray]`"
    raise ImportError(msg) from None

import numpy as np

from arrow_split.batch import RolloutBatch
from arrow_split.encode import EncodeOptions, encode_scalar
from arrow_split.errors import NotARolloutBatchError, PlanError, RaggedLengthError, TransportError
from arrow_split.partition import (
    check_dp_rank,
    check_dp_size,
    partition_for_rank,
    plan_fingerprint,
    plan_partitions,
)
from arrow_split.ray_locality import (
    Locality,
    check_locality,
    note_fetch,
    pick_holder,
    take_on_holder,
)
from arrow_split.schema import KNOWN_COLUMNS
from arrow_split.split import as_rollout_batch, shard_for_rank, take_rows
from arrow_split.train_data import per_sample_values

if TYPE_CHECKING:
    from ray import ObjectRef

__all__ = ["process_rollout_data", "split_train_data_by_dp"]

_WITNESS_KEY = "seq_witness_ids"

# Every way Ray 2.60 reports that an object is gone (OwnerDiedError, ObjectFetchTimedOutError,
# ReferenceCountingAssertionError, ObjectFreedError, ObjectReconstructionFailedError...) derives
# from ObjectLostError.
_ObjectLostError = ray_exceptions.ObjectLostError


@overload
def split_train_data_by_dp(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_size: int,
    *,
    balance_data: bool,
    delay: Literal[False] = False,
) -> list[ObjectRef[RolloutBatch]]: ...


@overload
def split_train_data_by_dp(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_size: int,
    *,
    balance_data: bool,
    delay: Literal[True],
) -> ObjectRef[RolloutBatch]: ...


@overload
def split_train_data_by_dp(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_size: int,
    *,
    balance_data: bool,
    delay: bool,
) -> list[ObjectRef[RolloutBatch]] | ObjectRef[RolloutBatch]: ...


def split_train_data_by_dp(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_size: int,
    *,
    balance_data: bool,
    delay: bool = False,
) -> list[ObjectRef[RolloutBatch]] | ObjectRef[RolloutBatch]:
    """Put a rollout batch into Ray's object store for ``dp_size`` data-parallel ranks.

    Call it on the driver: the caller owns the objects (see the module docstring). Everything is
    validated, the plan included, before anything is put.

    Parameters
    ----------
    data_or_batch
        A train-data dict (converted with :meth:`RolloutBatch.from_train_data`) or a RolloutBatch.
    dp_size
        The number of data-parallel ranks.
    balance_data
        The plan: ``False`` strided, ``True`` balanced (see :func:`arrow_split.plan_partitions`).
        Pass the same value to :func:`process_rollout_data`.
    delay
        ``False``: split now and put one shard per rank. ``True``: put the whole batch once and
        let each rank take its own rows.

    Returns
    -------
    list of ObjectRef or ObjectRef
        Eager: one reference per rank, ``refs[r]`` holding
        ``split_train_data_by_dp_raw(...)[r]``. Delayed: one reference to the whole batch. Drop
        them (``del refs``) once every rank has processed the step to free the store.

    Raises
    ------
    SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError
        ``data_or_batch`` is not a valid batch.
    PlanError
        A bad ``dp_size``, or a balanced plan the batch's sample count cannot meet.
    """
    size = check_dp_size(dp_size)
    batch = as_rollout_batch(data_or_batch)
    if delay:
        plan_fingerprint(batch.total_lengths, size, balance_data=balance_data)
        return ray.put(batch)
    plan = plan_partitions(batch.total_lengths, size, balance_data=balance_data)
    # One shard alive at a time: the driver's peak is the batch plus one rank's rows.
    return [ray.put(take_rows(batch, indices)) for indices in plan]


def process_rollout_data(
    refs_or_ref: ObjectRef[Any] | Sequence[ObjectRef[Any]] | RolloutBatch,
    dp_rank: int,
    dp_size: int,
    *,
    balance_data: bool,
    witness_ids: Sequence[int] | np.ndarray | None = None,
    locality: Locality = "auto",
    step: int | None = None,
) -> RolloutBatch:
    """Return this rank's shard, in the actor layout, from what :func:`split_train_data_by_dp` put.

    Call it in the train actor of rank ``dp_rank``. Only this rank's rows are fetched (eager) or
    gathered (delayed); ``shard.to_train_data()`` gives the classic actor dict: this rank's
    per-sample keys, ``total_lengths`` of its rows, ``global_total_lengths`` of the whole batch
    and the batch-global keys whole.

    Parameters
    ----------
    refs_or_ref
        The eager list of references (one per rank; only ``refs[dp_rank]`` is fetched), the
        delayed reference, or the batch itself (what Ray hands an actor method when the delayed
        reference is passed as a top-level argument).
    dp_rank, dp_size
        This rank and the number of ranks. In delayed mode ``dp_size`` may differ from the
        driver's: the same batch is split again for the new size.
    balance_data
        The plan, as given to :func:`split_train_data_by_dp`.
    witness_ids
        Optional: one int per sample of the WHOLE batch, attached to this rank's rows as the
        per-sample key ``seq_witness_ids``.
    locality
        Where a delayed reference's rows are taken (see :mod:`arrow_split.ray_locality`):
        ``"auto"`` here if this node holds the batch, else on a node that does (only the shard
        crosses nodes); ``"local"`` always here (the whole batch comes to this node);
        ``"holder"`` always on a node that holds it. Ignored for an eager list and a resolved
        batch, which are already here.
    step
        Optional: the training step, named in error messages only.

    Returns
    -------
    RolloutBatch
        This rank's shard with layout ``"actor"``. Delayed: fresh buffers, writable by this rank,
        no view of the store. Eager: read-only views of this rank's object in the store.

    Raises
    ------
    PlanError
        A bad ``dp_rank``, ``dp_size`` or ``locality`` (raised before any fetch); an eager list
        whose length is not ``dp_size``; an eager shard that is not this rank's part of the plan;
        a shard where the delayed mode expects the whole batch (an eager reference passed as a
        top-level argument, which Ray resolves).
    NotARolloutBatchError
        The reference holds something other than a RolloutBatch.
    TransportError
        The object was lost from the store (its owner died, or it was freed).
    RaggedLengthError, ColumnTypeError, ValueRangeError, SchemaError
        ``witness_ids`` is not one int per sample of the whole batch, or the key already exists.
    """
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    where = check_locality(locality)
    who = f"dp_rank {rank}" if step is None else f"step {step}, dp_rank {rank}"
    if isinstance(refs_or_ref, (list, tuple)):
        shard = _eager_shard(refs_or_ref, rank, size, balance_data=balance_data, who=who)
    else:
        shard = _delayed_shard(refs_or_ref, rank, size, balance_data, where, who)
    if witness_ids is not None:
        shard = _add_witness_ids(shard, witness_ids, who)
    return shard.with_layout("actor")


def _eager_shard(
    refs: Sequence[Any], dp_rank: int, dp_size: int, *, balance_data: bool, who: str
) -> RolloutBatch:
    """Fetch ``refs[dp_rank]`` alone and check that it holds this rank's part of the plan."""
    if len(refs) != dp_size:
        msg = (
            f"got {len(refs)} references but `dp_size` is {dp_size}; pass the whole list that "
            "`split_train_data_by_dp(..., delay=False)` returned for this `dp_size`, or the "
            "delayed reference to split a batch for another `dp_size`"
        )
        raise PlanError(msg)
    shard = _resolve(refs[dp_rank], who, f"`refs[{dp_rank}]`")
    expected = partition_for_rank(
        shard.batch_total_lengths, dp_rank, dp_size, balance_data=balance_data
    )
    if shard.partition is None or not np.array_equal(shard.partition, expected):
        msg = (
            f"{who}: `refs[{dp_rank}]` does not hold rank {dp_rank}'s rows of a "
            f"{dp_size}-rank plan with `balance_data={balance_data}`; pass the list in the order "
            "`split_train_data_by_dp` returned it, with the same `dp_size` and `balance_data`"
        )
        raise PlanError(msg)
    return shard


def _delayed_shard(
    ref_or_batch: object,
    dp_rank: int,
    dp_size: int,
    balance_data: bool,
    locality: Locality,
    who: str,
) -> RolloutBatch:
    """Take this rank's rows of the whole batch, here or on a node that holds it."""
    if isinstance(ref_or_batch, ray.ObjectRef):
        node_id = pick_holder(ref_or_batch, dp_rank, locality)
        if node_id is not None:
            shard = take_on_holder(
                ref_or_batch, node_id, dp_rank, dp_size, balance_data=balance_data
            )
            if shard is not None:
                return _detach_globals(shard)
    batch = _whole_batch(_resolve(ref_or_batch, who, "the delayed reference"), who)
    shard = shard_for_rank(batch, dp_rank, dp_size, balance_data=balance_data)
    del batch  # the shard owns fresh buffers; the fetched batch must not outlive this call
    return _detach_globals(shard)


def _whole_batch(batch: RolloutBatch, who: str) -> RolloutBatch:
    """Refuse a shard where the delayed mode expects the whole batch (a top-level eager ref)."""
    if batch.partition is not None:
        msg = (
            f"{who}: got a shard ({batch.num_samples} of "
            f"{len(batch.batch_total_lengths)} samples) where the whole batch was expected; pass "
            "the eager list of references inside a container (Ray resolves a reference passed "
            "as a top-level argument), or the reference `split_train_data_by_dp(..., "
            "delay=True)` returned"
        )
        raise PlanError(msg)
    return batch


def _resolve(ref_or_batch: object, who: str, what: str) -> RolloutBatch:
    """Return the RolloutBatch a reference holds (read-only views of the store), or raise."""
    if isinstance(ref_or_batch, ray.ObjectRef):
        try:
            value = ray.get(ref_or_batch)
        except _ObjectLostError as exc:
            msg = (
                f"{who}: the object store lost {what} ({type(exc).__name__}); the "
                "driver should own the batch: call `split_train_data_by_dp` on the driver (not "
                "in an actor that may die) and keep its references until every rank has "
                "processed the step"
            )
            raise TransportError(msg) from exc
        note_fetch(ref_or_batch)
    else:
        value = ref_or_batch
    if not isinstance(value, RolloutBatch):
        msg = (
            f"{who}: {what} holds a {type(value).__name__}, not a RolloutBatch; "
            "put batches with `arrow_split.ray.split_train_data_by_dp`"
        )
        raise NotARolloutBatchError(msg)
    return value


def _detach_globals(shard: RolloutBatch) -> RolloutBatch:
    """Copy numpy batch-global values, which Ray hands over as views of the store."""
    if not any(isinstance(value, np.ndarray) for value in shard.batch_globals.values()):
        return shard
    batch_globals = {key: _owned(value) for key, value in shard.batch_globals.items()}
    return shard.replace(batch_globals=batch_globals)


def _owned(value: object) -> object:
    if not isinstance(value, np.ndarray):
        return value
    array = np.array(value, copy=True)
    array.flags.writeable = False
    return array


def _add_witness_ids(
    shard: RolloutBatch, witness_ids: Sequence[int] | np.ndarray, who: str
) -> RolloutBatch:
    """Attach this rank's witness ids, after checking all of them against the whole batch."""
    values = per_sample_values({_WITNESS_KEY: witness_ids}, _WITNESS_KEY, None)
    num_samples = len(shard.batch_total_lengths)
    if len(values) != num_samples:
        msg = (
            f"{who}: `witness_ids` has {len(values)} values but the whole batch has "
            f"{num_samples} samples; pass one witness id per sample of the WHOLE batch, not of "
            "this rank's shard"
        )
        raise RaggedLengthError(msg)
    column = encode_scalar(KNOWN_COLUMNS[_WITNESS_KEY], values, EncodeOptions())
    rows = shard.partition if shard.partition is not None else np.arange(num_samples)
    return shard.add_train_data({_WITNESS_KEY: column.to_numpy()[rows]})
