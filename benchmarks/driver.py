"""Driver-side figures: building the batch, putting it, and the physical limit of a put.

Every put is timed from the call to its return (``ray.put`` returns once the object is in the
store). The bytes each put leaves in the store come from Ray itself:
``ray.experimental.get_object_locations(refs)[ref]["object_size"]`` (the size Ray records for
the stored object: data plus metadata, out-of-band buffers included), summed over the put's
references; ``did_spill`` from the same call says whether any object was spilled to disk (which
would make the timing meaningless). ``driver`` holds the driver's memory figures of the operation
(:class:`benchmarks.timing.MemoryGauge`, the worst repeat): its private peak RSS increase (a
classic put pickles the dict into private memory first) and the store pages it touched.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import numpy as np
import ray

from arrow_split import RolloutBatch
from benchmarks.timing import MemoryGauge, Repeats, summarize

__all__ = [
    "measure_build",
    "measure_put",
    "per_rank_buffers_put",
    "single_buffer_put",
    "store_figures",
]

Refs: TypeAlias = "ray.ObjectRef[Any] | list[ray.ObjectRef[Any]]"


def _timed_with_rss(call: Callable[[], Any]) -> tuple[float, dict[str, int], Any]:
    """Seconds, driver memory figures and result of one call, after a garbage collection."""
    gc.collect()
    with MemoryGauge() as gauge:
        start = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - start
    return seconds, gauge.figures, result


def _worst(memory: list[dict[str, int]]) -> dict[str, int]:
    """The largest value of every memory figure over the repeats."""
    return {key: max(entry[key] for entry in memory) for key in memory[0]}


def measure_build(data: Mapping[str, Any], repeats: Repeats) -> tuple[dict[str, Any], RolloutBatch]:
    """Time ``RolloutBatch.from_train_data(data)``; return the figures and the last batch."""
    seconds, memory = [], []
    batch: RolloutBatch | None = None
    for _ in repeats:
        batch = None
        took, figures, batch = _timed_with_rss(lambda: RolloutBatch.from_train_data(data))
        seconds.append(took)
        memory.append(figures)
    assert batch is not None
    return {"seconds": summarize(seconds), "driver": _worst(memory), "nbytes": batch.nbytes}, batch


def store_figures(refs: Refs) -> dict[str, Any]:
    """Bytes Ray holds for ``refs`` (see the module docstring) and whether any was spilled."""
    ref_list = refs if isinstance(refs, list) else [refs]
    locations = ray.experimental.get_object_locations(ref_list)
    return {
        "objects": len(ref_list),
        "store_bytes": sum(int(entry.get("object_size") or 0) for entry in locations.values()),
        "spilled": any(bool(entry.get("did_spill")) for entry in locations.values()),
    }


def measure_put(put: Callable[[], Refs], repeats: Repeats) -> dict[str, Any]:
    """Time the puts; the references of each are dropped before the next one."""
    seconds, memory = [], []
    store: dict[str, Any] = {}
    for _ in repeats:
        took, figures, refs = _timed_with_rss(put)
        seconds.append(took)
        memory.append(figures)
        store = store_figures(refs)
        del refs
        gc.collect()
    return {"seconds": summarize(seconds), "driver": _worst(memory), **store}


def single_buffer_put(nbytes: int, repeats: Repeats) -> dict[str, Any]:
    """The physical limit of a put: ``ray.put`` of ONE contiguous numpy buffer of ``nbytes``."""
    buffer = np.ones(max(nbytes, 1), dtype=np.uint8)
    figures = measure_put(lambda: ray.put(buffer), repeats)
    figures["bytes"] = nbytes
    return figures


def per_rank_buffers_put(sizes: list[int], repeats: Repeats) -> dict[str, Any]:
    """The limit of an eager put: one ``ray.put`` per rank of a numpy buffer of its shard's size.

    What Ray itself costs per object, whatever is in it: no build, no split, no pickling of
    anything but a contiguous buffer.
    """
    buffers = [np.ones(max(size, 1), dtype=np.uint8) for size in sizes]
    figures = measure_put(lambda: [ray.put(buffer) for buffer in buffers], repeats)
    figures["bytes"] = sum(sizes)
    return figures
