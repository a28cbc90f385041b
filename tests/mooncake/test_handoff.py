"""The hand-off through a real Mooncake store: each rank reads only its rows' byte ranges.

Differential against :func:`arrow_split.shard_for_rank`; faults (a full store, a value too
large, a removed object, a client gone, a master down) are typed errors naming key and step.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from arrow_split import (
    NotARolloutBatchError,
    OptionError,
    OptionTypeError,
    PlanMismatchError,
    RolloutBatch,
    TransportError,
    shard_for_rank,
)

try:  # the wheel, or libibverbs1 it links, missing: skipped with the reason
    import arrow_split.mooncake  # noqa: F401
except ImportError as exc:
    pytest.skip(str(exc), allow_module_level=True)

from arrow_split.mooncake import (
    MooncakeBatchRef,
    MooncakeStore,
    connect,
    local_master,
    put_batch,
    remove,
    take_rank,
)
from arrow_split.mooncake._client import GAP_BYTES
from arrow_split.testing import (
    WORKLOADS,
    assert_shards_equal,
    make_multimodal_train_data,
    make_train_data,
)
from tests.error_facts import raises_facts

pytestmark = pytest.mark.mooncake

FORMAT = "arrow_split.stored_batch/2"  # a reference's format, as its JSON names it

EVERY_KIND = dataclasses.replace(WORKLOADS["tiny"], columns="every")


@pytest.mark.parametrize("balance_data", [False, True])
@pytest.mark.parametrize("dp_size", [1, 4])
def test_every_rank_takes_what_shard_for_rank_gives(
    writer: Any, reader: Any, balance_data: bool, dp_size: int
) -> None:
    batch = RolloutBatch.from_train_data(make_train_data(EVERY_KIND))
    ref = put_batch(writer, batch, dp_size=dp_size, balance_data=balance_data, step=1)
    try:
        text = ref.to_json()  # what crosses the wire
        for rank in range(dp_size):
            shard = take_rank(reader, text, rank, dp_size, balance_data=balance_data)
            expected = shard_for_rank(batch, rank, dp_size, balance_data=balance_data)
            assert_shards_equal(shard, expected)
            assert shard.plan_key == expected.plan_key
            assert np.array_equal(shard.partition, expected.partition)
    finally:
        remove(writer, ref)


def test_a_rank_plans_for_its_own_size_reading_about_its_share(writer: Any, reader: Any) -> None:
    batch = RolloutBatch.from_train_data(make_train_data(EVERY_KIND))
    store = MooncakeStore(reader)
    for ref in (
        put_batch(writer, batch, step=1),  # no plan: the ranks' size is not known at the put
        put_batch(writer, batch, dp_size=2, balance_data=True, step=1),
    ):
        text = ref.to_json()
        for rank in range(4):
            store.bytes_read = 0
            shard = take_rank(store, text, rank, 4, balance_data=True, resplit=True)
            expected = shard_for_rank(batch, rank, 4, balance_data=True)
            assert_shards_equal(shard, expected)
            assert shard.plan_key == expected.plan_key
            share = shard.nbytes + 16 * batch.num_samples  # its rows, the whole index
            assert store.bytes_read <= 1.1 * share + GAP_BYTES * store.gaps_read
        remove(writer, ref)


def test_objects_stored_once_and_a_train_data_dict(writer: Any, reader: Any) -> None:
    data = make_multimodal_train_data(4, 2, 256)
    ref = put_batch(writer, data, dp_size=2, balance_data=False)
    batch = RolloutBatch.from_train_data(data)
    for rank in range(2):
        shard = take_rank(reader, ref, rank, 2, trust_objects=True)
        assert_shards_equal(shard, shard_for_rank(batch, rank, 2, balance_data=False))
    remove(writer, ref)


def test_a_rank_reads_about_its_share(writer: Any, reader: Any) -> None:
    batch = RolloutBatch.from_train_data(make_train_data(WORKLOADS["small"]))
    ref = put_batch(writer, batch, dp_size=8, balance_data=True, step=2)
    store = MooncakeStore(reader)
    for rank in range(8):
        store.bytes_read = 0
        shard = take_rank(store, ref, rank, 8)
        share = shard.nbytes + 16 * len(shard.partition) + 8 * batch.num_samples
        assert store.bytes_read <= 1.1 * share
    remove(writer, ref)


def test_a_removed_batch_is_an_error_naming_key_and_step(writer: Any, reader: Any) -> None:
    batch = RolloutBatch.from_train_data(make_train_data(WORKLOADS["tiny"]))
    ref = put_batch(writer, batch, dp_size=2, balance_data=False, step=9)
    remove(writer, ref)
    remove(writer, ref)  # a second removal finds nothing: no error
    with pytest.raises(TransportError) as caught:
        take_rank(reader, ref, 0, 2)
    _assert_lost(caught.value, ref, step=9, dp_rank=0, status=-704)


def test_another_plan_or_a_foreign_reference_is_refused(writer: Any, reader: Any) -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2], [3], [4]]})
    ref = put_batch(writer, batch, dp_size=2, balance_data=False)
    mismatch = {"expected": "strided plan of 2", "got": "strided plan of 4"}
    with raises_facts(PlanMismatchError, key=ref.prefix, **mismatch):
        take_rank(reader, ref, 0, 4)
    with raises_facts(NotARolloutBatchError, key="ref", expected=repr(FORMAT), got="1"):
        take_rank(reader, '{"format": 1}', 0, 2)
    with raises_facts(NotARolloutBatchError, key="ref", got="int"):
        take_rank(reader, 42, 0, 2)  # type: ignore[arg-type]
    remove(writer, ref)


def _assert_lost(
    error: TransportError, ref: MooncakeBatchRef, *, step: int, dp_rank: int, status: int
) -> None:
    """A take's read failed: its step and rank, an object of the batch, the store's status."""
    assert (error.step, error.dp_rank, error.got) == (step, dp_rank, str(status)), repr(error)
    assert str(error.key).startswith(f"{ref.prefix}/"), repr(error)
    assert error.key.startswith(f"arrow_split/{step}/")


def _assert_put_failed(error: TransportError, *, step: int | None, status: set[int]) -> None:
    """A put failed: its step, the batch's prefix (the error's key), the store's status."""
    assert (error.step, error.dp_rank) == (step, None), repr(error)
    assert error.got in {str(code) for code in status}, repr(error)
    step_name = "x" if step is None else str(step)
    assert error.key is not None
    assert error.key.startswith(f"arrow_split/{step_name}/")


