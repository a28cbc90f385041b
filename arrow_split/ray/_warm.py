"""A train actor's first step as fast as its next: :func:`warm_up` does the first-time work early.

A fresh process pays, on its first :func:`~arrow_split.ray.process_rollout_data`, for work that
later calls skip: numpy imports ``numpy.ma`` on first use (pyarrow looks for masked arrays when it
converts an array), pyarrow imports ``pyarrow.compute`` and builds its kernels' wrappers on the
first ``take``, and the first unpickling of a record batch, the first slice and the first plan
each load code and fill caches. Together that made a delayed rank's first call several times its
next one. :func:`warm_up` runs one eager and one delayed rank's work on a batch of two samples,
in memory (no Ray call, nothing put), so that a framework pays it when it creates its train
actors, not in their first step. Importing this leaf does not do it: a driver that only puts
does not need it.
"""

from __future__ import annotations

import pickle
from typing import cast

from arrow_split import KNOWN_COLUMNS, RolloutBatch, Shard, shard_for_rank
from arrow_split.ray._eager import _node_rows, rank_slice
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


def warm_up() -> None:
    """Do in this process, now, the first-time work of a rank's first step (once per process).

    Call it in each train actor when it starts (in its ``__init__``), before its first
    :func:`~arrow_split.ray.process_rollout_data`; a later call returns at once. It needs no Ray
    connection and puts nothing. Import :mod:`arrow_split.torch` in the actor too, where ranks
    convert their shards to tensors.

    Examples
    --------
    >>> from arrow_split.ray import warm_up
    >>> warm_up()
    >>> warm_up()  # the second call does nothing
    """
    global _done  # once per process
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
