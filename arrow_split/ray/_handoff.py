"""Ray leaf: put a rollout batch into the object store; each data-parallel rank takes its own rows.

Two hand-offs, named by ``delay`` in :func:`split_train_data_by_dp`:

eager (``delay=False``)
    The driver puts one object per node; the list it returns has a reference per rank, shared
    by the ranks of a node. On one node (no ``rank_nodes``) the object is the batch with its
    plan, put as it is: a rank fetches ``refs[dp_rank]``, checks the plan's key in O(1) and
    takes its own rows into fresh buffers. With ``rank_nodes`` each node's object holds that
    node's rows, gathered once in plan order into fresh compact buffers (never a slice view of
    the batch, which would ship the whole parent buffer): a rank checks in O(1) that it holds
    its rows of the plan it asked for (the object carries the plan's key and each rank's row
    range) and slices them without a copy. See :mod:`arrow_split.ray._eager`.
delayed (``delay=True``)
    The driver puts the whole batch once. Each rank maps it read-only from its node's shared
    memory (no copy, no deserialization of the columns' values), computes the plan from the
    ``tokens`` offsets and gathers its own rows into fresh buffers. No rank gathers, converts or
    copies another rank's rows. The batch carries the driver's :class:`~arrow_split.Plan`: a rank
    at the driver's ``dp_size`` takes its rows from it without planning, a rank that asks for
    another method gets a :class:`~arrow_split.PlanMismatchError`, and a rank that asks for
    another ``dp_size`` must say so with ``resplit=True`` (a rank died, data parallelism
    shrank): the same reference is then split again for the new size without a new put.

Checking the plan across ranks. Every shard exposes ``shard.plan_fingerprint``; a trainer with
``torch.distributed`` initialised can compare it across its data-parallel group::

    seen = [None] * dp_size
    torch.distributed.all_gather_object(seen, shard.plan_fingerprint, group=dp_group)
    assert len(set(seen)) == 1, f"ranks hold parts of different plans: {seen}"

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
- the shard it returns in eager mode is a slice of its node's object: its buffers are read-only
  views of the store and keep that object (its node's ranks' rows, not the whole batch unless
  all ranks share one object) alive until the shard is dropped. Copy before writing (converting
  to tensors does); take its rows before passing it on (a slice pickles its parent's buffers).

Cluster scale. Ray moves an object between nodes whole: a delayed rank whose node does not hold
the batch would pull all of it. By default (``locality="auto"``) such a rank has its rows taken on
a node that holds the batch and fetches only its shard, so about as many bytes cross nodes as in
eager mode; ``locality="local"`` is the plain delayed split. See :mod:`arrow_split.ray._locality`
for the design and its failure handling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

try:
    import ray
except ImportError:
    msg = "arrow_split.ray needs Ray; install it with `pip install arrow-split[ray]`"
    raise ImportError(msg) from None

import numpy as np

from arrow_split import (
    PlanError,
    RolloutBatch,
    Shard,
    shard_for_rank,
)
from arrow_split import pad_to_dp as pad_batch
from arrow_split._args import as_flag, as_int, check_dp_rank, check_dp_size, method_of
from arrow_split.ray._eager import NodeRows, check_rank_nodes, put_by_node, rank_slice
from arrow_split.ray._fetched import detached, fetch, whole_batch
from arrow_split.ray._locality import Locality, OnFetch, check_locality, pick_holder, take_on_holder
from arrow_split.ray._witness import with_witness_ids

if TYPE_CHECKING:
    from ray import ObjectRef

__all__ = ["process_rollout_data", "split_train_data_by_dp"]


@overload
def split_train_data_by_dp(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_size: int,
    *,
    balance_data: bool,
    delay: Literal[False] = False,
    rank_nodes: Sequence[str] | None = None,
    pad_to_dp: bool = False,
) -> list[ObjectRef[NodeRows]]: ...


@overload
def split_train_data_by_dp(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_size: int,
    *,
    balance_data: bool,
    delay: Literal[True],
    rank_nodes: Sequence[str] | None = None,
    pad_to_dp: bool = False,
) -> ObjectRef[RolloutBatch]: ...


@overload
def split_train_data_by_dp(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_size: int,
    *,
    balance_data: bool,
    delay: bool,
    rank_nodes: Sequence[str] | None = None,
    pad_to_dp: bool = False,
) -> list[ObjectRef[NodeRows]] | ObjectRef[RolloutBatch]: ...


def split_train_data_by_dp(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_size: int,
    *,
    balance_data: bool,
    delay: bool = False,
    rank_nodes: Sequence[str] | None = None,
    pad_to_dp: bool = False,
) -> list[ObjectRef[NodeRows]] | ObjectRef[RolloutBatch]:
    """Put a rollout batch into Ray's object store for ``dp_size`` data-parallel ranks.

    Call it on the driver: the caller owns the objects (see the module docstring). Everything is
    validated, the plan included, before anything is put.

    Parameters
    ----------
    data_or_batch
        A train-data dict (converted with :meth:`RolloutBatch.from_train_data`) or a whole
        RolloutBatch.
    dp_size
        The number of data-parallel ranks.
    balance_data
        The plan: ``False`` strided, ``True`` balanced (see :func:`arrow_split.plan_partitions`).
    delay
        ``False``: plan now and put one object per node (see :mod:`arrow_split.ray._eager`):
        on one node (or without ``rank_nodes``) the batch with its plan, each rank taking its
        own rows; on several, each node's rows gathered in plan order, each rank slicing its
        range. ``True``: put the whole batch once, with its plan, and let each rank take its
        own rows (or split it again for another ``dp_size``).
    rank_nodes
        Eager only, optional: the node id of each rank (``dp_size`` strings, in rank order; a
        train actor's is ``ray.get_runtime_context().get_node_id()``). Ranks with the same id
        share one object. ``None``: one object for all ranks (the best choice on one node). A
        wrong id still gives every rank its own rows; only more bytes cross nodes.
    pad_to_dp
        Pad the batch first with the fewest rows that make it a multiple of ``dp_size``
        (:func:`arrow_split.pad_to_dp`; padding rows have ``is_padding`` true, a zero loss mask
        and ``sample_indices`` -1), once, before planning: a balanced split of any batch size.

    Returns
    -------
    list of ObjectRef or ObjectRef
        Eager: one reference per rank, ``refs[r]`` holding rank ``r``'s node's object, from
        which :func:`process_rollout_data` takes ``split_train_data_by_dp_raw(...)[r]``'s rows.
        Delayed: one reference to the whole batch. Drop them (``del refs``) once every rank has
        processed the step to free the store.

    Raises
    ------
    SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError
        ``data_or_batch`` is not a valid batch.
    PlanError
        A bad ``dp_size``, or a balanced plan the batch's sample count cannot meet.
    OptionError, OptionTypeError
        ``rank_nodes`` is not one node id (str) per rank.
    TransportError
        Eager: a put failed part-way; the objects already put were freed (all or nothing).
    """
    size = check_dp_size(dp_size)
    method_of(balance_data)
    delay = as_flag("delay", delay)
    nodes = check_rank_nodes(rank_nodes, size)
    pad = as_flag("pad_to_dp", pad_to_dp)
    if isinstance(data_or_batch, RolloutBatch):
        batch = data_or_batch
    else:  # a dict, or the typed error of anything else (a Shard's rows are `shard.rows`)
        batch = RolloutBatch.from_train_data(data_or_batch)
    if pad:
        batch = pad_batch(batch, size)
    plan = batch.make_plan(size, balance_data=balance_data)
    if delay:
        return ray.put(batch.with_plan(plan))
    # One node's rows alive at a time: the driver's peak is the batch plus one node's rows.
    return put_by_node(batch, plan, nodes)


def process_rollout_data(
    refs_or_ref: ObjectRef[Any] | Sequence[ObjectRef[Any]] | RolloutBatch,
    dp_rank: int,
    dp_size: int,
    *,
    balance_data: bool | None = None,
    resplit: bool = False,
    witness_ids: Sequence[int] | np.ndarray | None = None,
    locality: Locality = "auto",
    step: int | None = None,
    on_fetch: OnFetch | None = None,
    pad_to_dp: bool = False,
) -> Shard:
    """Return this rank's shard from what :func:`split_train_data_by_dp` put.

    Call it in the train actor of rank ``dp_rank``. Only this rank's rows are fetched (eager) or
    gathered (delayed); ``shard.to_train_data(layout="actor")`` gives the classic actor dict:
    this rank's per-sample keys, ``total_lengths`` of its rows, ``global_total_lengths`` of the
    whole batch and the batch-global keys whole.

    Parameters
    ----------
    refs_or_ref
        The eager list of references (one per rank; only ``refs[dp_rank]`` is fetched), the
        delayed reference, or what one of them holds (what Ray hands an actor method when a
        reference is passed as a top-level argument).
    dp_rank, dp_size
        This rank and the number of ranks.
    balance_data
        The plan's method, checked against the one the data was put with
        (:class:`PlanMismatchError` if it differs); ``None`` follows the driver's.
    resplit
        Delayed only: allow a ``dp_size`` other than the driver's; the same batch is split again
        for the new size. Without it, another ``dp_size`` is a :class:`PlanMismatchError`.
    witness_ids
        Optional: one int per sample of the WHOLE batch, attached to this rank's rows as the
        column with the ``witness`` role (``seq_witness_ids``).
    locality
        Where a delayed reference's rows are taken (see :mod:`arrow_split.ray._locality`):
        ``"auto"`` here if this node holds the batch, else on a node that does (only the shard
        crosses nodes); ``"local"`` always here; ``"holder"`` always on a node that holds it.
        Ignored for an eager list and a resolved batch, which are already here.
    step
        Optional: the training step, named in error messages only.
    on_fetch
        Optional, for measuring: called with each reference this call fetched to this process.
    pad_to_dp
        Delayed only, when the batch is split again (``resplit`` to another ``dp_size``, or a
        batch put without a plan): pad it to a multiple of this ``dp_size`` first, as the
        driver's ``pad_to_dp`` does. A shard's padding rows have ``is_padding`` true.

    Returns
    -------
    Shard
        This rank's shard. Delayed, and eager with one object for every rank: fresh buffers,
        writable by this rank, no view of the store (built once, from the fetched object).
        Eager with several node groups (``rank_nodes``): a zero-copy slice (read-only) of its
        node's object.

    Raises
    ------
    PlanError, OptionError
        A bad ``dp_rank``, ``dp_size`` or ``locality`` (raised before any fetch); an eager list
        whose length is not ``dp_size``; a shard where the delayed mode expects the whole batch.
    PlanMismatchError
        What was put is another plan's data: another method, another ``dp_size`` (eager, or
        delayed without ``resplit``), or other ranks' rows.
    NotARolloutBatchError
        The reference holds something other than a rollout batch.
    TransportError
        The object was lost from the store (its owner died, or it was freed).
    RaggedLengthError, ColumnTypeError, ValueRangeError, SchemaError
        ``witness_ids`` is not one int per sample of the whole batch, or the key already exists.
    """
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    if balance_data is not None:
        method_of(balance_data)
    resplit = as_flag("resplit", resplit)
    if step is not None:
        step = as_int("step", step, minimum=0)
    where = check_locality(locality)
    pad = as_flag("pad_to_dp", pad_to_dp)
    who = f"dp_rank {rank}" if step is None else f"step {step}, dp_rank {rank}"
    if isinstance(refs_or_ref, (list, tuple)):
        shard = _eager_shard(refs_or_ref, rank, size, balance_data, who, on_fetch)
    elif isinstance(refs_or_ref, NodeRows):  # Ray resolved an eager reference given top-level
        method = None if balance_data is None else method_of(balance_data)
        shard = rank_slice(refs_or_ref, rank, size, method, who, "the object given")
    else:
        request = {
            "dp_rank": rank,
            "dp_size": size,
            "balance_data": balance_data,
            "resplit": resplit,
            "pad_to_dp": pad,
        }
        return _delayed_shard(refs_or_ref, request, where, who, on_fetch, witness_ids)
    if witness_ids is not None:
        whole = len(shard.batch_total_lengths)
        rows = with_witness_ids(shard.rows, witness_ids, shard.partition, who, whole)
        shard = shard.with_rows(rows)
    return shard


def _eager_shard(
    refs: Sequence[Any],
    dp_rank: int,
    dp_size: int,
    balance_data: bool | None,
    who: str,
    on_fetch: OnFetch | None,
) -> Shard:
    """Fetch ``refs[dp_rank]`` alone (its node's object); take or slice this rank's rows."""
    if len(refs) != dp_size:
        msg = (
            f"got {len(refs)} references but `dp_size` is {dp_size}; pass the whole list that "
            "`split_train_data_by_dp(..., delay=False)` returned for this `dp_size`, or the "
            "delayed reference to split a batch for another `dp_size`"
        )
        raise PlanError(msg)
    what = f"`refs[{dp_rank}]`"
    value = fetch(refs[dp_rank], who, what, on_fetch)
    if isinstance(value, RolloutBatch):  # one group: the rank takes its rows into its own shard
        value = detached(value)
    method = None if balance_data is None else method_of(balance_data)
    return rank_slice(value, dp_rank, dp_size, method, who, what)


def _delayed_shard(
    ref_or_batch: object,
    request: dict[str, Any],
    locality: Locality,
    who: str,
    on_fetch: OnFetch | None,
    witness_ids: Sequence[int] | np.ndarray | None,
) -> Shard:
    """Take this rank's rows of the whole batch, here or on a node that holds it.

    Here, the fetched batch gets its own copy of numpy batch-global values and the witness
    column first, so that the take builds the rank's one Shard.
    """
    if isinstance(ref_or_batch, ray.ObjectRef):
        node_id = pick_holder(ref_or_batch, request["dp_rank"], locality)
        if node_id is not None:
            shard = take_on_holder(ref_or_batch, node_id, request, on_fetch)
            if shard is not None:
                rows = detached(shard.rows)
                if witness_ids is not None:
                    whole = len(shard.batch_total_lengths)
                    rows = with_witness_ids(rows, witness_ids, shard.partition, who, whole)
                return shard if rows is shard.rows else shard.with_rows(rows)
    value = fetch(ref_or_batch, who, "the delayed reference", on_fetch)
    batch = detached(whole_batch(value, who))
    del value  # the shard owns fresh buffers; the fetched batch must not outlive this call
    if witness_ids is not None:
        batch = with_witness_ids(batch, witness_ids, None, who)
    return shard_for_rank(batch, **request)
