"""A real local Ray job of the stand-in miles (tests/standin), the drop-in in every process.

A driver, a rollout actor whose ``generate`` puts the train data inline through miles' store
singleton, and train actors whose ``get_rollout_data`` calls ``process_rollout_data``, each in a
worker process of its own. The drop-in reaches the workers by Ray's setup hook (``runtime_env``)
or by the environment variable alone; every rank's dict equals the classic split's.
"""

from __future__ import annotations

import os
import random
import sys
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import arrow_split as compat_errors
from arrow_split import ColumnSpec, RolloutBatch
from arrow_split.compat import miles as compat
from tests.ray.conftest import OBJECT_STORE_BYTES, REPO_ROOT
from tests.reference_split import normalize, reference_split

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray

STANDIN = str(Path(REPO_ROOT) / "tests" / "standin")
SCORE = ColumnSpec("score", "per_sample_scalar", pa.float64())
STORE_PUT = "miles.utils.object_store.RayObjectStore.put"


def make_train_data(args: Any, rollout_id: int) -> dict[str, Any]:
    """A step's train data as miles' conversion hands it over: per-sample lists, one global."""
    rng = random.Random(rollout_id)
    lengths = [rng.randint(3, 12) for _ in range(args.num_samples)]
    responses = [rng.randint(1, length - 1) for length in lengths]
    data = {
        "tokens": [[rng.randint(0, 50_000) for _ in range(n)] for n in lengths],
        "response_lengths": responses,
        "loss_masks": [[rng.randint(0, 1) for _ in range(n)] for n in responses],
        "rollout_log_probs": [[-rng.randint(0, 40) / 8 for _ in range(n)] for n in responses],
        "rewards": [rng.randint(0, 4) / 4 for _ in lengths],
        "score": [rng.randint(0, 8) / 8 for _ in lengths],
        "raw_reward": [rng.randint(0, 4) / 4 for _ in lengths],
    }
    if getattr(args, "extra_key", False):  # a key nobody declared
        data["extra"] = [1.0] * args.num_samples
    return data


def make_args(**fields: Any) -> Namespace:
    return Namespace(
        balance_data=True,
        delay_split_train_data_by_dp=True,
        rollout_function_path=f"{__name__}.make_train_data",
        num_samples=24,
        **fields,
    )


def classic_rank(data: dict[str, Any], dp_rank: int, dp_size: int) -> dict[str, Any]:
    """What miles' own functions give a rank: the classic split, then the shard's completion."""
    shard = reference_split(data, dp_size, balance_data=True)[dp_rank]
    partition = shard.pop("partition")
    shard["total_lengths"] = [shard["total_lengths"][row] for row in partition]
    return shard


def _installed() -> list[str] | None:
    installation = compat.current_installation()
    return None if installation is None else list(installation.patched)


@ray.remote(num_cpus=0)
class RolloutProcess:
    """The rollout manager's worker process."""

    def __init__(self, args: Namespace) -> None:
        from miles.ray.rollout.rollout_manager import RolloutManager

        self.manager = RolloutManager(args, {"dp_size": 2})

    def generate(self, rollout_id: int) -> dict[str, Any]:
        return self.manager.generate(rollout_id)

    def get_back(self, ref: Any) -> Any:  # code the drop-in does not patch reads the put
        from miles.utils import object_store

        with object_store.get_instance().get(ref) as value:
            return value

    def state(self) -> tuple[int, list[str] | None]:
        return os.getpid(), _installed()


@ray.remote(num_cpus=0)
class TrainProcess:
    """One rank's worker process: its store is built before anything else of miles is imported."""

    def __init__(self, args: Namespace, dp_rank: int, dp_size: int) -> None:
        from miles.utils import object_store

        object_store.init_instance(args)  # the store exists before the conversion is imported
        self.installed_at_start = _installed()
        from miles.ray.train_actor import TrainRayActor

        self.actor = TrainRayActor.__new__(TrainRayActor)
        self.actor.args, self.actor.dp_rank, self.actor.dp_size = args, dp_rank, dp_size

    def get_rollout_data(self, boxed: dict[str, Any], witness_ids: Any = None) -> dict[str, Any]:
        witness = None if witness_ids is None else Namespace(witness_ids=witness_ids)
        return self.actor.get_rollout_data(boxed["ref"], witness)

    def state(self) -> tuple[int, list[str] | None, list[str] | None]:
        return os.getpid(), self.installed_at_start, _installed()


