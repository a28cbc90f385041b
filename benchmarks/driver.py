"""Driver-side figures: building the batch, putting it, and the physical limit of a put.

Every put is timed from the call to its return (``ray.put`` returns once the object is in the
store). The bytes each put leaves in the store come from Ray itself:
``ray.experimental.get_object_locations(refs)[ref]["object_size"]`` (the size Ray records for
the stored object: data plus metadata, out-of-band buffers included), summed over the put's
references; ``did_spill`` from the same call says whether any object was spilled to disk (which
would make the timing meaningless). ``driver_rss_increase_bytes`` is the driver's peak RSS during
the operation minus its RSS before (see :mod:`benchmarks.timing`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import numpy as np
import ray

from arrow_split import RolloutBatch
from benchmarks.timing import current_rss, peak_rss, reset_peak_rss, summarize

__all__ = ["measure_build", "measure_put", "single_buffer_put", "store_figures"]

Refs: TypeAlias = "ray.ObjectRef[Any] | list[ray.ObjectRef[Any]]"


def _timed_with_rss(call: Callable[[], Any]) -> tuple[float, int, Any]:
    """Seconds, driver RSS increase and result of one call, after a garbage collection."""
    gc.collect()
    reset_peak_rss()
    before = current_rss()
    start = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - start
    return seconds, max(peak_rss() - before, 0), result


def measure_build(data: Mapping[str, Any], repeats: int) -> tuple[dict[str, Any], RolloutBatch]:
    """Time ``RolloutBatch.from_train_data(data)``; return the figures and the last batch."""
    seconds, increases = [], []
    batch: RolloutBatch | None = None
    for _ in range(repeats):
        batch = None
        took, increase, batch = _timed_with_rss(lambda: RolloutBatch.from_train_data(data))
        seconds.append(took)
        increases.append(increase)
    assert batch is not None
    figures = {
        "seconds": summarize(seconds),
        "driver_rss_increase_bytes": max(increases),
        "batch_nbytes": batch.nbytes,
    }
    return figures, batch


def store_figures(refs: Refs) -> dict[str, Any]:
    """Bytes Ray holds for ``refs`` (see the module docstring) and whether any was spilled."""
    ref_list = refs if isinstance(refs, list) else [refs]
    locations = ray.experimental.get_object_locations(ref_list)
    return {
        "objects": len(ref_list),
        "store_bytes": sum(int(entry.get("object_size") or 0) for entry in locations.values()),
        "spilled": any(bool(entry.get("did_spill")) for entry in locations.values()),
    }


def measure_put(put: Callable[[], Refs], repeats: int) -> dict[str, Any]:
    """Time ``repeats`` puts; the references of each are dropped before the next one."""
    seconds, increases = [], []
    store: dict[str, Any] = {}
    for _ in range(repeats):
        took, increase, refs = _timed_with_rss(put)
        seconds.append(took)
        increases.append(increase)
        store = store_figures(refs)
        del refs
        gc.collect()
    return {"seconds": summarize(seconds), "driver_rss_increase_bytes": max(increases), **store}


def single_buffer_put(nbytes: int, repeats: int) -> dict[str, Any]:
    """The physical limit of a put: ``ray.put`` of ONE contiguous numpy buffer of ``nbytes``."""
    buffer = np.ones(max(nbytes, 1), dtype=np.uint8)
    figures = measure_put(lambda: ray.put(buffer), repeats)
    figures["bytes"] = nbytes
    return figures
