"""The miles drop-in through a real local Ray: eager, scheduled and delayed hand-offs.

A driver puts with :func:`arrow_split.compat.miles.split_train_data_by_dp`; DP actors call
:func:`~arrow_split.compat.miles.process_rollout_data` as miles' train side does, and must get
exactly the actor-layout dict of the raw split, in both modes.
"""

from __future__ import annotations

import gc
from argparse import Namespace
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from arrow_split import PlanError, PlanMismatchError, Shard, TransportError
from arrow_split.compat import miles
from arrow_split.compat.miles import _install as _miles_install
from tests.ray.support import store_bytes_free, wait_until

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

CALL_TIMEOUT_S = 60
FULL_CONFIG = {
    "dp_size": 2,
    "cp_size": 1,
    "vpp_size": 1,
    "microbatch_group_size_per_vp_stage": None,
}


def make_args(**overrides: Any) -> Namespace:
    fields: dict[str, Any] = {
        "balance_data": False,
        "delay_split_train_data_by_dp": False,
        "multi_lora": False,
        "multi_lora_n_adapters": 2,
        "global_batch_size": 6,
        "micro_batch_size": 1,
        "use_dynamic_batch_size": True,
        "max_tokens_per_gpu": 256,
    }
    fields.update(overrides)
    return Namespace(**fields)


