"""Where a step's rows live on a cluster: eager objects per node group, delayed takes on a holder.

docs/ray.md, "Eager" and "At cluster scale", describes both.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import ray
from ray import exceptions as ray_exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from arrow_split import (
    ArrowSplitError,
    NotARolloutBatchError,
    Plan,
    PlanError,
    PlanKey,
    PlanMismatchError,
    RolloutBatch,
    Shard,
    SplitMethod,
    TransportError,
    shard_for_rank,
    take,
    take_rows,
)
from arrow_split.ray._wire import can_free, check_session

if TYPE_CHECKING:
    from ray import ObjectRef

__all__ = [
    "HELPER_NAME_PREFIX",
    "Locality",
    "NodeRows",
    "OnFetch",
    "clear_caches",
    "fetch",
    "group_span",
    "is_gone",
    "live_nodes",
    "node_rows",
    "pick_holder",
    "put_by_node",
    "rank_slice",
    "take_on_holder",
]

Locality = Literal["auto", "local", "holder"]
"""Where a rank takes its rows from a delayed batch: ``"auto"`` here if this node holds it, else
on a node that does; ``"local"`` always here; ``"holder"`` always on a node that holds it."""

OnFetch = Callable[["ObjectRef[Any]"], None]
"""A callback given each reference a rank fetched to its process (an opt-in measuring hook)."""

HELPER_NAME_PREFIX = "arrow_split.holder."
"""The name of a node's take helper is this prefix and the node's hex id."""
_HELPER_THREADS = 8
_LOOKUP_TIMEOUT_S = 10.0
_ATTEMPTS = 2
_NODE_COUNT_TTL_S = 10.0  # on one node every copy is local: "auto" skips the location lookup
# Errors after which the helper, or its reply, is gone: start a fresh helper and try again.
_HelperGoneError = (
    ray_exceptions.RayActorError,
    ray_exceptions.ActorUnschedulableError,
    ray_exceptions.ObjectLostError,
)


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class NodeRows:
    """An eager object of several ranks: their rows in plan order (fresh), each rank's bounds.

    ``rows`` travels as a batch does (its buffers out of band, rebuilt without a check).
    """

    rows: RolloutBatch
    partition: np.ndarray
    batch_total_lengths: np.ndarray
    plan_key: PlanKey
    bounds: Mapping[int, tuple[int, int]]

    def __reduce__(self) -> tuple[Any, ...]:
        fields = (getattr(self, field.name) for field in dataclasses.fields(self))
        return (NodeRows, tuple(dict(f) if isinstance(f, Mapping) else f for f in fields))


def node_rows(batch: RolloutBatch, plan: Plan, ranks: list[int]) -> NodeRows:
    """One take of the group's rows, rank after rank, and each rank's row range."""
    rows = [plan.partitions[rank] for rank in ranks]
    sizes = np.array([0, *(len(part) for part in rows)], dtype=np.int64).cumsum()
    taken = take_rows(batch, np.concatenate(rows) if rows else np.zeros(0, np.int64))
    bounds = {rank: (int(sizes[i]), int(sizes[i + 1])) for i, rank in enumerate(ranks)}
    return NodeRows(taken.rows, taken.partition, taken.batch_total_lengths, plan.key, bounds)


def put_by_node(
    batch: RolloutBatch, plan: Plan, rank_nodes: list[str] | None
) -> list[ObjectRef[Any]]:
    """Put one object per node group; return one reference per rank (all or nothing)."""
    by_node: dict[str, list[int]] = {}
    for rank, node in enumerate(rank_nodes or [""] * plan.dp_size):  # no nodes: one group
        by_node.setdefault(node, []).append(rank)
    groups = list(by_node.values())
    refs: list[ObjectRef[Any]] = []
    try:
        if len(groups) == 1:  # every rank: the batch as it is, no gather
            refs.append(ray.put(batch.with_plan(plan)))
        else:  # `extend` keeps every reference made before a failing put (one by one)
            refs.extend(ray.put(node_rows(batch, plan, ranks)) for ranks in groups)
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
    ref_of = {rank: ref for ranks, ref in zip(groups, refs, strict=True) for rank in ranks}
    return [ref_of[rank] for rank in range(plan.dp_size)]


def _ranks_text(ranks: Sequence[int]) -> str:
    """``rank 3``, ``ranks 0, 4`` or ``ranks 0, 1, ... (64 ranks)``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(str(rank) for rank in ranks[:8])
    return "ranks " + shown + (f", ... ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def rank_slice(
    value: object, dp_rank: int, dp_size: int, method: SplitMethod | None, who: str, what: str
) -> Shard:
    """Rank ``dp_rank``'s rows of a fetched eager object: taken (one group) or sliced."""
    wanted = (dp_rank, dp_size, method, who, what)
    if isinstance(value, RolloutBatch) and value.plan is not None:
        key = value.plan.key
        _check_plan(key, f"a whole batch put for a {key.dp_size}-rank ", *wanted)
        return take(value, value.plan, dp_rank)
    if isinstance(value, RolloutBatch):
        msg = (
            f"{who}: {what} holds a RolloutBatch without a plan (put with `ray.put`, not by "
            "`split_train_data_by_dp`); put batches with `arrow_split.ray.split_train_data_by_dp`, "
            "which puts the batch with its plan"
        )
        raise PlanError(msg, key=what.strip("`"))
    found, start, stop = group_span(value, *wanted)
    group = found.rows
    part = group.record_batch.slice(start, stop - start)
    rows = RolloutBatch(part, group.specs, group.batch_globals, trust_objects=group.trust_objects)
    return Shard(
        rows,
        partition=found.partition[start:stop],
        batch_total_lengths=found.batch_total_lengths,
        plan_key=found.plan_key,
        dp_rank=dp_rank,
    )


