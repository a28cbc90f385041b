"""A batch put as its Arrow buffers into a byte store; each rank reads only its rows' bytes.

Differential: every rank's :func:`take_rank` equals :func:`shard_for_rank` of the same batch.
Faults: a full store, a missing object, a corrupt reference: typed errors, nothing left behind.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arrow_split import (
    ColumnSpec,
    NotARolloutBatchError,
    OptionError,
    OptionTypeError,
    PlanError,
    PlanMismatchError,
    PlanTypeError,
    RolloutBatch,
    TransportError,
    shard_for_rank,
)
from arrow_split.stores import (
    MemoryStore,
    Read,
    StoredBatchRef,
    put_batch,
    remove_batch,
    take_rank,
)
from arrow_split.testing import (
    WORKLOADS,
    assert_shards_equal,
    make_multimodal_train_data,
    make_train_data,
)
from arrow_split.testing.strategies import train_data
from tests.error_facts import raises_facts
from tests.reference_split import normalize, reference_split


class CountingStore(MemoryStore):
    """A memory store that counts the bytes each read copies."""

    def __init__(self, capacity: int | None = None) -> None:
        super().__init__(capacity)
        self.bytes_read = 0

    def read(self, into: np.ndarray, reads: Sequence[Read]) -> None:
        self.bytes_read += sum(int(sizes.sum()) for _, _, sizes, _ in reads)
        super().read(into, reads)


class NoEmptyStore(CountingStore):
    """A store that refuses an empty object (as Mooncake does) and is never asked an empty range."""

    def put(self, keys: Sequence[str], buffers: Sequence[pa.Buffer]) -> None:
        for key, buffer in zip(keys, buffers, strict=True):
            if buffer.size == 0:
                raise TransportError(f"`{key}` is empty", key=key, got="-600")
        super().put(keys, buffers)

    def read(self, into: np.ndarray, reads: Sequence[Read]) -> None:
        assert all((sizes > 0).all() for _, _, sizes, _ in reads), "an empty range asked for"
        super().read(into, reads)


def _every_rank(batch: RolloutBatch, dp_size: int, balance_data: bool) -> None:
    store = MemoryStore()
    ref = put_batch(store, batch, batch.make_plan(dp_size, balance_data=balance_data), step=3)
    ref = StoredBatchRef.from_json(ref.to_json())
    for rank in range(dp_size):
        shard = take_rank(store, ref, rank, dp_size, balance_data=balance_data)
        expected = shard_for_rank(batch, rank, dp_size, balance_data=balance_data)
        assert_shards_equal(shard, expected)
        assert shard.plan_key == expected.plan_key
        assert np.array_equal(shard.partition, expected.partition)
        assert np.array_equal(shard.batch_total_lengths, expected.batch_total_lengths)


@st.composite
def cases(draw: st.DrawFn) -> tuple[RolloutBatch, int, bool]:
    batch = RolloutBatch.from_train_data(draw(train_data()))
    n = batch.num_samples
    balance_data = draw(st.booleans()) and n > 0
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    size = draw(st.sampled_from(divisors)) if balance_data else draw(st.integers(1, n + 3))
    return batch, size, balance_data


@given(cases())
@example((RolloutBatch.from_train_data({"tokens": []}), 3, False))
def test_every_rank_takes_what_shard_for_rank_gives(case: tuple[RolloutBatch, int, bool]) -> None:
    _every_rank(*case)


@pytest.mark.parametrize("balance_data", [False, True])
def test_generated_batches_of_every_kind(balance_data: bool) -> None:
    config = dataclasses.replace(WORKLOADS["tiny"], columns="every")
    _every_rank(RolloutBatch.from_train_data(make_train_data(config)), 4, balance_data)
    multimodal = make_multimodal_train_data(4, 2, 64)
    _every_rank(RolloutBatch.from_train_data(multimodal), 4, balance_data)


def test_a_rank_reads_about_its_share_of_the_bytes() -> None:
    batch = RolloutBatch.from_train_data(make_train_data(WORKLOADS["small"]))
    store = CountingStore()
    dp_size = 8
    ref = put_batch(store, batch, batch.make_plan(dp_size, balance_data=True))
    for rank in range(dp_size):
        store.bytes_read = 0
        shard = take_rank(store, ref, rank, dp_size)
        share = shard.nbytes + 16 * len(shard.partition) + 8 * batch.num_samples
        assert store.bytes_read <= 1.1 * share


def test_a_full_store_keeps_nothing_of_a_failed_put() -> None:
    batch = RolloutBatch.from_train_data(make_train_data(WORKLOADS["tiny"]))
    store = MemoryStore(capacity=batch.nbytes // 2)
    with pytest.raises(TransportError) as caught:
        put_batch(store, batch, batch.make_plan(2, balance_data=False), step=5)
    assert str(caught.value.key).startswith("arrow_split/5/")  # the put's prefix names the step
    assert (caught.value.step, caught.value.dp_rank) == (5, None)
    assert caught.value.__cause__.key.startswith(caught.value.key)  # the object that did not fit
    assert store.objects == {}


def test_a_removed_object_is_a_transport_error_naming_key_and_step() -> None:
    batch = RolloutBatch.from_train_data(make_train_data(WORKLOADS["tiny"]))
    store = MemoryStore()
    ref = put_batch(store, batch, batch.make_plan(2, balance_data=False), step=7)
    gone = ref.keys[-1]
    del store.objects[gone]
    with raises_facts(TransportError, key=gone, step=7, dp_rank=1):
        take_rank(store, ref, 1, 2)
    with raises_facts(TransportError, key=gone, step=8, dp_rank=0):  # the take's step named
        take_rank(store, ref, 0, 2, step=8)


def test_another_plan_is_a_mismatch() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2], [3], [4]]})
    store = MemoryStore()
    ref = put_batch(store, batch, batch.make_plan(2, balance_data=False))
    with raises_facts(PlanMismatchError, key=ref.prefix, expected="strided plan of 2"):
        take_rank(store, ref, 0, 4)
    with raises_facts(PlanMismatchError, key=ref.prefix, expected="strided plan of 2"):
        take_rank(store, ref, 0, 2, balance_data=True)


@st.composite
def resplit_cases(draw: st.DrawFn) -> tuple[dict, int | None, bool, int, bool]:
    """A batch, the size it was put for (``None``: no plan), and a rank's own size and method."""
    data = draw(train_data())
    n = len(data["tokens"])
    balance_data = draw(st.booleans()) and n > 0
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    sizes = st.sampled_from(divisors) if balance_data else st.integers(1, n + 3)
    put_for, size = draw(st.one_of(st.none(), sizes)), draw(sizes)
    return data, put_for, balance_data, size, draw(st.booleans())