def test_an_existing_key_is_never_replaced(writer: Any) -> None:
    store = MooncakeStore(writer)
    key = f"arrow_split/test/{time.monotonic_ns()}"
    store.put([key], [pa.py_buffer(b"first")])
    with raises_facts(TransportError, key=key, got="1"):  # found: the key exists
        store.put([key], [pa.py_buffer(b"other")])
    assert writer.get(key) == b"first"
    store.remove([key])


def _gone(client: Any, error: pytest.ExceptionInfo[TransportError]) -> bool:
    """Whether no object of the failed put (its prefix, the error's key) is in the store."""
    prefix = error.value.key
    assert prefix is not None
    keys = [f"{prefix}/{column}.{buffer}" for column in range(12) for buffer in range(3)]
    return set(client.batch_is_exist([*keys, f"{prefix}/index"])) == {0}


def test_a_full_store_or_a_value_too_large_leaves_nothing_behind() -> None:
    batch = RolloutBatch.from_train_data(make_train_data(WORKLOADS["small"]))
    with local_master() as master:
        client = connect(master.address, segment_bytes=16 * 2**20)  # the least a client lends
        try:
            refs = [put_batch(client, batch, dp_size=2, balance_data=False) for _ in range(3)]
            with pytest.raises(TransportError) as full:
                put_batch(client, batch, dp_size=2, balance_data=False, step=4)
            _assert_put_failed(full.value, step=4, status={-200})  # no space left
            assert _gone(client, full)
            remove(client, refs.pop())
            refs.append(put_batch(client, batch, dp_size=2, balance_data=False))  # room again
            huge = {"tokens": [np.zeros(5 * 2**20, dtype=np.int32)]}  # one 20 MiB buffer
            with pytest.raises(TransportError) as big:
                put_batch(client, huge, dp_size=1, balance_data=False, step=5)
            _assert_put_failed(big.value, step=5, status={-200, -600})  # no room, or too large
            assert _gone(client, big)
            for rank in range(2):  # the batches put before are intact
                assert take_rank(client, refs[0], rank, 2).num_samples == 128
            for ref in refs:
                remove(client, ref)
        finally:
            client.close()


