"""The Ray hand-off: the driver puts a step's batch, each data-parallel rank takes its own rows.

``delay`` picks the hand-off: eager, one object per node group (:mod:`arrow_split.ray._nodes`);
delayed, the whole batch once with its plan. docs/ray.md describes both, lifetimes and ownership.
"""

from __future__ import annotations

import ctypes
import pickle
import platform
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, overload

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import ray

import arrow_split.ray._nodes as _nodes
from arrow_split import (
    KNOWN_COLUMNS,
    ArrowSplitWarning,
    NotARolloutBatchError,
    OptionError,
    OptionTypeError,
    PlanError,
    RaggedLengthError,
    RolloutBatch,
    Shard,
    shard_for_rank,
)
from arrow_split import pad_to_dp as pad_batch
from arrow_split._args import (
    Int64Array,
    as_callback,
    as_choice,
    as_flag,
    as_index_array,
    as_int,
    check_dp_rank,
    check_dp_size,
    method_of,
)
from arrow_split.ray._nodes import Locality, NodeRows, OnFetch
from arrow_split.ray._wire import check_session
from arrow_split.schema import role_column

if TYPE_CHECKING:
    from ray import ObjectRef

__all__ = ["process_rollout_data", "split_train_data_by_dp", "warm_up"]

_WITNESS = str(role_column(KNOWN_COLUMNS, "witness"))
_DELAYED = "the delayed reference"


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

    Call it on the driver (which then owns the objects); everything is checked before any put.

    Parameters
    ----------
    data_or_batch
        A train-data dict (:meth:`RolloutBatch.from_train_data`) or a RolloutBatch.
    dp_size, balance_data
        The number of data-parallel ranks, and the plan (``False`` strided, ``True`` balanced).
    delay
        ``False``: one object per node group; ``True``: the whole batch once, with its plan.
    rank_nodes
        Eager only: each rank's node id in rank order (ranks on one node share an object).
    pad_to_dp
        Pad the batch first to a multiple of ``dp_size`` (:func:`arrow_split.pad_to_dp`).

    Returns
    -------
    list of ObjectRef or ObjectRef
        Eager: one reference per rank; delayed: one to the whole batch. Drop them after the step.

    Raises
    ------
    SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError
        ``data_or_batch`` is not a valid batch.
    PlanError
        A bad ``dp_size``, or a balanced plan the batch's sample count cannot meet.
    OptionError, OptionTypeError
        ``rank_nodes`` is not one node id (str) per rank.
    TransportError
        Eager: a put failed part-way; the objects already put were freed.
    """
    size = check_dp_size(dp_size)
    method_of(balance_data)
    delay = as_flag("delay", delay)
    nodes = _as_rank_nodes(rank_nodes, size)
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
    return _nodes.put_by_node(batch, plan, nodes)  # one node's rows alive at a time


def _as_rank_nodes(rank_nodes: object, dp_size: int) -> list[str] | None:
    if rank_nodes is None:
        return None
    if isinstance(rank_nodes, (str, bytes)) or not isinstance(rank_nodes, Sequence):
        msg = (
            f"`rank_nodes` must be a list of one node id (str) per rank, got "
            f"{type(rank_nodes).__name__}; collect each train actor's "
            "`ray.get_runtime_context().get_node_id()`"
        )
        raise OptionTypeError(msg, key="rank_nodes")
    if len(rank_nodes) != dp_size:
        msg = (
            f"`rank_nodes` has {len(rank_nodes)} node ids but `dp_size` is {dp_size}; give the "
            "node id of every rank, in rank order"
        )
        raise OptionError(msg, key="rank_nodes", expected=str(dp_size), got=str(len(rank_nodes)))
    for rank, node in enumerate(rank_nodes):
        if not isinstance(node, str):
            msg = (
                f"`rank_nodes[{rank}]` must be a node id (str), got {type(node).__name__} "
                f"{node!r:.40}"
            )
            raise OptionTypeError(msg, key=f"rank_nodes[{rank}]")
    return list(rank_nodes)


def process_rollout_data(
    refs_or_ref: ObjectRef[Any] | Sequence[ObjectRef[Any]] | RolloutBatch,
    dp_rank: int,
    dp_size: int,
    *,
    balance_data: bool | None = None,
    resplit: bool = False,
    witness_ids: npt.ArrayLike | None = None,
    locality: Locality = "auto",
    step: int | None = None,
    on_fetch: OnFetch | None = None,
    pad_to_dp: bool = False,
) -> Shard:
    """Return this rank's shard (its rows only) from what :func:`split_train_data_by_dp` put.

    Parameters
    ----------
    refs_or_ref
        The eager list of references, the delayed reference, or what one of them holds.
    dp_rank, dp_size
        This rank and the number of ranks.
    balance_data
        The plan's method, checked against the put's; ``None`` follows the driver's.
    resplit
        Allow another ``dp_size`` than the put's: a delayed batch is planned again (an eager
        list, split on the driver, is unchanged by it: one of another size is a PlanError).
    pad_to_dp
        Pad the batch first (:func:`arrow_split.pad_to_dp`) where this rank plans it: a delayed
        batch put for another ``dp_size`` (``resplit``) or one without a plan; a batch put for
        this ``dp_size`` is taken as planned. Refused with an eager list (pad on the driver).
    witness_ids
        Optional: one int per sample of the WHOLE batch as put (a list, range, numpy or torch
        array), added as ``seq_witness_ids``: the driver's padding rows count (10 samples put
        padded for 4 ranks take 12 ids); rows this rank pads copy the last sample's id.
    locality
        Delayed only, where the rows are taken (:data:`Locality`).
    step, on_fetch
        Optional: the step named in errors; a callback given each reference fetched here.

    Returns
    -------
    Shard
        Fresh buffers, but a read-only zero-copy slice of its node's object with ``rank_nodes``.

    Raises
    ------
    PlanError, OptionError, OptionTypeError
        Bad ``dp_rank``, ``dp_size``, ``locality``, ``on_fetch``, ``witness_ids`` (not 1-D ints)
        or list length; ``pad_to_dp`` with an eager list; a shard where a batch is due.
    PlanMismatchError
        What was put is another plan's data (method, ``dp_size`` or ranks).
    NotARolloutBatchError
        The reference holds something other than a rollout batch.
    TransportError
        The object was lost from the store (its owner died, or it was freed), or the reference
        cannot be read here (Ray not initialized, no owner in this session); a pending object
        (its task still runs) is waited for.
    RaggedLengthError, SchemaError
        ``witness_ids`` is not one id per sample of the whole batch, or the key exists.
    """
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    method = None if balance_data is None else method_of(balance_data)
    resplit = as_flag("resplit", resplit)
    step = None if step is None else as_int("step", step, minimum=0)
    where = cast(Locality, as_choice("locality", locality, Locality))
    pad = as_flag("pad_to_dp", pad_to_dp)
    as_callback("on_fetch", on_fetch)
    witness = None if witness_ids is None else as_index_array("witness_ids", witness_ids)
    who = f"dp_rank {rank}" if step is None else f"step {step}, dp_rank {rank}"
    if pad and isinstance(refs_or_ref, (list, tuple, NodeRows)):  # split on the driver
        msg = (
            "`pad_to_dp=True` needs a batch this rank plans, but an eager list was split on the "
            "driver; pad there (`split_train_data_by_dp(..., pad_to_dp=True)`)"
        )
        raise OptionError(msg, key="pad_to_dp", got="True")
    if isinstance(refs_or_ref, (list, tuple)):
        if len(refs_or_ref) != size:
            msg = (
                f"got {len(refs_or_ref)} references but `dp_size` is {size}; pass the whole "
                "list that `split_train_data_by_dp(..., delay=False)` returned for this "
                "`dp_size`, or the delayed reference to split a batch for another `dp_size`"
            )
            raise PlanError(msg, key="refs", expected=str(size), got=str(len(refs_or_ref)))
        what = f"`refs[{rank}]`"
        value = _nodes.fetch(refs_or_ref[rank], who, what, on_fetch)
        if isinstance(value, RolloutBatch):  # one group: the rank takes its rows
            value = _detached(value)
        shard = _nodes.rank_slice(value, rank, size, method, who, what)
    elif isinstance(refs_or_ref, NodeRows):  # Ray resolved an eager reference given top-level
        shard = _nodes.rank_slice(refs_or_ref, rank, size, method, who, "the object given")
    else:
        request = dict(
            dp_rank=rank, dp_size=size, balance_data=balance_data, resplit=resplit, pad_to_dp=pad
        )
        return _delayed_shard(refs_or_ref, request, where, who, on_fetch, witness)
    return _with_witness(shard, witness, who)


def _delayed_shard(
    ref_or_batch: object,
    request: dict[str, Any],
    locality: Locality,
    who: str,
    on_fetch: OnFetch | None,
    witness_ids: Int64Array | None,
) -> Shard:
    """The rank's rows of the whole batch, taken on a node that holds it or here."""
    if isinstance(ref_or_batch, ray.ObjectRef):
        check_session(ref_or_batch, who, _DELAYED)  # before any Ray call (none starts Ray)
        node_id = _nodes.pick_holder(ref_or_batch, request["dp_rank"], locality)
        if node_id is not None:
            shard = _nodes.take_on_holder(ref_or_batch, node_id, request, on_fetch)
            if shard is not None:
                rows = _detached(shard.rows)
                shard = shard if rows is shard.rows else shard.with_rows(rows)
                return _with_witness(shard, witness_ids, who)
    value = _nodes.fetch(ref_or_batch, who, _DELAYED, on_fetch)
    if isinstance(value, NodeRows):
        msg = (
            f"{who}: got {len(value.partition)} rows of {len(value.batch_total_lengths)} samples "
            "put for ranks where the whole batch was expected; pass the whole eager list (not "
            "one of its references), or the reference `split_train_data_by_dp(..., delay=True)` "
            "returned"
        )
        raise PlanError(msg, key="ref")
    if not isinstance(value, RolloutBatch):
        msg = (
            f"{who}: the delayed reference holds a {type(value).__name__}, not a RolloutBatch; "
            "put batches with `arrow_split.ray.split_train_data_by_dp`"
        )
        raise NotARolloutBatchError(msg, key="ref", got=type(value).__name__)
    batch = _detached(value)
    del value  # the shard owns fresh buffers; the fetched batch must not outlive this call
    return shard_for_rank(_with_witness(batch, witness_ids, who), **request)