def group_span(
    value: object, dp_rank: int, dp_size: int, method: SplitMethod | None, who: str, what: str
) -> tuple[NodeRows, int, int]:
    """A node group's object, and where rank ``dp_rank``'s rows are in its ``rows``.

    Raises what :func:`rank_slice` raises for anything but the rows of a group with this rank.
    """
    if not isinstance(value, NodeRows):
        msg = (
            f"{who}: {what} holds a {type(value).__name__}, not a RolloutBatch's rows; "
            "put batches with `arrow_split.ray.split_train_data_by_dp`"
        )
        raise NotARolloutBatchError(msg, key=what.strip("`"), got=type(value).__name__)
    key = value.plan_key
    got = f"the rows of {_ranks_text(sorted(value.bounds))} of a {key.dp_size}-rank "
    _check_plan(key, got, dp_rank, dp_size, method, who, what, has_rank=dp_rank in value.bounds)
    return (value, *value.bounds[dp_rank])


def _check_plan(
    key: PlanKey,
    got: str,
    dp_rank: int,
    dp_size: int,
    method: SplitMethod | None,
    who: str,
    what: str,
    *,
    has_rank: bool = True,
) -> None:
    """Refuse an object put for another plan (``dp_size``, method) or without this rank."""
    if has_rank and key.dp_size == dp_size and method in (None, key.method):
        return
    held = f"{got}{key.method} plan"
    asked = "" if method is None else f" {method}"
    expected = f"rank {dp_rank}'s rows of a {dp_size}-rank{asked} plan"
    msg = (
        f"{who}: {what} holds {held}, not {expected}; pass the list in the order "
        "`split_train_data_by_dp` returned it, with the same `dp_size` and `balance_data`"
    )
    raise PlanMismatchError(msg, key=what.strip("`"), expected=expected, got=held)


@dataclasses.dataclass
class _Caches:
    """The helper handles and node count, valid for one Ray session only."""

    session: str = ""
    helpers: dict[str, Any] = dataclasses.field(default_factory=dict)
    node_count: tuple[float, int] | None = None

    def current(self) -> _Caches:
        session = str(ray.get_runtime_context().get_job_id())
        if session != self.session:
            self.session, self.helpers, self.node_count = session, {}, None
        return self


_caches = _Caches()


def clear_caches() -> None:
    """Forget this process's helper handles and node count (they are rebuilt on demand)."""
    _caches.session, _caches.helpers, _caches.node_count = "", {}, None


def pick_holder(ref: ObjectRef[Any], dp_rank: int, locality: Locality) -> str | None:
    """The node where this rank should take its rows (spread by rank), or ``None`` for here."""
    if locality == "local" or (locality == "auto" and live_nodes() == 1):
        return None
    location = _location(ref)
    holders = sorted(location.get("node_ids") or ()) if location else []
    if not holders:
        return None
    here = str(ray.get_runtime_context().get_node_id())
    if here in holders:
        return None if locality == "auto" else here
    return str(holders[dp_rank % len(holders)])


def is_gone(ref: ObjectRef[Any]) -> bool:
    """Whether ``ref``'s object is gone for good (freed or removed: a get of it may never return).

    Gone: an object that was created (its owner knows its size), that no node holds nor spilled,
    and that does not arrive within ``_GONE_AFTER_S``. Not gone, waited for as ``ray.get`` waits:
    an object not created yet (its task still runs: no size); one Ray rebuilds from lineage (its
    owner withdrew it: not ready even without a fetch), except on a Ray that can free objects
    (:func:`can_free`), which shows a freed object that way too, so there the bound holds. Not
    gone either: an object kept in its owner's memory (no node, but ready at once), an owner
    that cannot answer (its get reports a dead owner).
    """
    location = _location(ref)
    if location is None or location.get("object_size") is None:
        return False  # unknown, or not created yet
    if location.get("node_ids") or location.get("did_spill"):
        return False
    if not can_free() and not ray.wait([ref], timeout=0, fetch_local=False)[0]:
        return False  # being rebuilt: nothing but `free` drops a live object silently
    # a freed object may still read as ready without fetching it: ask for it here
    ready, _ = ray.wait([ref], timeout=_GONE_AFTER_S, fetch_local=True)
    return not ready


