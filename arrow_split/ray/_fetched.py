"""What a rank does with what it fetched from Ray's object store, before taking its rows.

:func:`fetch` gets the value a reference holds (an object the store lost is a
:class:`~arrow_split.TransportError` that says who should own the batch), :func:`whole_batch`
refuses anything but the whole batch a delayed reference must hold, and :func:`detached` copies
the numpy batch-global values, which Ray hands over as read-only views of the store, so that
nothing the rank keeps pins the fetched object.
"""

from __future__ import annotations

import numpy as np
import ray  # the package's first import (`_handoff`) fails fast without Ray
from ray import exceptions as ray_exceptions

from arrow_split import NotARolloutBatchError, PlanError, RolloutBatch, TransportError
from arrow_split.ray._eager import NodeRows
from arrow_split.ray._locality import OnFetch

__all__ = ["detached", "fetch", "whole_batch"]

# Every way Ray 2.60 reports that an object is gone (OwnerDiedError, ObjectFetchTimedOutError,
# ReferenceCountingAssertionError, ObjectFreedError, ObjectReconstructionFailedError...) derives
# from ObjectLostError.
_ObjectLostError = ray_exceptions.ObjectLostError


def whole_batch(value: object, who: str) -> RolloutBatch:
    """The whole batch a delayed reference holds; refuse an eager object or anything else."""
    if isinstance(value, NodeRows):
        msg = (
            f"{who}: got {len(value.partition)} rows of "
            f"{len(value.batch_total_lengths)} samples put for ranks where the whole batch was "
            "expected; pass the whole eager list (not one of its references), or the reference "
            "`split_train_data_by_dp(..., delay=True)` returned"
        )
        raise PlanError(msg)
    if not isinstance(value, RolloutBatch):
        msg = (
            f"{who}: the delayed reference holds a {type(value).__name__}, not a RolloutBatch; "
            "put batches with `arrow_split.ray.split_train_data_by_dp`"
        )
        raise NotARolloutBatchError(msg)
    return value


def fetch(ref_or_value: object, who: str, what: str, on_fetch: OnFetch | None) -> object:
    """The value a reference holds (read-only views of the store), or the value itself."""
    if not isinstance(ref_or_value, ray.ObjectRef):
        return ref_or_value
    try:
        value = ray.get(ref_or_value)
    except _ObjectLostError as exc:
        msg = (
            f"{who}: the object store lost {what} ({type(exc).__name__}); the "
            "driver should own the batch: call `split_train_data_by_dp` on the driver (not "
            "in an actor that may die) and keep its references until every rank has "
            "processed the step"
        )
        raise TransportError(msg) from exc
    if on_fetch is not None:
        on_fetch(ref_or_value)
    return value


def detached(batch: RolloutBatch) -> RolloutBatch:
    """Copy numpy batch-global values, which Ray hands over as views of the store."""
    if not any(isinstance(value, np.ndarray) for value in batch.batch_globals.values()):
        return batch
    batch_globals = {key: _owned(value) for key, value in batch.batch_globals.items()}
    return RolloutBatch(
        batch.record_batch,
        batch.specs,
        batch_globals,
        plan=batch.plan,
        trust_objects=batch.trust_objects,
    )


def _owned(value: object) -> object:
    if not isinstance(value, np.ndarray):
        return value
    array = np.array(value, copy=True)
    array.flags.writeable = False
    return array
