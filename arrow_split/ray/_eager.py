"""Eager hand-off: one object per node; a rank takes or slices its own rows out of its node's.

Which ranks share an object. ``rank_nodes`` (an argument of
:func:`arrow_split.ray.split_train_data_by_dp`) gives each rank's node: ranks with the same label
share one object. A framework gets a rank's node id in its train actor with
``ray.get_runtime_context().get_node_id()`` (collected once, when it creates its actors). Without
``rank_nodes``, or when every rank gives the same label, there is one object for all ranks: on one
node that is the cheapest hand-off (one put). On several nodes without ``rank_nodes`` each node
that hosts a rank pulls the whole batch; with it, each node pulls its own ranks' rows only (the
bytes of one object per rank, as a put per rank moves, in one object per node).

What the object holds.

- **One group** (every rank): the batch itself, with its plan (:meth:`RolloutBatch.with_plan`),
  put as it is: the driver gathers nothing, and the put is one copy of the batch into the store,
  as a delayed put. A rank checks the plan's key against its request in O(1) and takes its own
  rows (:func:`arrow_split.take`): fresh, private buffers of its bytes only (the one copy the
  torch leaf would otherwise make of a read-only store view), so its shard pins nothing.
- **Several groups**: a :class:`NodeRows`, the group's rows gathered once in plan order (one
  take per group, of its ranks' rows concatenated), so each rank's rows are one contiguous row
  range; the object carries the plan's key and each of its ranks' range. A rank checks them in
  O(1) and slices its range: a zero-copy Arrow slice of the object's buffers in the store, no
  allocation for the values.

A wrong ``rank_nodes`` never gives a wrong shard: a rank reads whichever object its reference
names, wherever it lives, and the object carries that rank's rows. A rank on another node than
its label says pulls its group's whole object to its node: more bytes cross nodes, nothing else.

Object count and cost. One put per group, whatever ``dp_size``: the step boundary costs one put
(one group) or one take of the batch plus one put per node, instead of a take and a put per rank.
Each object carries the specs, the batch-global values and the whole batch's total lengths once
(what every rank's actor-layout dict needs) and each column's buffers out of band.

All or nothing. If a put fails part-way (a full object store, a value that cannot be pickled),
the references already made are dropped before the error leaves, which frees their objects, and
the failure is a :class:`~arrow_split.TransportError` naming the group and its ranks.

Lifetimes. A sliced rank's shard (several groups) is a view of its group's object: it pins that
object (every rank of its node's rows) in the store until the shard is dropped, and its buffers
are read-only. A slice pickles with its parent's whole buffers: a rank that passes its shard on
(``ray.put``, an actor call) ships its whole node's object; take its rows first
(``take_rows(shard, range)``). A taken rank's shard (one group) owns its buffers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import pyarrow as pa
import ray  # the package's first import (`_handoff`) fails fast without Ray

from arrow_split import (
    NotARolloutBatchError,
    OptionError,
    OptionTypeError,
    Plan,
    PlanError,
    PlanKey,
    PlanMismatchError,
    RolloutBatch,
    Shard,
    TransportError,
    take,
    take_rows,
)
from arrow_split.schema import ColumnSpec

if TYPE_CHECKING:
    from ray import ObjectRef

__all__ = ["NodeRows", "check_rank_nodes", "put_by_node", "rank_slice"]


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class NodeRows:
    """What an eager split puts once per node: its ranks' rows, each rank's one row range.

    ``record_batch`` holds the rows of ``bounds``' ranks, rank after rank, in plan order, in
    fresh compact buffers; ``partition`` maps each to its row of the whole batch;
    ``bounds[rank]`` is the rank's ``(start, stop)`` in ``record_batch``.
    """

    record_batch: pa.RecordBatch
    specs: Mapping[str, ColumnSpec]
    batch_globals: Mapping[str, object]
    partition: np.ndarray
    batch_total_lengths: np.ndarray
    plan_key: PlanKey
    bounds: Mapping[int, tuple[int, int]]
    trust_objects: bool = True

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            NodeRows,
            (
                self.record_batch,
                dict(self.specs),
                dict(self.batch_globals),
                self.partition,
                self.batch_total_lengths,
                self.plan_key,
                dict(self.bounds),
                self.trust_objects,
            ),
        )


def check_rank_nodes(rank_nodes: object, dp_size: int) -> list[str] | None:
    """``rank_nodes`` as a list of ``dp_size`` labels, or ``None``; raise before any put."""
    if rank_nodes is None:
        return None
    if isinstance(rank_nodes, (str, bytes)) or not isinstance(rank_nodes, Sequence):
        msg = (
            f"`rank_nodes` must be a list of one node id (str) per rank, got "
            f"{type(rank_nodes).__name__}; collect each train actor's "
            "`ray.get_runtime_context().get_node_id()`"
        )
        raise OptionTypeError(msg)
    if len(rank_nodes) != dp_size:
        msg = (
            f"`rank_nodes` has {len(rank_nodes)} node ids but `dp_size` is {dp_size}; give the "
            "node id of every rank, in rank order"
        )
        raise OptionError(msg)
    for rank, node in enumerate(rank_nodes):
        if not isinstance(node, str):
            msg = (
                f"`rank_nodes[{rank}]` must be a node id (str), got {type(node).__name__} "
                f"{node!r:.40}"
            )
            raise OptionTypeError(msg)
    return list(rank_nodes)


def _groups(rank_nodes: list[str] | None, dp_size: int) -> list[list[int]]:
    """The ranks of each node, in order of each node's first rank; one group if unknown."""
    if rank_nodes is None:
        return [list(range(dp_size))]
    groups: dict[str, list[int]] = {}
    for rank, node in enumerate(rank_nodes):
        groups.setdefault(node, []).append(rank)
    return list(groups.values())