def _start(runtime_env: dict[str, Any]) -> None:
    python_path = os.pathsep.join(filter(None, [REPO_ROOT, STANDIN, os.environ.get("PYTHONPATH")]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", python_path)
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=OBJECT_STORE_BYTES,
            log_to_driver=False,
            logging_level="ERROR",
            runtime_env=runtime_env,
        )


@pytest.fixture(scope="module", params=["setup_hook", "environment"])
def miles_job(request: pytest.FixtureRequest) -> Iterator[str]:
    """A Ray job whose workers get the drop-in by Ray's setup hook, or by the variable alone."""
    options = {"specs": [SCORE], "strict_keys": True}
    if request.param == "setup_hook":
        _start(compat.runtime_env(**options))
    else:
        _start({"env_vars": compat.environment(**options)})
    sys.path.insert(0, STANDIN)
    try:
        yield request.param
    finally:
        sys.path.remove(STANDIN)
        for name in [name for name in sys.modules if name.split(".")[0] == "miles"]:
            del sys.modules[name]
        ray.shutdown()


def test_every_process_of_the_job_is_patched_and_every_rank_equals_miles(miles_job: str) -> None:
    args = make_args()
    rollout = RolloutProcess.remote(args)  # type: ignore[attr-defined]
    trainers = {  # two trainers with their own dp_size take from one put
        size: [TrainProcess.remote(args, rank, size) for rank in range(size)]  # type: ignore[attr-defined]
        for size in (2, 3)
    }
    ref = ray.get(rollout.generate.remote(7))["data_ref"]
    data = make_train_data(args, 7)
    assert isinstance(ref, compat.ArrowRef)
    assert ref.step == 1
    assert isinstance(ray.get(ref.inner), RolloutBatch)  # one Arrow batch, not miles' dict
    for size, ranks in trainers.items():
        got = ray.get([rank.get_rollout_data.remote({"ref": ref}) for rank in ranks])
        for dp_rank, shard in enumerate(got):
            assert normalize(shard) == classic_rank(data, dp_rank, size), (size, dp_rank)
    witness_ids = list(range(100, 100 + args.num_samples))
    shard = ray.get(trainers[2][1].get_rollout_data.remote({"ref": ref}, witness_ids))
    expected = classic_rank({**data, "seq_witness_ids": witness_ids}, 1, 2)
    assert normalize(shard) == expected
    assert normalize(ray.get(rollout.get_back.remote(ref))) == normalize(data)
    pids = {ray.get(rollout.state.remote())[0]}
    rollout_patched = ray.get(rollout.state.remote())[1]
    assert rollout_patched is not None
    assert STORE_PUT in rollout_patched
    for ranks in trainers.values():
        for rank in ranks:
            pid, at_start, now = ray.get(rank.state.remote())
            pids.add(pid)
            assert now is not None
            assert STORE_PUT in now
            if miles_job == "environment":
                assert at_start is None  # installed when miles' data module was imported
            else:
                assert at_start is not None  # installed before any actor code
    assert len(pids) == 6
    assert os.getpid() not in pids


def test_the_options_reach_the_workers(miles_job: str) -> None:
    # install(specs=[score], strict_keys=True) in every worker: `score` is declared, so the put
    # succeeds, and a key nobody declared is refused in the rollout process before any put
    rollout = RolloutProcess.remote(make_args(extra_key=True))  # type: ignore[attr-defined]
    with pytest.raises(ray.exceptions.RayTaskError) as caught:
        ray.get(rollout.generate.remote(1))
    assert isinstance(caught.value.cause, compat_errors.SchemaError)
    assert "`extra`" in str(caught.value.cause)
