"""Where a batch's bytes live: a byte store a batch is put into once, and ranks read by rows.

The hand-off runs on Ray's object store (:mod:`arrow_split.ray`, the default) or on a byte store
behind :class:`ByteStore`: put, read byte ranges, remove. :class:`MemoryStore` keeps the bytes in
this process; :mod:`arrow_split.mooncake` in a Mooncake store that ranks in other deployments
read. A put writes the batch's Arrow buffers once; :func:`take_rank` reads only its rows' bytes.
docs/mooncake.md is the guide.

Examples
--------
>>> from arrow_split import RolloutBatch, shard_for_rank
>>> from arrow_split.stores import MemoryStore, StoredBatchRef, put_batch, take_rank
>>> batch = RolloutBatch.from_train_data({"tokens": [[1, 2, 3], [4], [5, 6]]})
>>> store = MemoryStore()
>>> ref = put_batch(store, batch, batch.make_plan(2, balance_data=False))
>>> shard = take_rank(store, StoredBatchRef.from_json(ref.to_json()), 1, 2)
>>> shard.equals(shard_for_rank(batch, 1, 2, balance_data=False))
True
"""

from __future__ import annotations

from arrow_split.stores._memory import ByteStore, MemoryStore, Read
from arrow_split.stores._ref import StoredBatchRef
from arrow_split.stores._stored import put_batch, remove_batch, take_rank

__all__ = [
    "ByteStore",
    "MemoryStore",
    "Read",
    "StoredBatchRef",
    "put_batch",
    "remove_batch",
    "take_rank",
]