@given(resplit_cases())
@example(({"tokens": []}, None, False, 3, False))
@example(({"tokens": [[1], [2, 3], [4]]}, 2, False, 2, True))  # padding copies a row read early
def test_a_rank_plans_a_batch_put_for_another_size_as_the_classic_split(
    case: tuple[dict, int | None, bool, int, bool],
) -> None:
    data, put_for, balance_data, size, pad = case
    batch = RolloutBatch.from_train_data(data)
    plan = None if put_for is None else batch.make_plan(put_for, balance_data=balance_data)
    store = MemoryStore()
    ref = StoredBatchRef.from_json(put_batch(store, batch, plan).to_json())
    planned = batch if plan is None else batch.with_plan(plan)
    expected = [] if pad else reference_split(data, size, balance_data)
    for rank in range(size):
        shard = take_rank(
            store, ref, rank, size, balance_data=balance_data, resplit=True, pad_to_dp=pad
        )
        same = shard_for_rank(
            planned, rank, size, balance_data=balance_data, resplit=True, pad_to_dp=pad
        )
        assert_shards_equal(shard, same)
        assert shard.plan_key == same.plan_key
        assert np.array_equal(shard.batch_total_lengths, same.batch_total_lengths)
        if expected:  # the plain-Python classic split's rows, in its order
            actual = shard.to_train_data(layout="rollout")
            assert {key: normalize(actual[key]) for key in expected[rank]} == expected[rank]


def test_a_rank_plans_by_adapter_slot_as_shard_for_rank() -> None:
    spec = ColumnSpec("adapter_slots", "per_sample_scalar", pa.int64(), role="adapter_slot")
    data = {"tokens": [[1] * (i % 5 + 1) for i in range(12)], "adapter_slots": [2, 0, 1] * 4}
    batch = RolloutBatch.from_train_data(data, specs=[spec])
    store = MemoryStore()
    ref = put_batch(store, batch, batch.make_plan(3, balance_data=True))
    for rank in range(4):
        shard = take_rank(store, ref, rank, 4, resplit=True)
        assert_shards_equal(shard, shard_for_rank(batch, rank, 4, balance_data=True))


def test_a_resplit_rank_reads_about_its_share_of_the_bytes() -> None:
    batch = RolloutBatch.from_train_data(make_train_data(WORKLOADS["small"]))
    store = CountingStore()
    for plan in (None, batch.make_plan(4, balance_data=True)):
        ref = put_batch(store, batch, plan)
        for rank in range(8):
            store.bytes_read = 0
            shard = take_rank(store, ref, rank, 8, balance_data=True, resplit=True)
            share = shard.nbytes + 16 * batch.num_samples  # its rows, the whole index
            assert store.bytes_read <= 1.1 * share


