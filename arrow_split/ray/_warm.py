"""A train actor's first step as fast as its next: :func:`warm_up` does the first-time work early.

A fresh process pays, on its first :func:`~arrow_split.ray.process_rollout_data`, for work that
later calls skip: numpy imports ``numpy.ma`` on first use (pyarrow looks for masked arrays when it
converts an array), pyarrow imports ``pyarrow.compute`` and builds its kernels' wrappers on the
first ``take``, and the first unpickling of a record batch, the first slice and the first plan
each load code and fill caches. Together that made a delayed rank's first call several times its
next one. :func:`warm_up` runs one eager and one delayed rank's work on a batch of two samples,
in memory (nothing put), so that a framework pays it when it creates its train actors, not in
their first step. In a process connected to Ray (an actor) it also counts the cluster's live
nodes, as a delayed rank does before it fetches (``ray.nodes()``: 3-5 ms the first time in a
process, about 1 ms later); the count is kept for 10 s like any, so a first step that comes
later counts again, as every step more than 10 s after the last does. Importing this leaf does
not do it: a driver that only puts does not need it.
"""

from __future__ import annotations

import pickle
from typing import cast

import ray

from arrow_split import KNOWN_COLUMNS, RolloutBatch, Shard, shard_for_rank
from arrow_split._args import as_int
from arrow_split.ray._eager import _node_rows, rank_slice
from arrow_split.ray._heap import MAX_RESERVE_BYTES, reserve_heap
from arrow_split.ray._locality import _live_nodes
from arrow_split.schema import role_column

__all__ = ["warm_up"]


def _train_data() -> dict[str, object]:
    """Two samples: the columns every batch has, found by their roles."""
    tokens, response, mask = (
        role_column(KNOWN_COLUMNS, role)
        for role in ("length_source", "response_length", "loss_mask")
    )
    return {str(tokens): [[1, 2, 3], [4, 5]], str(response): [2, 1], str(mask): [[1, 0], [1]]}


_done = False


def _through_pickle(value: object) -> object:
    """``value`` as a rank gets it: pickled with out-of-band buffers, read back read-only."""
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    views = [memoryview(bytes(buffer.raw())) for buffer in buffers]
    return pickle.loads(payload, buffers=views)


def _use(shard: Shard) -> None:
    """What a rank does next with its shard: its numeric columns, its actor dict."""
    shard.numeric_columns()
    shard.to_train_data(layout="actor")


def warm_up(*, reserve_bytes: int = 0) -> None:
    """Do in this process, now, the first-time work of a rank's first step (once per process).

    Call it in each train actor when it starts (in its ``__init__``), before its first
    :func:`~arrow_split.ray.process_rollout_data`; a later call returns at once (or only grows
    the reserve). It puts nothing and needs no Ray connection; where Ray is initialized it also
    counts the cluster's live nodes, as a delayed rank's call does (a count is kept 10 s).
    Import :mod:`arrow_split.torch` in the actor too, where ranks convert their shards to
    tensors.

    Parameters
    ----------
    reserve_bytes : int, default 0
        Heap memory to fault in now and keep for the first steps (glibc; 0 to 2**30): about
        twice the private memory of a rank's step (its shard's bytes, its tensors' bytes). A
        fresh process otherwise maps and touches that memory in its first two calls, which is
        what made them several times a warm one (:mod:`arrow_split.ray._heap` says why). It sets
        glibc's ``malloc`` thresholds for the process (blocks up to 32 MiB from the heap, which
        keeps up to twice the reserve free) and makes the system allocator Arrow's default memory
        pool (``pyarrow.system_memory_pool()``), so that Arrow's buffers reuse that heap too:
        the memory stays with the train actor.

    Raises
    ------
    OptionTypeError
        If ``reserve_bytes`` is not an int (a bool or a float is refused).
    OptionError
        If ``reserve_bytes`` is negative or above 2**30.

    Warns
    -----
    ArrowSplitWarning
        With ``reserve_bytes > 0`` where the C library is not glibc: nothing is reserved.

    Examples
    --------
    >>> from arrow_split.ray import warm_up
    >>> warm_up()
    >>> warm_up()  # the second call does nothing
    >>> warm_up(reserve_bytes=64 * 2**20)  # rank steps of ~32 MiB  # doctest: +SKIP
    """
    global _done  # once per process
    fix = "about twice a rank's step memory, or 0 for none"
    reserve = as_int("reserve_bytes", reserve_bytes, minimum=0, maximum=MAX_RESERVE_BYTES, fix=fix)
    if reserve:
        reserve_heap(reserve)
    if ray.is_initialized():
        _live_nodes()
    if _done:
        return
    batch = RolloutBatch.from_train_data(_train_data())
    plan = batch.make_plan(2, balance_data=True)
    rows = _through_pickle(_node_rows(batch, plan, [0, 1]))
    for rank in (0, 1):
        _use(rank_slice(rows, rank, 2, None, "warm_up", "its object"))
    whole = cast(RolloutBatch, _through_pickle(batch.with_plan(plan)))
    _use(shard_for_rank(whole, 1, 2, balance_data=True))
    _done = True