def test_the_client_that_put_gone_is_an_error_not_empty_data(master: Any, reader: Any) -> None:
    batch = RolloutBatch.from_train_data(make_train_data(WORKLOADS["tiny"]))
    owner = connect(master.address, segment_bytes=16 * 2**20)
    ref = put_batch(owner, batch, dp_size=2, balance_data=False, step=6)
    owner.close()  # its segment, and the batch in it, leave the store
    with pytest.raises(TransportError) as caught:
        take_rank(reader, ref, 1, 2)
    _assert_lost(caught.value, ref, step=6, dp_rank=1, status=-704)  # no such object


def test_a_master_that_dies_mid_step_is_an_error_within_seconds() -> None:
    batch = RolloutBatch.from_train_data(make_train_data(WORKLOADS["tiny"]))
    with local_master() as master:
        client = connect(master.address, segment_bytes=16 * 2**20)
        ref = put_batch(client, batch, dp_size=2, balance_data=False, step=8)
        take_rank(client, ref, 0, 2)
        master.stop()
        started = time.monotonic()
        with pytest.raises(TransportError) as caught:
            take_rank(client, ref, 1, 2)
        _assert_lost(caught.value, ref, step=8, dp_rank=1, status=-900)  # the master is down
        with pytest.raises(TransportError) as caught:
            put_batch(client, batch, dp_size=2, balance_data=False)
        _assert_put_failed(caught.value, step=None, status={-900})
        assert time.monotonic() - started < 60  # bounded: no retry loop
        client.close()


def test_no_master_is_an_error_within_seconds() -> None:
    with local_master() as master:
        address = master.address
    with pytest.raises(TransportError) as caught:
        connect(address)
    assert (caught.value.key, caught.value.step, caught.value.dp_rank) == (address, None, None)
    assert caught.value.got is not None
    assert int(caught.value.got) != 0