def _detached(batch: RolloutBatch) -> RolloutBatch:
    """Copy numpy batch-global values, which Ray hands over as read-only views of the store."""
    arrays = {
        key: np.array(value, copy=True)
        for key, value in batch.batch_globals.items()
        if isinstance(value, np.ndarray)
    }
    if not arrays:
        return batch
    for array in arrays.values():
        array.flags.writeable = False
    parts = (batch.record_batch, batch.specs, {**batch.batch_globals, **arrays})
    return RolloutBatch(*parts, plan=batch.plan, trust_objects=batch.trust_objects)


_Witnessed = TypeVar("_Witnessed", RolloutBatch, Shard)


def _with_witness(value: _Witnessed, witness_ids: Int64Array | None, who: str) -> _Witnessed:
    """The whole batch, or a shard's rows at their partition, with its witness ids (if any)."""
    if witness_ids is None:
        return value
    whole = len(value.batch_total_lengths)
    if len(witness_ids) != whole:
        got = f"{len(witness_ids)} values"
        msg = (
            f"{who}: `witness_ids` has {got} but the whole batch has {whole} samples; "
            "pass one witness id per sample of the WHOLE batch as put (the driver's padding "
            "rows included), not of this rank's shard"
        )
        raise RaggedLengthError(msg, key="witness_ids", expected=str(whole), got=got)
    if isinstance(value, RolloutBatch):
        return value.add_train_data({_WITNESS: witness_ids})
    return value.add_train_data({_WITNESS: witness_ids[value.partition]})


