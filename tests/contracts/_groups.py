"""Contract groups for the entry points past the plan and the tensors: conversion, the builder,
dumps, the Ray and miles leaves (Ray itself replaced by a tripwire) and ``arrow_split.testing``.

Each group is a function of hypothesis-drawn hostile arguments; ``_child.py`` runs it.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import tempfile
from argparse import Namespace
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

import arrow_split
from arrow_split import RolloutBatch, RolloutBatchBuilder
from arrow_split.testing import RolloutConfig, assert_batches_equal
from tests.contracts.hostile import (
    check_contract,
    copy_of,
    hostile_arrays,
    hostile_ints,
    hostile_values,
    same,
)

__all__ = ["FOLDER", "GROUPS", "RayReached", "trip_ray"]

BASE: dict[str, Any] = {
    "tokens": [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]],
    "response_lengths": [2, 1, 1, 3],
    "loss_masks": [[1, 0], [1], [0], [1, 1, 1]],
    "rollout_log_probs": [[-0.1, -0.2], [-0.3], [-0.4], [-0.5, -0.6, -0.7]],
    "rewards": [1.0, 0.0, 0.5, 0.25],
    "truncated": [False, True, False, False],
    "rollout_ids": [0, 0, 1, 1],
    "prompt": ["a", "b", "c", "d"],
    "rollout_routed_experts": [np.zeros((n - 1, 1, 2), dtype=np.int32) for n in (3, 2, 1, 4)],
    "raw_reward": [1.0, 0.0, 0.5, 0.25],
    "dynamic_global_batch_size": 4,
}
BATCH = RolloutBatch.from_train_data(BASE)
PLAN = BATCH.make_plan(2, balance_data=False)
KEYS = [*BASE, "not_a_column", "seq_witness_ids", "metadata"]
FOLDER = Path(tempfile.mkdtemp(prefix="arrow_split_contracts_"))
atexit.register(shutil.rmtree, FOLDER, ignore_errors=True)
GOOD_DUMP = FOLDER / "good.arrow"
BATCH.write(GOOD_DUMP)


class RayReached(Exception):  # noqa: N818 - a tripwire, not an error of the library
    """Every check passed and the call reached Ray: the contract holds up to here."""


def trip_ray() -> None:
    """Replace the Ray calls the leaves make by a tripwire (no Ray is started in the child)."""
    import ray

    def reached(*args: object, **kwargs: object) -> None:
        raise RayReached

    for name in ("put", "get", "init", "wait", "get_runtime_context"):
        setattr(ray, name, reached)


def _per_sample(draw: st.DrawFn) -> object:
    """A column of four samples whose values are hostile, or a hostile column as a whole."""
    if draw(st.booleans()):
        return draw(st.one_of(hostile_arrays(max_size=6), hostile_values()))
    sample = st.one_of(hostile_arrays(max_size=4), hostile_values(), hostile_ints())
    return draw(st.lists(sample, min_size=3, max_size=5))


@st.composite
def hostile_train_data(draw: st.DrawFn) -> dict[str, Any]:
    """``BASE`` with one or two keys replaced by hostile values (or removed)."""
    data = dict(BASE)
    for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2)):
        if draw(st.integers(0, 9)) == 0:
            data.pop(key, None)
        else:
            data[key] = _per_sample(draw)
    return data


def _verdict(call: Callable[[], Any]) -> object:
    outcome = check_contract(call)
    return type(outcome) if isinstance(outcome, Exception) else outcome


def _train_data(data: dict[str, Any], nonfinite: object, exact: object) -> None:
    """from_train_data and the builder give the same verdict and, if accepted, the same batch."""
    options = {"allow_nonfinite": nonfinite, "exact_floats": exact}
    converted = check_contract(RolloutBatch.from_train_data, data, **options)

    def build() -> RolloutBatch:
        builder = RolloutBatchBuilder(**options)  # type: ignore[arg-type]
        builder.extend(data)
        return builder.finish()

    built = check_contract(build)
    if isinstance(converted, RolloutBatch) != isinstance(built, RolloutBatch):
        msg = f"from_train_data gave {converted!r:.200}, the builder {built!r:.200}"
        raise AssertionError(msg)
    if isinstance(converted, RolloutBatch):
        assert_batches_equal(converted, built)  # type: ignore[arg-type]


def _builder(sample: object, key: object, value: object, journal: bool) -> None:
    """append / set_global / finish (with a journal or not): typed errors, nothing half-done."""
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory(dir=FOLDER))
        builder = RolloutBatchBuilder(journal=Path(folder) / "journal" if journal else None)
        builder.extend({key: BASE[key] for key in ("tokens", "rewards", "prompt")})
        expected = RolloutBatch.from_train_data(
            {k: BASE[k] for k in ("tokens", "rewards", "prompt")}
        )
        appended = check_contract(builder.append, sample)
        set_global = check_contract(builder.set_global, key, value)
        if isinstance(appended, Exception) and isinstance(set_global, Exception):
            assert len(builder) == 4
            assert_batches_equal(builder.finish(), expected)
        else:
            check_contract(builder.finish)


@contextlib.contextmanager
def _file_of(content: str, offset: int, byte: int) -> Iterator[object]:
    """A dump (good, truncated or with one byte changed), or a path that is not a dump."""
    path = FOLDER / f"case_{os.getpid()}.arrow"
    data = GOOD_DUMP.read_bytes()
    if content == "truncated":
        path.write_bytes(data[: offset % len(data)])
    elif content == "flipped":
        changed = bytearray(data)
        changed[offset % len(data)] = byte
        path.write_bytes(bytes(changed))
    elif content == "folder":
        yield FOLDER
        return
    elif content == "missing":
        yield FOLDER / "missing.arrow"
        return
    else:
        path.write_bytes(data)
    yield path


def _dump(content: str, offset: int, byte: int, validate: object, path: object) -> None:
    """read/write (and the dashboard's): a batch, a typed error or an OS error (passed through)."""
    with _file_of(content, offset, byte) as source:
        batch = check_contract(RolloutBatch.read, source, validate=validate, allow=(OSError,))
        if isinstance(batch, RolloutBatch) and validate is True:
            batch.to_train_data()  # a validated dump is usable
            arrow_split.split_train_data_by_dp_raw(batch, 2, balance_data=False)
    check_contract(BATCH.write, path, allow=(OSError,))
    check_contract(BATCH.write, FOLDER / "out.arrow", compression=validate, allow=(OSError,))
    check_contract(arrow_split.describe_journal, path)
    check_contract(arrow_split.write_dashboard_columns, BATCH, path, offset, allow=(OSError,))


def _ray_leaf(data: object, dp_size: object, flags: tuple[object, object], nodes: object) -> None:
    from arrow_split.ray import process_rollout_data, split_train_data_by_dp

    balance, delay = flags
    check_contract(
        split_train_data_by_dp,
        data,
        dp_size,
        balance_data=balance,
        delay=delay,
        rank_nodes=nodes,
        allow=(RayReached,),
    )
    refs = nodes if isinstance(nodes, (list, tuple)) else BATCH
    check_contract(
        process_rollout_data,
        refs,
        dp_size if isinstance(dp_size, int) else 0,
        2,
        balance_data=balance,
        resplit=delay,
        witness_ids=data if not isinstance(data, dict) else None,
        step=dp_size,
        allow=(RayReached,),
    )


def _ray_prefetch(refs: object, dp_size: object, balance: object) -> None:
    """The Ray leaf's block fill and prefetcher (Ray tripped: its errors come back at ``get``)."""
    from arrow_split.block import RankBlock
    from arrow_split.ray import RolloutPrefetcher, fill_rank_block

    rank = dp_size if isinstance(dp_size, int) else 0
    check_contract(
        fill_rank_block, refs, rank, 2, RankBlock(), balance_data=balance, allow=(RayReached,)
    )
    check_contract(fill_rank_block, refs, 0, 2, refs, allow=(RayReached,))
    prefetcher = check_contract(RolloutPrefetcher, rank, 2, lookahead=dp_size, balance_data=balance)
    if isinstance(prefetcher, RolloutPrefetcher):
        check_contract(prefetcher.submit, 0, refs)
        check_contract(prefetcher.get, 0, timeout=60, allow=(RayReached,))
        prefetcher.stop()


def _wire(text: object, value: object, flag: object) -> None:
    """References on the wire and the drop-in's routes to every process (Ray tripped)."""
    from arrow_split.compat import miles
    from arrow_split.ray import (
        can_free,
        fetch,
        free,
        ref_from_bytes,
        ref_from_json,
        ref_to_bytes,
        ref_to_json,
    )

    ray_calls = (RayReached,)
    check_contract(ref_from_json, text, allow=ray_calls)
    check_contract(miles.ArrowRef.from_json, text, allow=ray_calls)
    check_contract(ref_from_bytes, value, allow=ray_calls)
    check_contract(ref_to_json, value, allow=ray_calls)
    check_contract(ref_to_bytes, value, allow=ray_calls)
    check_contract(free, value, allow=ray_calls)
    check_contract(can_free)
    check_contract(fetch, value, "dp_rank 0", "the reference", None, allow=ray_calls)
    check_contract(miles.runtime_env, specs=value, strict_keys=flag)
    check_contract(miles.environment, specs=[], pad_to_dp=flag, verbose=value)
    check_contract(miles.current_installation)
    made = check_contract(miles.prefetcher, Namespace(), value, 2, lookahead=flag, convert=value)
    if isinstance(made, miles.MilesPrefetcher):
        made.stop()


def _rank_bytes(place: object, rows: object, number: object, lookahead: object) -> None:
    """The routed-experts slice, the reused block and the prefetcher (numpy, threads)."""
    from arrow_split.block import RankBlock
    from arrow_split.prefetch import Prefetcher
    from arrow_split.routing import ParallelPlace, expert_id_dtype, take_expert_slice

    made = check_contract(ParallelPlace, **place) if isinstance(place, dict) else place
    check_contract(take_expert_slice, BATCH, made, rows, num_experts=number)
    check_contract(take_expert_slice, BATCH, ParallelPlace(cp_size=2), rows)
    check_contract(expert_id_dtype, number)
    check_contract(RankBlock(threads=2, parallel_bytes=0).fill, BATCH, rows)
    check_contract(RankBlock, threads=number, parallel_bytes=lookahead, allocate=place)
    fetch = functools.partial(arrow_split.take_rows, BATCH)  # a fetch whose errors are typed
    prefetcher = check_contract(Prefetcher, fetch, lookahead=lookahead)
    if isinstance(prefetcher, Prefetcher):
        with prefetcher:
            check_contract(prefetcher.submit, number, rows)
            check_contract(prefetcher.get, number, timeout=60)
    check_contract(Prefetcher, place, lookahead=1)


def _stores(size: object, rank: object, flag: object, text: object) -> None:
    """A byte store: a put in plan order or with none, a rank's take, the JSON reference."""
    from arrow_split.stores import MemoryStore, StoredBatchRef, put_batch, remove_batch, take_rank

    store = MemoryStore()
    sized = type(size) is int and 0 < size <= BATCH.num_samples
    plan = BATCH.make_plan(size, balance_data=False) if sized else None
    ref = check_contract(put_batch, store, BATCH, plan, step=rank)
    check_contract(put_batch, store, flag, None)
    check_contract(put_batch, flag, BATCH, text)
    if isinstance(ref, StoredBatchRef):
        check_contract(take_rank, store, ref, rank, size, balance_data=flag, resplit=flag)
        check_contract(take_rank, store, ref, rank, 3, balance_data=False, pad_to_dp=flag)
        check_contract(StoredBatchRef.from_json, ref.to_json()[: len(ref.to_json()) // 2])
        check_contract(take_rank, flag, ref, 0, 1, balance_data=False)
        check_contract(remove_batch, store, ref)
        check_contract(take_rank, store, ref, 0, 1, balance_data=False)  # removed: typed
    check_contract(StoredBatchRef.from_json, text)
    check_contract(take_rank, store, text, 0, 1)
    check_contract(remove_batch, store, text)


def _blocks(layout: object, pad_value: object, device: object, rows: object) -> None:
    """The torch leaf's block (no pinned memory here) and the experts' tensors."""
    from arrow_split.routing import ParallelPlace, take_expert_slice
    from arrow_split.torch import TensorBlock, expert_tensors

    block = check_contract(TensorBlock, device, pin=False)
    if isinstance(block, TensorBlock):
        check_contract(block.fill, BATCH, rows, layout=layout)
        check_contract(block.to_device)
    check_contract(TensorBlock, None, pin=layout, threads=pad_value)
    expert_slice = take_expert_slice(BATCH, ParallelPlace(cp_size=2, cp_rank=1))
    on = None if isinstance(device, str) and device == "cuda" else device  # a missing device
    check_contract(expert_tensors, expert_slice, layout=layout, pad_value=pad_value, device=on)
    check_contract(expert_tensors, expert_slice, id_dtype=layout)
    check_contract(expert_tensors, layout)


def _miles(args: Any, data: object, dp_size: object, shard: object) -> None:
    from arrow_split.compat import miles

    config = {
        "dp_size": dp_size,
        "cp_size": 1,
        "vpp_size": 1,
        "microbatch_group_size_per_vp_stage": 1,
    }
    allow = (RayReached,)
    check_contract(miles.split_train_data_by_dp_raw, args, data, dp_size=dp_size, allow=allow)
    check_contract(miles.can_schedule_on_rollout_side, args, data, config, allow=allow)
    check_contract(
        miles.split_train_data_by_dp_scheduled_raw, args, data, train_parallel_config=config
    )
    check_contract(miles.split_train_data_by_dp, args, data, config, allow=allow)
    check_contract(miles.process_rollout_data, args, [shard, shard], 0, 2, allow=allow)
    check_contract(miles.process_rollout_data, args, data, 1, 2, shard, allow=allow)
    if isinstance(shard, dict):  # completed in place, as miles does: unchanged if it fails
        before = copy_of(shard)
        outcome = check_contract(miles.process_rollout_data_shard, args, shard, mutates=True)
        if isinstance(outcome, Exception):
            assert same(shard, before), f"a failed call changed the shard: {shard!r:.200}"


@st.composite
def miles_args(draw: st.DrawFn) -> object:
    """miles' args: a namespace with hostile fields, or no namespace at all."""
    if draw(st.integers(0, 5)) == 0:
        return draw(hostile_values())
    fields = {
        "balance_data": False,
        "delay_split_train_data_by_dp": False,
        "use_dynamic_batch_size": False,
        "global_batch_size": 2,
        "micro_batch_size": 1,
    }
    for name in draw(st.lists(st.sampled_from([*fields, "multi_lora", "max_tokens_per_gpu"]))):
        if draw(st.integers(0, 4)) == 0:
            fields.pop(name, None)
        else:
            fields[name] = draw(st.one_of(hostile_values(), hostile_ints()))
    return Namespace(**fields)


@st.composite
def hostile_shards(draw: st.DrawFn) -> object:
    """A rollout-layout dict with hostile ``partition`` / ``total_lengths``, or anything."""
    if draw(st.booleans()):
        return draw(hostile_values())
    shard = {"partition": [0, 2], "total_lengths": [3, 2, 1, 4], "tokens": [[1, 2, 3], [6]]}
    key = draw(st.sampled_from(["partition", "total_lengths"]))
    shard[key] = draw(st.one_of(hostile_arrays(max_size=5), hostile_values()))
    return shard


def _api(lengths: object, dp_size: object, flag: object, config_value: object) -> None:
    """The planners, the schedule and the batch's own methods."""
    check_contract(arrow_split.karmarkar_karp, lengths, dp_size, equal_size=flag)
    check_contract(arrow_split.partition_for_rank, lengths, 0, dp_size, balance_data=flag)
    check_contract(arrow_split.split_train_data_by_dp_raw, BATCH, dp_size, balance_data=flag)
    plan = check_contract(BATCH.make_plan, dp_size, balance_data=flag)
    other_plan = plan if isinstance(plan, arrow_split.Plan) else lengths
    check_contract(arrow_split.split, BATCH, other_plan)
    check_contract(arrow_split.take, BATCH, other_plan, config_value)
    check_contract(arrow_split.take, lengths, PLAN, dp_size)
    check_contract(BATCH.equals, lengths)
    config = check_contract(
        arrow_split.ScheduleConfig,
        global_batch_size=config_value,
        micro_batch_size=dp_size,
        use_dynamic_batch_size=flag,
        max_tokens_per_gpu=config_value,
    )
    if isinstance(config, arrow_split.ScheduleConfig):
        check_contract(arrow_split.plan_schedule, lengths, lengths, dp_size, config)
        check_contract(arrow_split.schedule_for_rank, lengths, lengths, dp_size, 0, config)
    check_contract(arrow_split.ColumnSpec, "x", config_value, flag=flag)
    check_contract(arrow_split.ColumnSpec, "x", "per_sample_scalar", pa.int64(), flag=flag)
    check_contract(arrow_split.register_column, lengths, replace=flag)  # never a new column


def _testing(samples: object, cap: object, seed: object, group_size: object) -> None:
    from arrow_split import testing

    config = check_contract(
        RolloutConfig,
        samples=samples,
        response_cap=cap,
        seed=seed,
        response_mean=8.0,
        prompt_tokens=(1, 4),
    )
    if isinstance(config, RolloutConfig) and config.samples <= 16 and config.response_cap <= 64:
        check_contract(testing.make_lengths, config, seed)
        data = check_contract(testing.make_train_data, config, seed)
        groups = check_contract(lambda: list(testing.iter_sample_groups(config, group_size)))
        if isinstance(data, dict):
            batch = RolloutBatch.from_train_data(data)
            testing.assert_batches_equal(batch, batch)
            testing.assert_shards_equal(batch, batch)
        assert isinstance(groups, (list, Exception))
        check_contract(testing.make_multimodal_train_data, samples, group_size, cap, seed=seed)
    for left, right in ((BATCH, samples), (samples, BATCH)):
        check_contract(testing.assert_batches_equal, left, right, allow=(AssertionError,))


small_ints = hostile_ints(low=-2, high=6)
GROUPS: dict[str, tuple[Callable[..., None], tuple[st.SearchStrategy[Any], ...]]] = {
    "train_data": (_train_data, (hostile_train_data(), hostile_values(), hostile_values())),
    "builder": (
        _builder,
        (
            st.one_of(
                hostile_values(),
                hostile_train_data().map(
                    lambda d: {k: v[0] if isinstance(v, list) and v else v for k, v in d.items()}
                ),
            ),
            st.sampled_from(["raw_reward", "dynamic_global_batch_size", "tokens", "x", 1, None]),
            st.one_of(hostile_values(), hostile_ints()),
            st.booleans(),
        ),
    ),
    "dump": (
        _dump,
        (
            st.sampled_from(["good", "truncated", "flipped", "folder", "missing"]),
            st.integers(0, 10**6),
            st.integers(0, 255),
            hostile_values(),
            st.one_of(hostile_values(), st.sampled_from(["", "a\0b", str(FOLDER), b"x.arrow"])),
        ),
    ),
    "ray": (
        _ray_leaf,
        (
            st.one_of(hostile_train_data(), hostile_arrays(max_size=6), hostile_values()),
            small_ints,
            st.tuples(hostile_values(), hostile_values()),
            st.one_of(
                st.none(), st.lists(st.one_of(st.text(max_size=2), hostile_values()), max_size=4)
            ),
        ),
    ),
    "wire": (
        _wire,
        (
            st.one_of(
                st.text(max_size=80),
                st.binary(max_size=80),
                st.just('{"format": "arrow_split.ray_ref", "version": 1, "object_id": "00"}'),
                hostile_values(),
            ),
            st.one_of(st.binary(max_size=40), hostile_values()),
            hostile_values(),
        ),
    ),
    "ray_prefetch": (
        _ray_prefetch,
        (
            st.one_of(
                st.just(BATCH),
                st.lists(st.one_of(st.just(BATCH), hostile_values()), min_size=1, max_size=3),
                hostile_values(),
            ),
            small_ints,
            hostile_values(),
        ),
    ),
    "rank_bytes": (
        _rank_bytes,
        (
            st.one_of(
                st.fixed_dictionaries(
                    {
                        "pp_size": small_ints,
                        "pp_rank": small_ints,
                        "cp_size": small_ints,
                        "cp_rank": small_ints,
                    },
                    optional={"stage_layers": st.one_of(hostile_values(), st.lists(small_ints))},
                ),
                hostile_values(),
            ),
            st.one_of(hostile_arrays(max_size=6), hostile_values()),
            hostile_ints(low=-2, high=300),
            hostile_ints(low=-2, high=4),
        ),
    ),
    "stores": (
        _stores,
        (
            hostile_ints(low=-2, high=10),
            hostile_ints(low=-2, high=12),
            hostile_values(),
            st.one_of(
                st.text(max_size=60),
                st.just('{"format": "arrow_split.stored_batch", "version": 1}'),
                hostile_values(),
            ),
        ),
    ),
    "blocks": (
        _blocks,
        (
            st.sampled_from(["packed", "per_sample", "padded", None, 1]),
            hostile_ints(),
            st.one_of(st.sampled_from(["cuda", None, "cpu", "nowhere", 0]), hostile_values()),
            st.one_of(hostile_arrays(max_size=6), hostile_values()),
        ),
    ),
    "miles": (
        _miles,
        (
            miles_args(),
            st.one_of(hostile_train_data(), hostile_values()),
            small_ints,
            hostile_shards(),
        ),
    ),
    "api": (
        _api,
        (
            st.one_of(hostile_arrays(), hostile_values()),
            small_ints,
            hostile_values(),
            hostile_ints(),
        ),
    ),
    "testing": (
        _testing,
        (hostile_ints(low=-2, high=12), hostile_ints(low=-1, high=40), hostile_ints(), small_ints),
    ),
}