def _node_rows(batch: RolloutBatch, plan: Plan, ranks: list[int]) -> NodeRows:
    """One take of the group's rows, rank after rank, and each rank's row range."""
    rows = [plan.partitions[rank] for rank in ranks]
    sizes = np.array([0, *(len(part) for part in rows)], dtype=np.int64).cumsum()
    taken = take_rows(batch, np.concatenate(rows) if rows else np.zeros(0, np.int64))
    bounds = {rank: (int(sizes[i]), int(sizes[i + 1])) for i, rank in enumerate(ranks)}
    return NodeRows(
        taken.record_batch,
        batch.specs,
        batch.batch_globals,
        taken.partition,
        taken.batch_total_lengths,
        plan.key,
        bounds,
        batch.trust_objects,
    )


def put_by_node(
    batch: RolloutBatch, plan: Plan, rank_nodes: list[str] | None
) -> list[ObjectRef[Any]]:
    """Put one object per node group; return one reference per rank (shared by its group's).

    One group: the batch with its plan, as it is. Several: a :class:`NodeRows` per group.

    All or nothing: when a put fails, the objects already put are freed and a TransportError
    names the group that failed.
    """
    groups = _groups(rank_nodes, plan.dp_size)
    refs: list[ObjectRef[Any]] = []
    try:
        if len(groups) == 1:  # every rank: the batch as it is, no gather
            refs.append(ray.put(batch.with_plan(plan)))
        else:  # `extend` keeps every reference made before a failing put (one by one)
            refs.extend(ray.put(_node_rows(batch, plan, ranks)) for ranks in groups)
    except Exception as exc:
        done = len(refs)
        refs.clear()  # the only references: dropping them frees the objects already put
        ranks = groups[done]
        node = "" if rank_nodes is None else f" (node {rank_nodes[ranks[0]]})"
        reason = next(iter(str(exc).splitlines()), "")  # Ray's messages go on for lines
        msg = (
            f"the put of group {done + 1} of {len(groups)}{node}, {_ranks_text(ranks)}, "
            f"failed ({type(exc).__name__}: {reason}); the {done} objects already put were freed "
            "and nothing of this step is in the store: make room (or lower the step's size) "
            "and split again"
        )
        raise TransportError(msg) from exc
    except BaseException:
        refs.clear()
        raise
    by_rank: list[Any] = [None] * plan.dp_size
    for ranks, ref in zip(groups, refs, strict=True):
        for rank in ranks:
            by_rank[rank] = ref
    return by_rank


def _ranks_text(ranks: Sequence[int]) -> str:
    """``rank 3``, ``ranks 0, 4`` or ``ranks 0, 1, ... (64 ranks)``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(str(rank) for rank in ranks[:8])
    return "ranks " + shown + (f", ... ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def rank_slice(
    value: object, dp_rank: int, dp_size: int, method: str | None, who: str, what: str
) -> Shard:
    """Rank ``dp_rank``'s rows of a fetched eager object: taken (one group) or sliced.

    Raises
    ------
    NotARolloutBatchError
        ``value`` is not what an eager split puts.
    PlanMismatchError
        It holds other ranks' rows, or rows of another plan.
    """
    if isinstance(value, RolloutBatch) and value.plan is not None:
        plan = value.plan
        if plan.dp_size != dp_size or (method is not None and plan.method != method):
            _mismatch(
                f"a whole batch put for a {plan.dp_size}-rank ",
                plan.key,
                dp_rank,
                dp_size,
                method,
                who,
                what,
            )
        return take(value, plan, dp_rank)
    if isinstance(value, RolloutBatch):
        msg = (
            f"{who}: {what} holds a RolloutBatch without a plan (put with `ray.put`, not by "
            "`split_train_data_by_dp`); put batches with `arrow_split.ray.split_train_data_by_dp`, "
            "which puts the batch with its plan"
        )
        raise PlanError(msg)
    if not isinstance(value, NodeRows):
        msg = (
            f"{who}: {what} holds a {type(value).__name__}, not a RolloutBatch's rows; "
            "put batches with `arrow_split.ray.split_train_data_by_dp`"
        )
        raise NotARolloutBatchError(msg)
    key = value.plan_key
    bounds = value.bounds.get(dp_rank)
    if bounds is None or key.dp_size != dp_size or (method is not None and key.method != method):
        got = f"the rows of {_ranks_text(sorted(value.bounds))} of a {key.dp_size}-rank "
        _mismatch(got, key, dp_rank, dp_size, method, who, what)
    start, stop = bounds
    rows = RolloutBatch(
        value.record_batch.slice(start, stop - start),
        value.specs,
        value.batch_globals,
        trust_objects=value.trust_objects,
    )
    return Shard(
        rows,
        partition=value.partition[start:stop],
        batch_total_lengths=value.batch_total_lengths,
        plan_key=key,
        dp_rank=dp_rank,
    )


def _mismatch(
    got: str, key: PlanKey, dp_rank: int, dp_size: int, method: str | None, who: str, what: str
) -> NoReturn:
    asked = "" if method is None else f" {method}"
    msg = (
        f"{who}: {what} holds {got}{key.method} plan, not rank {dp_rank}'s rows of a "
        f"{dp_size}-rank{asked} plan; pass the list in the order `split_train_data_by_dp` "
        "returned it, with the same `dp_size` and `balance_data`"
    )
    raise PlanMismatchError(msg)