_MAX_RESERVE_BYTES = 2**30  # glibc's trim threshold, twice the reserve, is a C int
_BLOCK_BYTES = 8 * 2**20
_MMAP_THRESHOLD = 32 * 2**20  # glibc's largest on 64-bit: blocks above it are always mapped
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_reserved = 0
_warm = False


def reserve_heap(nbytes: int) -> bool:
    """Keep ``nbytes`` of touched, free heap for this process and Arrow (glibc); ``False`` if not.

    Sets glibc's thresholds, makes the system allocator Arrow's pool, then touches and frees
    ``nbytes`` (docs/ray.md, "The first step").
    """
    global _reserved  # one heap per process
    if nbytes <= _reserved:
        return True
    if platform.libc_ver()[0] != "glibc":
        msg = (
            f"warm_up(reserve_bytes={nbytes}) reserved nothing: this process's C library is "
            f"{platform.libc_ver()[0] or 'not glibc'}, whose allocator has no thresholds to set; "
            "pass reserve_bytes=0 there"
        )
        warnings.warn(msg, ArrowSplitWarning, stacklevel=3)
        return False
    mallopt = ctypes.CDLL(None).mallopt  # int mallopt(int, int): ctypes' default types
    trim = min(2 * nbytes, 2**31 - 1)
    if not (mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, trim)):
        return False  # pragma: no cover - glibc accepts both values
    pa.set_memory_pool(pa.system_memory_pool())
    blocks = [np.ones(_BLOCK_BYTES, dtype=np.uint8) for _ in range(-(-nbytes // _BLOCK_BYTES))]
    del blocks
    _reserved = nbytes
    return True


def _through_pickle(value: object) -> object:
    """``value`` as a rank gets it: pickled with out-of-band buffers, read back read-only."""
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return pickle.loads(payload, buffers=[memoryview(bytes(b.raw())) for b in buffers])


def warm_up(*, reserve_bytes: int = 0) -> None:
    """Do a rank's first-time work now (imports, kernels, caches), once per process.

    Call it in each train actor's ``__init__``: it runs an eager and a delayed rank's work on two
    samples in memory (nothing put); a later call only grows the reserve.

    Parameters
    ----------
    reserve_bytes : int, default 0
        Heap to fault in now and keep for the first steps (glibc; 0 to 2**30), about twice a
        rank step's private memory (docs/ray.md says why).

    Raises
    ------
    OptionTypeError, OptionError
        ``reserve_bytes`` is not an int, or out of range.

    Warns
    -----
    ArrowSplitWarning
        With ``reserve_bytes > 0`` where the C library is not glibc: nothing is reserved.

    Examples
    --------
    >>> from arrow_split.ray import warm_up
    >>> warm_up()
    >>> warm_up()  # the second call does nothing
    """
    global _warm  # once per process
    fix = "about twice a rank's step memory, or 0 for none"
    reserve = as_int("reserve_bytes", reserve_bytes, minimum=0, maximum=_MAX_RESERVE_BYTES, fix=fix)
    if reserve:
        reserve_heap(reserve)
    if ray.is_initialized():
        _nodes.live_nodes()
    if _warm:
        return
    tokens, response, mask = (
        str(role_column(KNOWN_COLUMNS, role))
        for role in ("length_source", "response_length", "loss_mask")
    )
    batch = RolloutBatch.from_train_data(
        {tokens: [[1, 2, 3], [4, 5]], response: [2, 1], mask: [[1, 0], [1]]}
    )
    plan = batch.make_plan(2, balance_data=True)
    rows = _through_pickle(_nodes.node_rows(batch, plan, [0, 1]))
    whole = cast(RolloutBatch, _through_pickle(batch.with_plan(plan)))
    for shard in (
        _nodes.rank_slice(rows, 0, 2, None, "warm_up", "its object"),
        _nodes.rank_slice(rows, 1, 2, None, "warm_up", "its object"),
        shard_for_rank(whole, 1, 2, balance_data=True),
    ):
        shard.numeric_columns()
        shard.to_train_data(layout="actor")
    _warm = True
