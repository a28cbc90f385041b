"""Node-aware delayed split: take a rank's rows on a node that holds the batch.

Ray moves an object between nodes whole. With the plain delayed split, every node that hosts a
rank pulls the WHOLE batch into its object store before its ranks take their rows, so the bytes
that cross nodes grow with the number of nodes. :func:`arrow_split.ray.process_rollout_data`
therefore chooses where a rank's ``take`` runs (its ``locality`` keyword, see :data:`Locality`):

``"local"``
    The plain delayed split: fetch the batch to this rank's node (once per node: the ranks of a
    node share its copy) and take here.
``"holder"``
    Always take on a node that holds the batch: a helper actor there maps the batch zero-copy,
    takes this rank's rows and returns them; only the shard crosses nodes.
``"auto"`` (the default)
    Take here, zero-copy, when this rank's node holds a copy; else as ``"holder"``. On a
    one-node cluster it takes here without asking where the batch is (the count of live nodes
    is refreshed at most every 10 seconds).

What crosses nodes in one step, for a batch put on node H and ranks on N other nodes: eager, each
rank's shard once (about one batch in all); ``"local"``, the whole batch once per node, N
batches (N - 1 if H hosts ranks too and counts among the N nodes); ``"auto"`` and ``"holder"``,
each rank's shard once, as eager. Every shard carries the batch-global values and the whole
batch's total lengths, in both eager and node-aware modes.

Where the holder's take runs. One helper actor per holding node (named
``arrow_split.holder.<node id>`` in the job's namespace, no CPU, up to 8 takes at once on
threads), created by the first rank that needs it. Not one task per rank: a zero-CPU task is
granted at once, so a step where many ranks ask one node at once makes its raylet start a worker
process for each concurrent task. ``python -m benchmarks.cluster --compare-tasks`` measured it
(3 nodes x 4 ranks, one 2-core machine): the 12 ranks' tasks ran in 9 to 11 worker processes
started for them, and their first step took 1.5 to 3.7 s per rank at worst, against 0.6 to 0.7 s
with the helper (whose process starts once). The pool shrinks again when the workers idle, so
this recurs. Ray
ties an actor to the process that created it: when that rank's process dies, the helper dies
too, and the next call that finds it gone starts another (each call retries once on a fresh
helper, then falls back to a local take).

Lifetimes. The helper's reply (the shard) is an object owned by the calling rank and created on
the holding node; the rank fetches it once, copies it into fresh buffers (so its shard is
writable and pins nothing, as with a local delayed take) and drops the reference, which frees
the object. The helper keeps no view of the batch after a take.

Failures. The location lookup has a timeout; when it fails, when no node holds a copy (objects
under 100 KiB travel inline with the reference) or when the helper cannot be reached twice in a
row, the rank takes locally, which reports a lost batch as a :class:`TransportError` naming the
rank. A shard lost on its way (the holding node died) is asked for once more, then taken
locally the same way. A plan the batch cannot meet raises the same error as a local take.

Measuring. :func:`record_fetches` collects the references that
:func:`~arrow_split.ray.process_rollout_data` fetched to this process; :func:`cross_node_bytes`
sums, over distinct objects, size x (number of nodes holding a copy - 1): the bytes that crossed
nodes to place those copies, read from Ray's object directory while the references are alive.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal, get_args

try:
    import ray
    from ray import exceptions as ray_exceptions
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError:
    msg = "arrow_split.ray_locality needs Ray; install it with `pip install arrow-split[ray]`"
    raise ImportError(msg) from None

import numpy as np

from arrow_split.batch import RolloutBatch
from arrow_split.errors import ArrowSplitError, PlanError
from arrow_split.split import shard_for_rank
from arrow_split.take import take_record_batch

if TYPE_CHECKING:
    from ray import ObjectRef

__all__ = [
    "HELPER_NAME_PREFIX",
    "Locality",
    "check_locality",
    "cross_node_bytes",
    "note_fetch",
    "pick_holder",
    "record_fetches",
    "take_on_holder",
]

Locality = Literal["auto", "local", "holder"]
"""Where a rank takes its rows from a delayed batch (see the module docstring)."""

HELPER_NAME_PREFIX = "arrow_split.holder."
"""The name of a node's take helper is this prefix and the node's hex id."""
_HELPER_THREADS = 8
_LOOKUP_TIMEOUT_MS = 10_000
_ATTEMPTS = 2
# How long a rank trusts its last count of the cluster's live nodes. On one node every copy is
# local, so "auto" skips the location lookup (an RPC to the batch's owner, about a millisecond);
# a node that joins within this window only costs a plain delayed take until the next count.
_NODE_COUNT_TTL_S = 10.0
_node_count: tuple[float, int] | None = None

# Errors after which the helper, or its reply, is gone: start a fresh helper and try again.
_HelperGoneError = (
    ray_exceptions.RayActorError,
    ray_exceptions.ActorUnschedulableError,
    ray_exceptions.ObjectLostError,
)

# This process's helper handles, by node id (a rank may be asked to take on several nodes).
_helpers: dict[str, Any] = {}
_fetched: ContextVar[list[Any] | None] = ContextVar("arrow_split_fetched", default=None)


def check_locality(locality: object) -> Locality:
    """Return ``locality`` if it is one of :data:`Locality`, else raise a PlanError."""
    choices: tuple[Locality, ...] = get_args(Locality)
    for choice in choices:
        if locality == choice and isinstance(locality, str):
            return choice
    msg = (
        f"invalid `locality`: {locality!r}; expected one of: "
        f"{', '.join(repr(choice) for choice in choices)}"
    )
    raise PlanError(msg)


@contextmanager
def record_fetches() -> Iterator[list[ObjectRef[Any]]]:
    """Collect the references :func:`~arrow_split.ray.process_rollout_data` fetches here.

    Yields
    ------
    list of ObjectRef
        Filled, in this thread (or task), with every object a call fetched to this process: the
        delayed batch (local take), ``refs[dp_rank]`` (eager), or the shard a holder node took
        for this rank (node-aware). Holding the list keeps those objects alive: pass it to
        :func:`cross_node_bytes` (or back to the driver), then drop it.
    """
    fetched: list[ObjectRef[Any]] = []
    token = _fetched.set(fetched)
    try:
        yield fetched
    finally:
        _fetched.reset(token)


def note_fetch(ref: ObjectRef[Any]) -> None:
    """Add ``ref`` to the list of the innermost :func:`record_fetches`, if one is open."""
    fetched = _fetched.get()
    if fetched is not None:
        fetched.append(ref)


def cross_node_bytes(refs: Iterable[ObjectRef[Any]], *, timeout_s: float = 10.0) -> int:
    """Bytes that crossed nodes to place the copies of these objects, each object counted once.

    Parameters
    ----------
    refs
        Live references (duplicates are counted once).
    timeout_s
        The limit of the location lookup.

    Returns
    -------
    int
        The sum of ``object_size * (number of nodes holding a copy - 1)``. An object that
        travels inline (under 100 KiB) has no node and counts 0; a copy evicted under memory
        pressure is no longer counted, so under pressure this is a lower bound.
    """
    total = 0
    # One lookup per object: in Ray 2.60 a lookup of objects with several owners can settle its
    # reply twice and abort the process (the first owner's reply may land before the request to
    # the second is counted).
    for ref in {ref.hex(): ref for ref in refs}.values():
        found = ray.experimental.get_object_locations([ref], timeout_ms=int(timeout_s * 1000))
        location = found.get(ref)
        if location:
            copies = len(location.get("node_ids") or ())
            total += int(location.get("object_size") or 0) * max(copies - 1, 0)
    return total


def pick_holder(ref: ObjectRef[Any], dp_rank: int, locality: Locality) -> str | None:
    """The node where this rank should take its rows, or ``None`` to take here.

    Ranks spread over the holding nodes by rank when the batch has several copies.
    """
    if locality == "local" or (locality == "auto" and _live_nodes() == 1):
        return None
    holders = _holder_nodes(ref)
    if not holders:
        return None
    here = str(ray.get_runtime_context().get_node_id())
    if here in holders:
        return None if locality == "auto" else here
    return holders[dp_rank % len(holders)]


def _live_nodes() -> int:
    """The number of live nodes in the cluster, counted at most every ``_NODE_COUNT_TTL_S``."""
    global _node_count
    now = time.monotonic()
    if _node_count is None or now - _node_count[0] > _NODE_COUNT_TTL_S:
        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        _node_count = (now, len([node for node in nodes if node.get("Alive")]))
    return _node_count[1]


def _holder_nodes(ref: ObjectRef[Any]) -> list[str]:
    """The ids of the nodes whose object store holds a copy of ``ref`` (``[]`` if unknown)."""
    try:
        locations = ray.experimental.get_object_locations([ref], timeout_ms=_LOOKUP_TIMEOUT_MS)
    except ray_exceptions.RayError:
        return []
    location = locations.get(ref)
    return sorted(location.get("node_ids") or ()) if location else []


def take_on_holder(
    ref: ObjectRef[Any], node_id: str, dp_rank: int, dp_size: int, *, balance_data: bool
) -> RolloutBatch | None:
    """Rank ``dp_rank``'s shard, taken on ``node_id`` and copied into fresh buffers here.

    Returns ``None`` when the caller should take locally instead: the helper could not be
    reached twice in a row, the batch is gone, or the reference holds something other than a
    whole batch (the local path then raises the library's error, naming the rank).

    Raises
    ------
    ArrowSplitError
        The take itself failed on the holder (a plan the batch cannot meet).
    """
    for _ in range(_ATTEMPTS):
        helper = _helper_on(node_id)
        try:
            shard_ref = helper.take.remote({"ref": ref}, dp_rank, dp_size, balance_data)
            shard = ray.get(shard_ref)
        except ray_exceptions.RayTaskError as exc:
            if isinstance(exc.cause, ArrowSplitError):
                raise exc.cause from None
            if not isinstance(exc, ray_exceptions.ObjectLostError):
                raise
            return None  # the batch itself is lost: the local take reports it
        except _HelperGoneError:
            _helpers.pop(node_id, None)
            continue
        if shard is None:
            return None
        note_fetch(shard_ref)
        return _with_fresh_buffers(shard)
    return None


def _with_fresh_buffers(shard: RolloutBatch) -> RolloutBatch:
    """Copy the record batch out of the object store (an identity take writes fresh buffers)."""
    record_batch = shard.record_batch
    indices = np.arange(record_batch.num_rows, dtype=np.int64)
    return shard.replace(record_batch=take_record_batch(record_batch, indices))


def _helper_on(node_id: str) -> Any:
    """The take helper of ``node_id``: this process's handle, or a new or existing actor."""
    helper = _helpers.get(node_id)
    if helper is None:
        helper = _HolderTake.options(  # type: ignore[attr-defined]
            name=HELPER_NAME_PREFIX + node_id,
            get_if_exists=True,
            max_concurrency=_HELPER_THREADS,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote()
        _helpers[node_id] = helper
    return helper


@ray.remote(num_cpus=0)
class _HolderTake:
    """Takes ranks' rows from batches its node holds; one per node, shared by every rank."""

    def take(
        self, boxed: dict[str, Any], dp_rank: int, dp_size: int, balance_data: bool
    ) -> RolloutBatch | None:
        batch = ray.get(boxed["ref"])
        if not isinstance(batch, RolloutBatch) or batch.partition is not None:
            return None
        return shard_for_rank(batch, dp_rank, dp_size, balance_data=balance_data)