def test_a_process_with_no_ray_takes_its_rows_from_the_json(
    master: Any, writer: Any, tmp_path: Any
) -> None:
    batch = RolloutBatch.from_train_data(make_train_data(WORKLOADS["tiny"]))
    ref = put_batch(writer, batch, dp_size=2, balance_data=True, step=3)
    (tmp_path / "ref.json").write_text(ref.to_json())
    script = f"""
import sys
from arrow_split.mooncake import MooncakeBatchRef, connect, take_rank
client = connect({master.address!r}, segment_bytes=0)
ref = MooncakeBatchRef.from_json(open({str(tmp_path / "ref.json")!r}).read())
shard = take_rank(client, ref, 1, 2)
print(shard.num_samples, shard.partition.tolist(), "ray" in sys.modules)
client.close()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    expected = shard_for_rank(batch, 1, 2, balance_data=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == (
        f"{expected.num_samples} {expected.partition.tolist()} False"
    )
    assert isinstance(MooncakeBatchRef.from_json(ref.to_json()), MooncakeBatchRef)
    remove(writer, ref)


def test_a_segment_mooncake_cannot_lend_is_refused_before_connecting() -> None:
    facts = {"expected": "0 or at least 16777216", "got": str(2**20)}
    with raises_facts(OptionError, key="segment_bytes", **facts):
        connect("127.0.0.1:1", segment_bytes=2**20)


def test_close_ranges_are_read_as_one_span_and_copied_out_exactly(writer: Any) -> None:
    store = MooncakeStore(writer)
    key = f"arrow_split/test/{time.monotonic_ns()}"
    blob = np.random.default_rng(0).integers(0, 256, 1 << 16, dtype=np.uint8)
    store.put([key], [pa.py_buffer(blob)])
    starts = np.array([9000, 0, 8, 8, 40000, 200, 9100], dtype=np.int64)  # unsorted, overlapping
    sizes = np.array([50, 8, 16, 4, 1000, 7, 3], dtype=np.int64)
    targets = np.cumsum(sizes) - sizes
    into = np.zeros(int(sizes.sum()), dtype=np.uint8)
    store.read(into, [(key, starts, sizes, targets)])
    expected = np.concatenate([blob[a : a + z] for a, z in zip(starts, sizes, strict=True)])
    assert np.array_equal(into, expected)
    assert store.ranges_read == 3  # [0, 207), [9000, 9103), [40000, 41000)
    assert store.gaps_read == 4
    store.remove([key])


def test_a_batch_of_no_samples_is_put_and_taken(writer: Any, reader: Any) -> None:
    batch = RolloutBatch.from_train_data({"tokens": [], "adapter_slots": []})
    for ref in (put_batch(writer, batch), put_batch(writer, batch, dp_size=2, step=1)):
        for rank in range(2):
            shard = take_rank(reader, ref.to_json(), rank, 2, balance_data=False)
            expected = shard_for_rank(batch, rank, 2, balance_data=False)
            assert_shards_equal(shard, expected)
            assert shard.plan_key == expected.plan_key
        remove(writer, ref)


_AFTER_CLOSE = """
import numpy as np
from arrow_split import ArrowSplitError
from arrow_split.mooncake import MooncakeStore, connect, put_batch, remove, take_rank
driver = connect({address!r}, segment_bytes=16 * 2**20)
rank = connect({address!r}, segment_bytes=0)
ref = put_batch(driver, {{"tokens": [[1], [2]]}}, dp_size=2)
print("closed", driver.close(), driver.close(), rank.close(), rank.close(), flush=True)
calls = {{
    "put": lambda: put_batch(driver, {{"tokens": [[1]]}}),
    "remove": lambda: remove(driver, ref),
    "take": lambda: take_rank(rank, ref, 0, 2),
    "read": lambda: MooncakeStore(rank).read(np.zeros(8, np.uint8), []),
}}
for name, call in calls.items():
    try:
        call()
        print(name, "returned", flush=True)
    except ArrowSplitError as error:
        print(name, type(error).__name__, error.key, error.mistake, flush=True)
"""


def test_a_call_on_a_closed_client_is_refused_before_mooncake_sees_it(master: Any) -> None:
    script = _AFTER_CLOSE.format(address=master.address)  # a crash would end the process
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "closed 0 0 0 0",  # a second close does nothing
        "put OptionError client option_value",
        "remove OptionError client option_value",
        "take OptionError client option_value",
        "read OptionError store option_value",
    ]


def test_arguments_of_the_wrong_type_are_refused_before_mooncake_sees_them(writer: Any) -> None:
    with raises_facts(OptionTypeError, key="master", mistake="option_type", got="int 1234"):
        connect(1234)  # type: ignore[arg-type]
    with raises_facts(OptionTypeError, key="protocol", mistake="option_type"):
        connect("127.0.0.1:1", protocol=None)  # type: ignore[arg-type]
    with raises_facts(OptionError, key="balance_data", mistake="option_value", got="True"):
        put_batch(writer, {"tokens": [[1], [2]]}, balance_data=True)  # no plan to balance