def _location(ref: ObjectRef[Any]) -> Mapping[str, Any] | None:
    """Ray's record of where ``ref``'s object is, or ``None`` (unknown, or no answer in time).

    Rays without the fix of ray-project/ray#65254 (2.49 among them) wait ``timeout_ms``
    microseconds, not milliseconds: there a loaded owner's answer is "too late" after a few
    milliseconds, and "auto" took the whole batch where the node-aware take was due. So a lookup
    that times out is asked again, after a pause that doubles, until ``_LOOKUP_TIMEOUT_S`` has
    really passed; a Ray that waits as documented spends it all in the first ask.
    """
    deadline = time.monotonic() + _LOOKUP_TIMEOUT_S
    pause = 0.001
    while True:
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            locations = ray.experimental.get_object_locations([ref], timeout_ms=left_ms)
        except ray_exceptions.GetTimeoutError:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(pause, left))
            pause = min(2 * pause, 0.1)
            continue
        except ray_exceptions.RayError:
            return None
        return locations.get(ref)


_GET_RECHECK_S = 5.0
"""How long a get waits before it checks whether the object is gone (:func:`is_gone`)."""
_GONE_AFTER_S = 10.0
"""How long a created object that no node holds may take to arrive before it counts as gone."""


def fetch(ref_or_value: object, who: str, what: str, on_fetch: OnFetch | None) -> object:
    """The value a reference holds (read-only views of the store), or the value itself.

    A pending object (its task still runs, or Ray rebuilds it) is waited for, as ``ray.get``
    waits. An object no node holds any more (freed or removed: a get of it may never return), an
    object whose owner died, and a reference this session cannot read (Ray not initialized, an
    unknown owner) are a TransportError naming the object, never a hang.
    """
    if not isinstance(ref_or_value, ray.ObjectRef):
        return ref_or_value
    check_session(ref_or_value, who, what)
    while True:  # a get of an object freed just before may wait forever: check between waits
        try:
            value = ray.get(ref_or_value, timeout=_GET_RECHECK_S)
        except ray_exceptions.GetTimeoutError:
            if is_gone(ref_or_value):
                raise _lost(who, what, ref_or_value, "no node holds it") from None
            continue
        except ray_exceptions.ObjectLostError as exc:  # every "object gone" error derives from it
            raise _lost(who, what, ref_or_value, type(exc).__name__) from exc
        if on_fetch is not None:
            on_fetch(ref_or_value)
        return value


def _lost(who: str, what: str, object_ref: ObjectRef[Any], reason: str) -> TransportError:
    msg = (
        f"{who}: the object store lost {what} (object {object_ref.hex()}, {reason}); it was "
        "freed, removed or its owner died: the driver should own the batch (call "
        "`split_train_data_by_dp` on the driver, not in an actor that may die) and keep its "
        "references until every rank has processed the step"
    )
    return TransportError(msg, key=object_ref.hex())


def live_nodes() -> int:
    """The number of live nodes in the cluster, counted at most every 10 seconds."""
    caches = _caches.current()
    now = time.monotonic()
    if caches.node_count is None or now - caches.node_count[0] > _NODE_COUNT_TTL_S:
        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        caches.node_count = (now, len([node for node in nodes if node.get("Alive")]))
    return caches.node_count[1]


def take_on_holder(
    ref: ObjectRef[Any], node_id: str, request: dict[str, Any], on_fetch: OnFetch | None
) -> Shard | None:
    """The rank's shard, taken on ``node_id`` (its errors raised here) and copied here.

    ``None``: take locally (helper unreachable twice, batch gone or not a whole batch).
    """
    for _ in range(_ATTEMPTS):
        helper = _helper_on(node_id)
        try:
            shard_ref = helper.take.remote({"ref": ref}, request)
            shard = ray.get(shard_ref)
        except ray_exceptions.RayTaskError as exc:
            if isinstance(exc.cause, ArrowSplitError):
                raise exc.cause from None
            if not isinstance(exc, ray_exceptions.ObjectLostError):
                raise
            return None  # the batch itself is lost: the local take reports it
        except _HelperGoneError:
            _caches.current().helpers.pop(node_id, None)
            continue
        if shard is None:
            return None
        if on_fetch is not None:
            on_fetch(shard_ref)
        # An identity take copies the shard out of the object store into fresh buffers.
        return take_rows(shard, np.arange(shard.num_samples, dtype=np.int64))
    return None


def _helper_on(node_id: str) -> Any:
    """The take helper of ``node_id``: this process's handle, or a new or existing actor."""
    helpers = _caches.current().helpers
    helper = helpers.get(node_id)
    if helper is None:
        helper = _HolderTake.options(  # type: ignore[attr-defined]
            name=HELPER_NAME_PREFIX + node_id,
            get_if_exists=True,
            max_concurrency=_HELPER_THREADS,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote()
        helpers[node_id] = helper
    return helper


@ray.remote(num_cpus=0)
class _HolderTake:
    """Takes ranks' rows from batches its node holds; one per node, shared by every rank."""

    def take(self, boxed: dict[str, Any], request: dict[str, Any]) -> Shard | None:
        batch = ray.get(boxed["ref"])
        if not isinstance(batch, RolloutBatch):
            return None
        return shard_for_rank(batch, **request)