def test_a_batch_put_without_a_plan_needs_the_method_and_resplit_is_opt_in() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2], [3], [4]]})
    store = MemoryStore()
    ref = put_batch(store, batch, step=2)
    assert ref.plan_key is None
    assert json.loads(ref.to_json())["plan"] is None
    with pytest.raises(PlanError) as missing:
        take_rank(store, ref, 0, 2)
    assert missing.value.key == "balance_data"
    planned = put_batch(store, batch, batch.make_plan(2, balance_data=False))
    with pytest.raises(PlanMismatchError):
        take_rank(store, planned, 0, 4)
    with pytest.raises(PlanMismatchError):  # another method: never planned again
        take_rank(store, planned, 0, 4, balance_data=True, resplit=True)
    assert take_rank(store, planned, 3, 4, resplit=True).partition.tolist() == [3]


def test_the_arguments_of_a_take_get_the_classes_of_the_mistake_table() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2], [3], [4]]})
    store = MemoryStore()
    ref = put_batch(store, batch, batch.make_plan(2, balance_data=False))
    with raises_facts(PlanError, key="dp_rank", got="2", mistake="plan_value"):
        take_rank(store, ref, 2, 2)
    with raises_facts(PlanTypeError, key="dp_size", mistake="plan_type"):
        take_rank(store, ref, 0, 2.0)  # type: ignore[arg-type]
    with raises_facts(OptionTypeError, key="trust_objects", mistake="flag_type"):
        take_rank(store, ref, 0, 2, trust_objects="no")  # type: ignore[arg-type]


def test_a_column_type_the_layout_cannot_hold_is_refused_before_the_put() -> None:
    from arrow_split._codecs._ranges import supported

    assert not supported(pa.null())
    assert supported(pa.dictionary(pa.int32(), pa.large_binary()))


@pytest.mark.parametrize(
    ("edit", "member"),
    [
        (lambda members: members.update(format="other/1"), "ref"),
        (lambda members: members.update(step="3"), "step"),
        (lambda members: members["plan"].update(bounds=[0, 1]), "plan"),
        (lambda members: members.pop("columns"), "columns"),
        (lambda members: members.update(index=["k", 3]), "index"),
    ],
)
def test_a_corrupt_reference_is_refused(edit: object, member: str) -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2], [3], [4]]})
    members = json.loads(
        put_batch(MemoryStore(), batch, batch.make_plan(2, balance_data=False)).to_json()
    )
    edit(members)  # type: ignore[operator]
    with raises_facts(NotARolloutBatchError, key=member):  # the member named
        StoredBatchRef.from_json(json.dumps(members))
    with pytest.raises(NotARolloutBatchError):
        StoredBatchRef.from_json("{not json")


def test_a_reference_of_another_format_is_refused_once_naming_the_format() -> None:
    expected = repr("arrow_split.stored_batch/2")
    with raises_facts(NotARolloutBatchError, key="ref", got="2", expected=expected) as caught:
        StoredBatchRef.from_json('{"format": 2}')
    assert caught.value.__context__ is None  # refused as is, not wrapped in a second refusal


def _runs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    if not len(rows):
        return rows, rows
    return rows[np.concatenate([[0], cut])], rows[np.concatenate([cut - 1, [len(rows) - 1]])] + 1


@given(train_data(), st.data())
def test_any_runs_of_rows_read_back_as_a_take_of_them(data: dict, draw: st.DataObject) -> None:
    from arrow_split._codecs._ranges import column_buffers, read_rows

    record_batch = RolloutBatch.from_train_data(data).record_batch
    n = record_batch.num_rows
    picked = draw.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    rows = np.flatnonzero(np.array(picked, dtype=bool)).astype(np.int64)
    stored: dict[str, bytes] = {}
    nodes = []
    for position, array in enumerate(record_batch.columns):
        written: list = []
        node, _ = column_buffers(array, f"c{position}", written)
        stored.update((key, buffer.to_pybytes()) for key, buffer in written)
        nodes.append((node, array.type))

    def reader(requests: list) -> list[np.ndarray]:
        return [
            np.frombuffer(
                b"".join(stored[key][a : a + z] for a, z in zip(starts, sizes, strict=True)),
                dtype=np.uint8,
            )
            for key, starts, sizes in requests
        ]

    for got, array in zip(
        read_rows(nodes, *_runs(rows), reader), record_batch.columns, strict=True
    ):
        got.validate(full=True)
        assert got.equals(array.take(pa.array(rows, type=pa.int64())))


