"""A batch put once as its Arrow buffers into a byte store; a rank reads only its rows' bytes.

Where the bytes live is a :class:`~arrow_split.stores.ByteStore` (put, read ranges, remove):
:class:`~arrow_split.stores.MemoryStore`, Mooncake's store in the leaf :mod:`arrow_split.mooncake`.
A put writes the batch in its plan's order (each rank's rows one run of every buffer), each
non-empty buffer of each column under its own key, and an index (a header, every sample's total
length, then each rank's rows, then the adapter slots if any; never empty, as some stores
refuse an empty object); it returns a :class:`StoredBatchRef`, plain JSON, that a process with
no Ray turns back into a reference. A take reads the index ranges of its rank, then the byte
ranges of its rows (:mod:`arrow_split._codecs._ranges`), and builds its shard.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, cast

import numpy as np
import pyarrow as pa

from arrow_split._args import (
    SplitMethod,
    as_flag,
    as_int,
    check_dp_rank,
    check_dp_size,
    describe,
    method_of,
)
from arrow_split._codecs._ranges import Ranges, column_buffers, read_rows, supported
from arrow_split._split import _parse_plan, padded_plan
from arrow_split.batch import RolloutBatch, check_batch
from arrow_split.batch._dump_meta import decode_metadata, encode_metadata
from arrow_split.errors import (
    DumpError,
    NotARolloutBatchError,
    PlanError,
    PlanMismatchError,
    TransportError,
    mistake,
)
from arrow_split.plan import Plan
from arrow_split.shard import Shard, _gather
from arrow_split.stores._memory import ByteStore
from arrow_split.stores._ref import INDEX_HEADER, StoredBatchRef
from arrow_split.stores._resplit import index_parts, rank_rows

__all__ = ["put_batch", "remove_batch", "take_rank"]


def put_batch(
    store: ByteStore, batch: RolloutBatch, plan: Plan | None = None, *, step: int | None = None
) -> StoredBatchRef:
    """Write ``batch`` (and ``plan``'s rows) into ``store`` once, as its Arrow buffers.

    With no ``plan``, the plan the batch carries (:meth:`~arrow_split.RolloutBatch.with_plan`)
    is the put's, as :func:`~arrow_split.shard_for_rank` follows it; with none either (the
    ranks' ``dp_size`` not known yet) the rows stay in their order and each rank plans for its
    own size at the take. A batch of no samples is put as any other.

    Raises
    ------
    PlanMismatchError
        ``plan`` is not the plan the batch carries.
    DumpError
        A column type or a batch-global value the stored form cannot hold (nothing written).
    TransportError
        The store refused a buffer (full, too large, down); what was written is removed.
    """
    store = _store_of(store)
    batch = check_batch(batch, "batch")
    plan = _put_plan(batch, plan)
    step = None if step is None else as_int("step", step, minimum=0)
    record_batch = batch.record_batch
    for field in record_batch.schema:
        if not supported(field.type):
            msg = f"column `{field.name}` of type {field.type} cannot be stored as buffers"
            raise DumpError(msg)
    metadata = encode_metadata(batch.specs, batch._batch_globals, None)
    schema = record_batch.schema.with_metadata({**(record_batch.schema.metadata or {}), **metadata})
    step_name = "x" if step is None else str(step)
    prefix = f"arrow_split/{step_name}/{uuid.uuid4().hex}"
    every = [np.arange(batch.num_samples, dtype=np.int64)]
    partitions = every if plan is None else [np.asarray(rows, np.int64) for rows in plan.partitions]
    order = np.concatenate([np.zeros(0, np.int64), *partitions])
    if np.array_equal(order, np.arange(batch.num_samples)):
        stored = record_batch
    else:  # in plan order: each rank's rows are one run of every buffer
        stored = _gather(batch, order, padded=False).record_batch
    written: list[tuple[str, pa.Buffer]] = []
    kept, columns = [], []
    for position, array in enumerate(stored.columns):
        node, compact = column_buffers(array, f"{prefix}/{position}", written)
        columns.append(node)
        kept.append(compact)
    slots = batch.role_values("adapter_slot")  # a rank's own plan orders by them
    by_slot = [] if slots is None else [slots.astype(np.int64)]
    body = np.concatenate([batch.total_lengths.astype(np.int64), order, *by_slot])
    ref = StoredBatchRef(
        prefix=prefix,
        step=step,
        num_samples=batch.num_samples,
        schema=base64.b64encode(schema.serialize().to_pybytes()).decode(),
        method=None if plan is None else plan.method,
        dp_size=None if plan is None else plan.dp_size,
        fingerprint=None if plan is None else plan.fingerprint,
        bounds=()
        if plan is None
        else tuple(np.concatenate([[0], np.cumsum([len(p) for p in partitions])]).tolist()),
        index=(f"{prefix}/index", 8 * (INDEX_HEADER + len(body))),
        columns=tuple(columns),
    )
    header = np.array([ref.digest, slots is not None], dtype=np.int64)  # never an empty object
    written.append((ref.index[0], pa.py_buffer(np.concatenate([header, body]))))
    keys = [key for key, _ in written]
    try:
        store.put(keys, [buffer for _, buffer in written])
    except TransportError as exc:
        try:
            store.remove(keys)
            cleaned = "what it wrote is removed"
        except TransportError as again:
            cleaned = f"what it wrote could not be removed ({again})"
        msg = f"{_who(step, None)}the put of `{prefix}` failed, {cleaned}: {exc}"
        raise TransportError(msg, step=step, key=prefix, got=exc.got) from exc
    del kept  # the compacted arrays stay alive until the store holds their bytes
    return ref


def _put_plan(batch: RolloutBatch, plan: object) -> Plan | None:
    """The put's plan: ``plan``, else the one the batch carries; the two must agree."""
    carried = batch.plan
    if plan is None:
        return carried
    plan = _parse_plan(batch, plan)
    if carried is not None and carried != plan:
        msg = (
            f"`plan` is a {plan.method} plan of {plan.dp_size} ({plan.fingerprint}) but the batch "
            f"carries a {carried.method} plan of {carried.dp_size} ({carried.fingerprint})"
        )
        fix = "pass no `plan` to put the carried one, or put `batch.with_plan(None)`"
        expected = f"{carried.method} plan of {carried.dp_size}"
        got = f"{plan.method} plan of {plan.dp_size}"
        raise mistake("plan_mismatch", msg, key="plan", expected=expected, got=got, fix=fix)
    return plan


def remove_batch(store: ByteStore, ref: StoredBatchRef) -> None:
    """Remove every object of ``ref`` from ``store`` (once every rank has taken its rows)."""
    _store_of(store).remove(_ref_of(ref).keys)


def _store_of(store: object) -> ByteStore:
    """``store`` if it has a ByteStore's methods, else the ``option_type`` mistake."""
    methods = ("put", "read", "remove")
    if isinstance(store, type) or not all(callable(getattr(store, m, None)) for m in methods):
        expected = "a ByteStore (with put, read and remove)"
        raise mistake("option_type", key="store", expected=expected, got=describe(store))
    return cast(ByteStore, store)


def _ref_of(ref: object) -> StoredBatchRef:
    """``ref`` if it is a stored batch's reference, else the ``not_a_batch`` mistake."""
    if not isinstance(ref, StoredBatchRef):
        expected = "a StoredBatchRef (from put_batch, or StoredBatchRef.from_json)"
        raise mistake("not_a_batch", key="ref", expected=expected, got=describe(ref))
    return ref


def _who(step: int | None, rank: int | None) -> str:
    parts = ([] if step is None else [f"step {step}"]) + (
        [] if rank is None else [f"dp_rank {rank}"]
    )
    return ", ".join(parts) + (": " if parts and rank is None else "")


def take_rank(
    store: ByteStore,
    ref: StoredBatchRef,
    dp_rank: int,
    dp_size: int,
    *,
    balance_data: bool | None = None,
    resplit: bool = False,
    pad_to_dp: bool = False,
    step: int | None = None,
    trust_objects: bool = False,
) -> Shard:
    """Rank ``dp_rank``'s shard of a stored batch, reading only the bytes of its rows.

    Value-equal to :func:`arrow_split.shard_for_rank` of the batch put (with its plan, if it
    was put with one). A batch put without a plan, or with ``resplit`` for another ``dp_size``
    than the put's, is planned here from the stored index (its total lengths) as every rank
    plans it; the rank reads its rows as runs of the stored order.

    Raises
    ------
    PlanError, PlanTypeError
        A bad ``dp_rank`` or ``dp_size``; ``balance_data`` is None for a batch put without a plan.
    PlanMismatchError
        ``balance_data`` is not the put's plan's, or ``dp_size`` not its size (no ``resplit``).
    NotARolloutBatchError
        ``ref`` is not a reference, or not the one the put returned (the stored index holds
        the digest of that one: a reference damaged or of another batch).
    TransportError
        An object is missing (removed, lost with its owner) or the store failed; the key and
        the step are named.
    """
    store, ref = _store_of(store), _ref_of(ref)
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    trust = as_flag("trust_objects", trust_objects)
    resplit, pad = as_flag("resplit", resplit), as_flag("pad_to_dp", pad_to_dp)
    step = ref.step if step is None else as_int("step", step, minimum=0)
    who = _who(step, rank)  # "step S, dp_rank R"
    method = _method(ref, balance_data, size, resplit, who)
    reader = _reader(store, who, step, rank)
    if ref.method is not None and size == ref.dp_size:  # the put's plan: one run of its rows
        return _take_put_plan(ref, rank, reader, who, step, trust)
    whole = np.array([0], dtype=np.int64), np.array([ref.index[1]], dtype=np.int64)
    (index,) = reader([(ref.index[0], *whole)])
    values, slotted = _checked_index(index, ref, who, step, rank)
    total_lengths, stored_order, keys = index_parts(values, ref.num_samples, slotted)
    _check_rows(np.sort(stored_order), ref.num_samples, ref, who)
    plan, lengths = padded_plan(total_lengths, keys, size, method, pad)
    wanted = plan.partitions[rank]
    rows = rank_rows(stored_order, wanted)  # runs of the stored order, back in plan order
    read = _read_runs(ref, rows.starts, rows.ends, reader, trust)
    if rows.moved is not None:
        read = _gather(read, rows.moved, padded=False)
    partition = wanted.copy()
    partition.flags.writeable = False
    return Shard._make(_gather(read, rows.places, pad), partition, lengths, plan.key, rank)


def _take_put_plan(
    ref: StoredBatchRef, rank: int, reader: _Reader, who: str, step: int | None, trust: bool
) -> Shard:
    """The rank's rows of the put's own plan: its part of the index, then one run of rows."""
    n, first, last = ref.num_samples, ref.bounds[rank], ref.bounds[rank + 1]
    starts = np.array([0, 8 * (INDEX_HEADER + n + first)], dtype=np.int64)
    sizes = np.array([8 * (INDEX_HEADER + n), 8 * (last - first)], dtype=np.int64)
    (index,) = reader([(ref.index[0], starts, sizes)])
    values, _ = _checked_index(index, ref, who, step, rank)
    total_lengths, partition = values[:n].copy(), values[n:].copy()
    total_lengths.flags.writeable = partition.flags.writeable = False
    _check_rows(np.sort(partition), n, ref, who)
    run = np.array([first], dtype=np.int64), np.array([last], dtype=np.int64)
    taken = _read_runs(ref, *run, reader, trust)
    order = np.arange(len(partition), dtype=np.int64)
    order.flags.writeable = False
    return Shard._take(taken, order, total_lengths, ref.plan_key, rank, partition=partition)


def _read_runs(
    ref: StoredBatchRef, starts: np.ndarray, ends: np.ndarray, reader: _Reader, trust: bool
) -> RolloutBatch:
    """The stored rows of the runs ``[starts, ends)``, in stored order, as a batch."""
    schema, specs, batch_globals = _decoded(ref)
    nodes = list(zip(ref.columns, schema.types, strict=True))
    arrays = read_rows(nodes, starts, ends, reader)
    record_batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    return RolloutBatch._make(record_batch, specs, batch_globals, trust_objects=trust)


def _method(
    ref: StoredBatchRef, balance_data: bool | None, size: int, resplit: bool, who: str
) -> SplitMethod:
    """The take's plan method, checked against the put's plan (if it was put with one)."""
    if balance_data is None and ref.method is None:
        msg = (
            f"{who}: `balance_data` is None but `{ref.prefix}` was put without a plan to "
            "follow; pass `balance_data=True` or `False`, as every rank does"
        )
        raise PlanError(msg, key="balance_data")
    method = cast(SplitMethod, ref.method) if balance_data is None else method_of(balance_data)
    if ref.method is not None and (method != ref.method or (size != ref.dp_size and not resplit)):
        fix = "pass the put's `dp_size` and `balance_data`" + (
            ", or `resplit=True` to plan it again for this size" if method == ref.method else ""
        )
        msg = (
            f"{who}: asked for a {method} plan of {size} ranks but `{ref.prefix}` was put with a "
            f"{ref.method} plan of {ref.dp_size}; {fix}"
        )
        expected, got = f"{ref.method} plan of {ref.dp_size}", f"{method} plan of {size}"
        raise PlanMismatchError(msg, key=ref.prefix, expected=expected, got=got)
    return method


def _checked_index(
    index: np.ndarray, ref: StoredBatchRef, who: str, step: int | None, rank: int
) -> tuple[np.ndarray, bool]:
    """The index read past its header, if that matches ``ref``; whether adapter slots follow.

    The header holds the digest of the reference the put returned: another one (a reference
    damaged in a way its JSON cannot show, or of another batch) is refused here.
    """
    digest, slotted = index[: 8 * INDEX_HEADER].view(np.int64).tolist()
    size = 8 * (INDEX_HEADER + (3 if slotted else 2) * ref.num_samples)
    if digest != ref.digest or slotted not in (0, 1) or size != ref.index[1]:
        msg = (
            f"{who}: the index `{ref.index[0]}` was written for another reference than this "
            "one: the reference is damaged, or names the objects of another batch"
        )
        raise mistake("not_a_batch", msg, step=step, dp_rank=rank, key="ref")
    return index[8 * INDEX_HEADER :].view(np.int64), bool(slotted)


def _check_rows(rows: np.ndarray, n: int, ref: StoredBatchRef, who: str) -> None:
    """Sorted stored rows read from the index: each in the batch, none twice."""
    if len(rows) and (rows[0] < 0 or rows[-1] >= n or np.any(np.diff(rows) == 0)):
        msg = f"{who}: the index `{ref.index[0]}` holds rows outside the batch or twice"
        raise TransportError(msg)


def _decoded(ref: StoredBatchRef) -> tuple[pa.Schema, Mapping[str, Any], Mapping[str, object]]:
    """The schema (the library's metadata removed), the specs and the batch-global values.

    Checked against each other here (:func:`decode_metadata`): a batch of them is trusted.
    """
    source = f"stored batch `{ref.prefix}`"
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(ref.schema)))
    except (ValueError, pa.ArrowInvalid) as exc:
        msg = f"{source}: its schema does not decode: {exc}"
        raise NotARolloutBatchError(msg) from None
    try:
        metadata = decode_metadata(schema, source)
    except DumpError as exc:
        raise NotARolloutBatchError(str(exc)) from None
    if len(schema) != len(ref.columns):
        msg = f"{source}: its schema has {len(schema)} columns, its layout {len(ref.columns)}"
        raise NotARolloutBatchError(msg)
    return (
        schema.with_metadata(metadata.kept) if metadata.kept else schema.remove_metadata(),
        MappingProxyType(metadata.specs),
        MappingProxyType(metadata.batch_globals),
    )


_Reader = Callable[[list[Ranges]], list[np.ndarray]]


def _reader(store: ByteStore, who: str, step: int | None, rank: int) -> _Reader:
    """A round of reads into one fresh array: each request's ranges back to back."""

    def read(requests: list[Ranges]) -> list[np.ndarray]:
        totals = [int(sizes.sum()) for _, _, sizes in requests]
        into = np.empty(sum(totals), dtype=np.uint8)
        reads, base = [], 0
        for (key, starts, sizes), total in zip(requests, totals, strict=True):
            targets = base + np.cumsum(sizes) - sizes
            keep = sizes > 0  # an empty range is never asked for
            if keep.any():
                reads.append((key, starts[keep], sizes[keep], targets[keep]))
            base += total
        try:
            if reads:
                store.read(into, reads)
        except TransportError as exc:
            msg = (
                f"{who}: {exc}; a stored batch lives until it is removed or the client that "
                "put it closes: keep that client until every rank has taken its rows"
            )
            raise TransportError(msg, step=step, dp_rank=rank, key=exc.key, got=exc.got) from exc
        ends = np.cumsum(totals)
        return [into[end - total : end] for end, total in zip(ends, totals, strict=True)]

    return read