def make_data(num_samples: int, seed: int, *, adapters: bool = False) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    total = rng.integers(8, 120, size=num_samples)
    response = total - rng.integers(2, 6, size=num_samples)
    data: dict[str, Any] = {
        "tokens": [rng.integers(0, 1000, size=int(n)).tolist() for n in total],
        "response_lengths": response.tolist(),
        "loss_masks": [rng.integers(0, 2, size=int(r)).tolist() for r in response],
        "rewards": rng.random(num_samples).tolist(),
        "truncated": rng.integers(0, 2, size=num_samples).tolist(),
        "sample_indices": list(range(num_samples)),
        "rollout_ids": [i // 2 for i in range(num_samples)],
        "rollout_routed_experts": [
            rng.integers(0, 8, size=(int(n) - 1, 2, 2), dtype=np.int32) for n in total
        ],
        "raw_reward": rng.random(num_samples).tolist(),
    }
    if adapters:
        data["adapter_slots"] = rng.integers(0, 2, size=num_samples).tolist()
        data["step_adapter_batch_sizes"] = {0: 8}
    return data


@ray.remote(num_cpus=0)
class MilesTrainActor:
    """A train actor that reads its rank's data as miles' train side does."""

    def process(self, args: Namespace, ref: Any, dp_rank: int, dp_size: int, **kw: Any) -> Any:
        witness = kw.pop("witness_ids", None)
        info = None if witness is None else Namespace(witness_ids=witness)
        rollout_data, result = miles.process_rollout_data(args, ref, dp_rank, dp_size, info)
        with result as shard:
            kind = type(shard).__name__
        return {"data": rollout_data, "value_type": kind, "released": result.value is None}

    def failure(self, args: Namespace, ref: Any, dp_rank: int, dp_size: int) -> str:
        try:
            miles.process_rollout_data(args, ref, dp_rank, dp_size)
        except Exception as error:  # the test checks the type and the message
            return f"{type(error).__name__}: {error}"
        return "no error"


@pytest.fixture(scope="module")
def actors(ray_cluster: None) -> Iterator[list[Any]]:
    handles = [MilesTrainActor.remote() for _ in range(3)]  # type: ignore[attr-defined]
    yield handles
    for handle in handles:
        ray.kill(handle)


def gather(calls: list[Any]) -> list[Any]:
    return ray.get(calls, timeout=CALL_TIMEOUT_S)  # type: ignore[no-any-return]


def assert_same(got: dict[str, Any], expected: dict[str, Any]) -> None:
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        if key == "rollout_routed_experts":
            assert [a.tolist() for a in got[key]] == [a.tolist() for a in value]
        else:
            assert got[key] == value, key


def expected_actor_dicts(args: Namespace, data: dict[str, Any], dp_size: int) -> list[dict]:
    shards = miles.split_train_data_by_dp_raw(args, data, dp_size=dp_size)
    return [miles.process_rollout_data_shard(args, shard) for shard in shards]


@pytest.mark.parametrize("balance_data", [False, True])
def test_eager_refs_read_like_miles_and_ranks_get_the_raw_split(
    actors: list[Any], balance_data: bool
) -> None:
    args = make_args(balance_data=balance_data)
    data = make_data(12, seed=1, adapters=True)
    refs = miles.split_train_data_by_dp(args, data, {"dp_size": 3})
    assert isinstance(refs, list)
    assert len(refs) == 3
    raw = miles.split_train_data_by_dp_raw(args, data, dp_size=3)
    for ref, expected in zip(refs, raw, strict=True):
        assert ray.get(ref.inner)["partition"] == expected["partition"]  # as miles' tests read it
    results = gather([actor.process.remote(args, refs, r, 3) for r, actor in enumerate(actors)])
    for result, expected in zip(results, expected_actor_dicts(args, data, 3), strict=True):
        assert_same(result["data"], expected)
        assert result["data"]["n_adapters"] == 2
        assert (result["value_type"], result["released"]) == ("Shard", True)


def test_eager_refs_carry_the_rollout_side_schedule(actors: list[Any]) -> None:
    args = make_args()
    data = make_data(12, seed=2)
    assert miles.can_schedule_on_rollout_side(args, data, FULL_CONFIG)
    refs = miles.split_train_data_by_dp(args, data, FULL_CONFIG)
    scheduled = miles.split_train_data_by_dp_scheduled_raw(
        args, data, train_parallel_config=FULL_CONFIG
    )
    results = gather([actor.process.remote(args, refs, r, 2) for r, actor in enumerate(actors[:2])])
    for result, shard in zip(results, scheduled, strict=True):
        expected = miles.process_rollout_data_shard(args, dict(shard))
        assert_same(result["data"], expected)
        assert result["data"]["num_rollouts"] == [6]
        assert "micro_batch_indices" in result["data"]


@pytest.mark.parametrize("balance_data", [False, True])
def test_delayed_ref_gives_each_rank_its_rows(actors: list[Any], balance_data: bool) -> None:
    args = make_args(balance_data=balance_data, delay_split_train_data_by_dp=True)
    data = make_data(12, seed=3, adapters=True)
    ref = miles.split_train_data_by_dp(args, data, {"dp_size": 3})
    assert isinstance(ref, miles.ArrowRef)
    results = gather([actor.process.remote(args, ref, r, 3) for r, actor in enumerate(actors)])
    for result, expected in zip(results, expected_actor_dicts(args, data, 3), strict=True):
        assert_same(result["data"], expected)
    # another dp_size on the train side splits the same batch again, as miles does
    again = gather([actor.process.remote(args, ref, r, 2) for r, actor in enumerate(actors[:2])])
    for result, expected in zip(again, expected_actor_dicts(args, data, 2), strict=True):
        assert_same(result["data"], expected)


def test_delayed_witness_ids_and_miles_own_put(actors: list[Any]) -> None:
    args = make_args(delay_split_train_data_by_dp=True)
    data = make_data(6, seed=4)
    witness = [100 + i for i in range(6)]
    box = Namespace(inner=ray.put(data))  # miles' manager puts the dict itself in delayed mode
    ref = miles.split_train_data_by_dp(args, data, {})  # no dp_size known: put without a plan
    expected = expected_actor_dicts(args, {**data, "seq_witness_ids": witness}, 2)
    for handle in (box, ref):
        results = gather(
            [
                actor.process.remote(args, handle, r, 2, witness_ids=witness)
                for r, actor in enumerate(actors[:2])
            ]
        )
        for result, want in zip(results, expected, strict=True):
            assert_same(result["data"], want)


def test_eager_mistakes_name_the_fix(actors: list[Any]) -> None:
    args = make_args()
    refs = miles.split_train_data_by_dp(args, make_data(6, seed=5), {"dp_size": 2})
    assert isinstance(refs, list)
    short = ray.get(actors[0].failure.remote(args, refs[:1], 0, 2), timeout=CALL_TIMEOUT_S)
    assert short.startswith(PlanError.__name__)
    assert "`rollout_data_ref` must be the list of `dp_size` (2) references" in short
    swapped = ray.get(actors[0].failure.remote(args, refs[::-1], 0, 2), timeout=CALL_TIMEOUT_S)
    assert swapped.startswith(PlanMismatchError.__name__)
    assert "holds rank 1's rows of a 2-rank split, not rank 0's" in swapped


def test_the_eager_value_is_an_arrow_shard(actors: list[Any]) -> None:
    refs = miles.split_train_data_by_dp(make_args(), make_data(4, seed=6), {"dp_size": 2})
    assert isinstance(refs, list)
    value = ray.get(refs[0].inner)
    assert isinstance(value, miles.RolloutShard)
    assert isinstance(value.shard, Shard)
    assert value.shard.num_samples == 2


def test_what_a_reference_holds_is_checked(actors: list[Any]) -> None:
    eager_args, delayed_args = make_args(), make_args(delay_split_train_data_by_dp=True)
    refs = miles.split_train_data_by_dp(eager_args, make_data(4, seed=7), {"dp_size": 2})
    assert isinstance(refs, list)
    one_shard = ray.get(actors[0].failure.remote(delayed_args, refs[0], 0, 2), timeout=60)
    assert one_shard.startswith("NotARolloutBatchError: dp_rank 0: the delayed reference holds")
    boxed = Namespace(inner=refs[0].inner)
    boxed_shard = ray.get(actors[0].failure.remote(delayed_args, boxed, 0, 2), timeout=60)
    assert boxed_shard.startswith("PlanError: the delayed reference holds one rank's shard")
    number = Namespace(inner=ray.put(42))
    not_a_shard = ray.get(actors[0].failure.remote(eager_args, [number], 0, 1), timeout=60)
    assert (
        not_a_shard
        == "NotARolloutBatchError: `rollout_data_ref[0]` holds a int, not a rank's shard"
    )
    not_a_dict = ray.get(actors[0].failure.remote(delayed_args, number, 0, 1), timeout=60)
    assert not_a_dict == (
        "NotARolloutBatchError: the delayed reference holds a int, not a train-data dict"
    )


class PayloadRef:
    """The shape of miles' reference after #2542: ``_RayStoreObjectRef(payload=...)``."""

    def __init__(self, *, payload: Any) -> None:
        self.payload = payload


@pytest.mark.parametrize("delay", [False, True])
def test_references_of_miles_2542_shape_work_both_ways(
    actors: list[Any], monkeypatch: pytest.MonkeyPatch, delay: bool
) -> None:
    monkeypatch.setattr(_miles_install, "REF_FACTORY", lambda ref: PayloadRef(payload=ref))
    args = make_args(balance_data=True, delay_split_train_data_by_dp=delay)
    data = make_data(9, seed=8)
    refs = miles.split_train_data_by_dp(args, data, {"dp_size": 2}, pad_to_dp=True)
    handles = refs if isinstance(refs, list) else [refs]
    assert all(isinstance(handle, PayloadRef) for handle in handles)
    results = gather([actor.process.remote(args, refs, r, 2) for r, actor in enumerate(actors[:2])])
    raw = miles.split_train_data_by_dp_raw(args, data, dp_size=2, pad_to_dp=True)
    for result, shard in zip(results, raw, strict=True):
        assert_same(result["data"], miles.process_rollout_data_shard(args, dict(shard)))
        assert len(result["data"]["tokens"]) == 5  # 9 samples padded to 10, 5 per rank
    paddings = [flag for result in results for flag in result["data"]["is_padding"]]
    indices = [index for result in results for index in result["data"]["sample_indices"]]
    assert sum(paddings) == 1
    assert sorted(indices) == [-1, *range(9)]


def test_a_failed_compat_put_frees_what_was_put_and_names_the_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = make_args()
    data = make_data(64, seed=9)
    gc.collect()
    capacity = float(ray.cluster_resources()["object_store_memory"])
    assert wait_until(lambda: store_bytes_free() == capacity), "earlier objects are still alive"
    put = ray.put
    calls: list[int] = []

    def third_put_fails(value: object, **kwargs: Any) -> Any:
        calls.append(len(calls))
        if len(calls) == 3:
            raise ray.exceptions.ObjectStoreFullError("the store is full")
        return put(value, **kwargs)

    monkeypatch.setattr(ray, "put", third_put_fails)
    with pytest.raises(
        TransportError,
        match=r"the put of dp_rank 2's shard \(3 of 4\) failed \(ObjectStoreFullError: .*the "
        r"store is full.*\); the 2 shards already put were freed",
    ) as caught:
        miles.split_train_data_by_dp(args, data, {"dp_size": 4})
    assert isinstance(caught.value.__cause__, ray.exceptions.ObjectStoreFullError)
    assert calls == [0, 1, 2]
    monkeypatch.undo()
    assert wait_until(lambda: store_bytes_free() == capacity), "the shards put were not freed"