def test_a_store_or_a_reference_of_another_type_is_a_typed_mistake_at_every_door() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2]]})
    store = MemoryStore()
    ref = put_batch(store, batch)
    for wrong in ({}, MemoryStore):  # a class has the methods, unbound: not a store
        with raises_facts(OptionTypeError, key="store", mistake="option_type"):
            put_batch(wrong, batch)  # type: ignore[arg-type]
    with raises_facts(OptionTypeError, key="store", mistake="option_type"):
        take_rank(None, ref, 0, 1, balance_data=False)  # type: ignore[arg-type]
    for door in (
        lambda: take_rank(store, ref.to_json(), 0, 1),  # type: ignore[arg-type]
        lambda: remove_batch(store, ref.to_json()),  # type: ignore[arg-type]
    ):
        with raises_facts(NotARolloutBatchError, key="ref", mistake="not_a_batch"):
            door()
    remove_batch(store, ref)
    assert store.objects == {}


@pytest.mark.parametrize("data", [{"tokens": []}, {"tokens": [], "adapter_slots": []}])
def test_a_batch_of_no_samples_needs_no_empty_object(data: dict) -> None:
    batch = RolloutBatch.from_train_data(data)
    store = NoEmptyStore()
    for plan in (None, batch.make_plan(2, balance_data=False)):
        ref = StoredBatchRef.from_json(put_batch(store, batch, plan).to_json())
        for rank in range(2):
            shard = take_rank(store, ref, rank, 2, balance_data=False)
            expected = shard_for_rank(batch, rank, 2, balance_data=False)
            assert_shards_equal(shard, expected)
            assert shard.plan_key == expected.plan_key
        remove_batch(store, ref)
    assert store.objects == {}


def test_adapter_slots_of_no_samples_are_planned_by_as_shard_for_rank() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [], "adapter_slots": []})
    store = MemoryStore()
    shard = take_rank(store, put_batch(store, batch), 0, 1, balance_data=False)
    assert shard.plan_key == shard_for_rank(batch, 0, 1, balance_data=False).plan_key


@pytest.mark.parametrize("put_for", [None, 8])
def test_a_rank_reads_only_the_pickled_objects_of_its_rows(put_for: int | None) -> None:
    data = make_multimodal_train_data(8, 2, 4096, shared=False)  # 8 distinct objects, 16 rows
    batch = RolloutBatch.from_train_data(data)
    store = CountingStore()
    plan = None if put_for is None else batch.make_plan(put_for, balance_data=False)
    ref = put_batch(store, batch, plan)
    for rank in range(8):
        store.bytes_read = 0
        shard = take_rank(store, ref, rank, 8, balance_data=False)
        assert_shards_equal(shard, shard_for_rank(batch, rank, 8, balance_data=False))
        share = shard.nbytes + 16 * batch.num_samples + 64  # its rows, the index, its header
        assert store.bytes_read <= 1.1 * share  # not every object of the batch


def test_a_put_follows_the_plan_the_batch_carries() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1] * 5, [2], [3] * 3, [4] * 2]})
    carried = batch.with_plan(batch.make_plan(2, balance_data=True))
    store = MemoryStore()
    ref = put_batch(store, carried)
    assert carried.plan is not None
    assert ref.plan_key == carried.plan.key
    for rank in range(2):
        expected = shard_for_rank(carried, rank, 2, balance_data=None)
        assert_shards_equal(take_rank(store, ref, rank, 2), expected)
    facts = {"expected": "balanced plan of 2", "got": "strided plan of 2"}
    with raises_facts(PlanMismatchError, key="plan", mistake="plan_mismatch", **facts):
        put_batch(store, carried, batch.make_plan(2, balance_data=False))
    assert put_batch(store, carried, carried.plan).plan_key == carried.plan.key  # the same: fine


def test_a_capacity_is_parsed_by_the_constructor() -> None:
    with raises_facts(OptionTypeError, key="capacity", mistake="option_type", got="str '100'"):
        MemoryStore(capacity="100")  # type: ignore[arg-type]
    with raises_facts(OptionError, key="capacity", mistake="option_value", got="-1"):
        MemoryStore(capacity=-1)
    assert MemoryStore(capacity=np.int64(100)).capacity == 100  # type: ignore[arg-type]


def test_a_stored_dictionary_index_past_its_entries_is_a_transport_error() -> None:
    batch = RolloutBatch.from_train_data(make_multimodal_train_data(2, 2, 64))
    store = MemoryStore()
    ref = put_batch(store, batch)
    (indices,) = [key for key in store.objects if key.endswith(".i.1")]  # the rows' indices
    store.objects[indices] = np.full(batch.num_samples, 99, np.int32).tobytes()
    with raises_facts(TransportError, got="99", mistake="transport"):
        take_rank(store, ref, 0, 1, balance_data=False)
