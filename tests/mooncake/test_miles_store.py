"""miles' Mooncake store backend under the drop-in, on a real master (the stand-in miles).

The rollout side puts a step's train-data dict once through ``MooncakeObjectStore.put`` (one
Arrow batch, no plan, the reference miles' ``Box`` holding plain JSON); each rank's
``process_rollout_data`` reads only its rows for its own ``dp_size`` and equals the classic split;
``remove`` leaves nothing in the store; ``undo()`` gives miles its own methods back.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from argparse import Namespace
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from arrow_split import RolloutBatch, TransportError
from arrow_split.compat import miles as compat
from arrow_split.stores import Read, StoredBatchRef
from arrow_split.testing import WORKLOADS, make_train_data
from tests.reference_split import normalize, reference_split

try:  # the wheel, or libibverbs1 it links, missing: skipped with the reason
    from arrow_split.mooncake import MooncakeStore
    from arrow_split.mooncake._client import GAP_BYTES
except ImportError as exc:
    pytest.skip(str(exc), allow_module_level=True)

pytestmark = pytest.mark.mooncake

REPO_ROOT = Path(__file__).resolve().parents[2]
STANDIN = str(REPO_ROOT / "tests" / "standin")
SEGMENT_BYTES = 32 * 2**20


@pytest.fixture
def miles_on_mooncake(master: Any) -> Iterator[tuple[Namespace, Any]]:
    """The stand-in miles with the drop-in installed, its store singleton on the master."""
    sys.path.insert(0, STANDIN)
    from miles.utils import object_store

    installation = compat.install()
    args = Namespace(
        balance_data=True,
        delay_split_train_data_by_dp=True,
        object_store_backend="mooncake",
        mooncake_store_init_kwargs={
            "master_server_address": master.address,
            "global_segment_size": SEGMENT_BYTES,
        },
    )
    trainer = object_store.init_instance(args, contribute_segment=True)  # lends the memory
    try:
        yield args, object_store
    finally:
        installation.undo()
        trainer.close()
        object_store._INSTANCE = None
        sys.path.remove(STANDIN)
        for name in [name for name in sys.modules if name.split(".")[0] == "miles"]:
            del sys.modules[name]


def _classic_rank(data: dict[str, Any], dp_rank: int, dp_size: int) -> dict[str, Any]:
    """What miles' own functions give a rank: the classic split, then the shard's completion."""
    shard = reference_split(data, dp_size, balance_data=True)[dp_rank]
    partition = shard.pop("partition")
    shard["total_lengths"] = [shard["total_lengths"][row] for row in partition]
    return shard


def test_a_delayed_rank_reads_only_its_rows_of_one_arrow_batch(
    miles_on_mooncake: tuple[Namespace, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    args, object_store = miles_on_mooncake
    from miles.utils import data as miles_data

    patched = compat.current_installation().patched
    assert "miles.utils.object_store.MooncakeObjectStore.put" in patched
    rollout = object_store.MooncakeObjectStore(args, contribute_segment=False)
    data = make_train_data(dataclasses.replace(WORKLOADS["tiny"], samples=24))  # dp 2 and 3
    ref = rollout.put(value=data, value_spec=None)
    stored = StoredBatchRef.from_json(json.loads(json.dumps(ref.inner)))  # plain JSON
    assert stored.plan_key is None  # the trainers' size is not known at the put
    assert stored.step is not None
    batch = RolloutBatch.from_train_data(data)
    counted: list[int] = []
    read = MooncakeStore.read

    def counting(self: MooncakeStore, into: np.ndarray, reads: Sequence[Read]) -> None:
        before = self.bytes_read - GAP_BYTES * self.gaps_read
        read(self, into, reads)
        counted.append(self.bytes_read - GAP_BYTES * self.gaps_read - before)

    monkeypatch.setattr(MooncakeStore, "read", counting)
    for dp_size in (2, 3):
        for rank in range(dp_size):
            counted.clear()
            rollout_data, result = miles_data.process_rollout_data(args, ref, rank, dp_size, None)
            expected = _classic_rank(data, rank, dp_size)
            assert {key: normalize(rollout_data[key]) for key in expected} == expected
            share = batch.nbytes * len(result.value.partition) / batch.num_samples
            assert sum(counted) <= 1.1 * share + 16 * batch.num_samples + 512
    witness = Namespace(witness_ids=list(range(100, 124)))
    rollout_data, _ = miles_data.process_rollout_data(args, ref, 1, 2, witness)
    rows = reference_split(data, 2, balance_data=True)[1]["partition"]
    assert normalize(rollout_data["seq_witness_ids"]) == [100 + row for row in rows]
    whole = rollout.get(ref).value  # a get the drop-in does not patch: miles' dict
    assert normalize(whole["tokens"]) == normalize(data["tokens"])
    rollout.remove(ref)
    assert set(rollout._transfer.store.batch_is_exist(stored.keys)) == {0}
    with pytest.raises(TransportError) as gone:
        miles_data.process_rollout_data(args, ref, 0, 2, None)
    assert f"step {stored.step}, dp_rank 0" in str(gone.value)
    rollout.close()


def test_other_values_are_miles_own_and_undo_restores(
    miles_on_mooncake: tuple[Namespace, Any],
) -> None:
    _, object_store = miles_on_mooncake
    rollout = object_store.get_instance()
    shard = {"tokens": np.arange(4), "partition": [0]}  # a rank's dict: not a whole batch
    ref = rollout.put(value=shard)
    assert isinstance(ref.inner, dict)  # miles' own handle
    assert rollout.get(ref).value["partition"] == [0]
    rollout.remove(ref)
    compat.current_installation().undo()
    for name in ("put", "get", "remove"):
        assert getattr(object_store.MooncakeObjectStore, name).__module__ == object_store.__name__
