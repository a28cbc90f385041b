"""Smoke test of the benchmarks in their smallest mode: agreement, JSON schema, stamp, files.

Speed is never asserted here. What is: every path of the step benchmark hands each rank the
classic shard (and the check fails when one does not); every JSON has its keys, their types and
the stamp (commit, machine, load, versions, command line); the plots are PNGs; the baseline's
own Karmarkar-Karp plans exactly as the tests' reference does. This is the one test module that
imports ``benchmarks`` besides the simulated cluster's users.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray")
pytest.importorskip("torch")
pytest.importorskip("matplotlib")
pytest.importorskip("psutil")

from arrow_split import split_train_data_by_dp_raw
from arrow_split.testing import WORKLOADS, make_train_data
from benchmarks import baseline
from benchmarks.__main__ import BENCHMARKS
from benchmarks.step_paths import PATHS, rollout_dict, shard_differences
from tests.reference_plan import reference_partitions

REPO_ROOT = Path(__file__).resolve().parent.parent
PNG = b"\x89PNG\r\n\x1a\n"


def _is_seconds(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value >= 0


def assert_stamped(results: dict[str, Any]) -> None:
    """The stamp every JSON carries: commit, machine, load, versions, command line."""
    stamp = results["stamp"]
    assert isinstance(stamp["commit"], str)
    assert len(stamp["commit"]) == 40
    assert isinstance(stamp["dirty"], bool)
    assert isinstance(stamp["started"], str)
    machine = stamp["machine"]
    assert isinstance(machine["cpu_count"], int)
    assert machine["cpu_count"] >= 1
    assert isinstance(machine["ram_bytes"], int)
    assert machine["ram_bytes"] > 0
    assert isinstance(machine["platform"], str)
    for point in ("start", "end"):
        load = stamp["load_average"][point]
        assert len(load) == 3
        assert all(isinstance(value, float) for value in load)
    versions = stamp["versions"]
    for package in ("python", "pyarrow", "numpy", "ray", "torch", "arrow_split"):
        assert isinstance(versions[package], str), package
    assert isinstance(stamp["command"], list)
    assert all(isinstance(a, str) for a in stamp["command"])
    assert _is_seconds(stamp["wall_seconds"])


@pytest.mark.parametrize("balance_data", [True, False])
@pytest.mark.parametrize("moe", [None, (2, 2)])
def test_baseline_and_arrow_split_give_every_rank_the_same_shard(
    balance_data: bool, moe: tuple[int, int] | None
) -> None:
    data = make_train_data(dataclasses.replace(WORKLOADS["tiny"], seed=3, moe_shape=moe))
    classic = baseline.classic_split(data, 4, balance_data)
    shards = split_train_data_by_dp_raw(data, 4, balance_data=balance_data)
    for expected, shard in zip(classic, shards, strict=True):
        assert shard_differences(expected, rollout_dict(shard)) == []


def test_shard_differences_name_the_keys_that_differ() -> None:
    data = make_train_data(WORKLOADS["tiny"])
    classic = baseline.classic_split(data, 2, True)[0]
    changed = {**classic, "rewards": [1.0 - reward for reward in classic["rewards"]]}
    assert shard_differences(classic, changed) == ["rewards"]
    assert shard_differences(classic, {**classic, "extra": []}) == ["extra"]


@pytest.mark.parametrize("seed", range(40))
def test_the_baseline_plans_exactly_as_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dp_size = int(rng.integers(1, 9))
    lengths = rng.integers(1, int(rng.integers(2, 30)), dp_size * int(rng.integers(1, 12))).tolist()
    for balance_data in (True, False):
        expected = reference_partitions(lengths, dp_size, balance_data)
        assert baseline.classic_partitions(lengths, dp_size, balance_data) == expected


def _step_groups(samples: int = 32) -> Any:
    from arrow_split.testing import WORKLOADS
    from benchmarks.step import Groups

    config = dataclasses.replace(WORKLOADS["tiny"], samples=samples)
    return Groups.generate("tiny", config, group_size=8, seed=5)


def test_the_step_groups_come_in_a_seeded_order_in_both_forms() -> None:
    groups, again = _step_groups(), _step_groups()
    assert [g["sample_indices"] for g in groups.lists] == [g["sample_indices"] for g in again.lists]
    firsts = [group["sample_indices"][0] for group in groups.lists]
    assert sorted(firsts) == list(range(0, 32, 8))
    assert firsts != sorted(firsts)
    for listed, arrays in zip(groups.lists, groups.arrays, strict=True):
        assert listed["sample_indices"] == arrays["sample_indices"].tolist()
        assert isinstance(arrays["tokens"][0], np.ndarray)
        assert isinstance(listed["tokens"][0], list)


def test_the_step_paths_agree_and_the_largest_ranks_are_measured() -> None:
    from arrow_split import plan_partitions
    from benchmarks.step_paths import check_agreement, largest_ranks

    groups = _step_groups()
    lengths = groups.total_lengths
    partitions = plan_partitions(lengths, 4, balance_data=False)
    ranks = largest_ranks(partitions, lengths, 2)
    tokens = sorted((int(lengths[rows].sum()), rank) for rank, rows in enumerate(partitions))
    assert set(ranks) == {rank for _, rank in tokens[-2:]}
    assert largest_ranks(partitions, lengths, 9) == [0, 1, 2, 3]
    for balance in (True, False):
        check = check_agreement(groups.lists, groups.arrays, 4, [0, 3], balance)
        assert check["builder_equals_from_train_data"]


def test_the_agreement_check_fails_when_a_path_gives_other_rows() -> None:
    from benchmarks.step_paths import check_agreement

    groups = _step_groups()
    arrays = [dict(group) for group in groups.arrays]
    arrays[0]["rewards"] = np.asarray(arrays[0]["rewards"]) + 1.0
    with pytest.raises(AssertionError, match="classic and numpy differ on \\['rewards'\\]"):
        check_agreement(groups.lists, arrays, 2, [0, 1], True)


def test_every_benchmark_of_make_bench_has_a_smoke_mode() -> None:
    import importlib

    assert sorted(BENCHMARKS) == [
        "cluster",
        "journal",
        "miles_job",
        "moe",
        "mooncake",
        "rank_bytes",
        "step",
    ]
    for module, *_ in BENCHMARKS.values():
        parsed = importlib.import_module(module).parse_args(["--smoke", "--out", "x"])
        out = parsed.out if hasattr(parsed, "out") else None
        assert out == Path("x"), module


def test_a_result_without_a_stamp_is_not_written(tmp_path: Path) -> None:
    from benchmarks._common import stamp, start_stamp, write_json

    with pytest.raises(ValueError, match="no stamp"):
        write_json({"figure": 1.0}, tmp_path / "x.json")
    path = write_json({"figure": 1.0, "stamp": stamp(start_stamp())}, tmp_path / "x.json")
    assert_stamped(json.loads(path.read_text()))


@pytest.fixture(scope="module")
def durable_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("journal")
    command = [sys.executable, "-m", "benchmarks.journal", "--smoke", "--out", str(out)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_the_dump_figures_are_written_stamped_by_the_journal_benchmark(durable_files: Path) -> None:
    results = json.loads((durable_files / "dump.json").read_text())
    assert_stamped(results)
    assert results["samples"] == 16
    assert set(results["file_bytes"]) == {"torch_save", "arrow", "arrow_zstd"}
    assert all(_is_seconds(figure["median"]) for figure in results["seconds"].values())
    assert set(results["ratios"]) == {
        "torch_save_vs_write_batch",
        "torch_load_vs_read_batch",
        "torch_load_vs_read_to_train_data",
    }


def test_the_journal_benchmark_writes_a_stamped_json(durable_files: Path) -> None:
    results = json.loads((durable_files / "journal.json").read_text())
    assert_stamped(results)
    appends = results["appends"]
    assert set(appends["vs_no_journal"]) == {"os", "step", "call"}
    assert set(appends["appends_vs_no_journal"]) == {"os", "step", "call"}
    assert _is_seconds(appends["recovery_seconds"]["median"])
    floor = appends["floor"]
    assert floor["bytes"] == appends["journal_bytes"]  # the journal's own bytes, all of them
    assert floor["seconds"] == floor["write_seconds"]["median"] + floor["crc_seconds"]["median"]
    in_step = appends["in_step_floor"]  # the floor's pieces, one after each extend
    assert in_step["bytes"] == appends["journal_bytes"]
    step_median = appends["append_seconds"]["step"]["median"]
    ratio = step_median / in_step["append_seconds"]["median"]
    assert appends["step_appends_vs_in_step_floor"] == ratio
    kills = results["kill_test"]
    assert kills["kill_points"] == 8
    assert (kills["lost"], kills["duplicated"], kills["torn"]) == (0, 0, 0)
    multimodal = results["multimodal"]
    assert multimodal["bytes_ratio"] <= multimodal["target_bytes_ratio"]
    for form in ("stored_once", "one_per_row"):
        assert _is_seconds(multimodal[form]["delayed_rank_seconds"]["median"])


def test_nothing_under_benchmarks_imports_tests() -> None:
    sources = sorted((REPO_ROOT / "benchmarks").glob("*.py"))
    assert sources
    for source in sources:
        text = source.read_text(encoding="utf-8")
        assert "from tests" not in text, source.name
        assert "import tests" not in text, source.name


def test_the_baseline_imports_nothing_from_arrow_split() -> None:
    code = "import sys, benchmarks.baseline; print('arrow_split' in sys.modules)"
    output = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=REPO_ROOT
    ).stdout
    assert output.strip() == "False"


# --- the step benchmark in its smoke mode (starts Ray) ---------------------------------------


@pytest.fixture(scope="module")
def step_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Path]]:
    from benchmarks import step
    from benchmarks._common import run_main

    out = tmp_path_factory.mktemp("step")
    argv = ["--smoke", "--out", str(out)]
    assert run_main(argv, step.parse_args, step.run, step.report) == 0
    paths = {"json": out / "step.json", "markdown": out / "step.md", "plot": out / "step.png"}
    return json.loads(paths["json"].read_text()), paths


@pytest.mark.ray
def test_the_step_benchmark_checks_agreement_and_measures_every_path(
    step_run: tuple[dict[str, Any], dict[str, Path]],
) -> None:
    results, _ = step_run
    agreement = results["workloads"]["tiny"]["agreement"]
    assert agreement["agree"]
    assert agreement["builder_equals_from_train_data"]
    assert agreement["paths"] == ["numpy", "arrow", "builder"]
    summary = results["summary"]["tiny"]
    assert sorted(summary) == sorted(f"{m}/2/{p}" for m in ("eager", "delayed") for p in PATHS)
    for entry in summary.values():
        for key in ("boundary_seconds", "slowest_rank_seconds", "critical_path_seconds"):
            assert _is_seconds(entry[key]), key
        assert entry["critical_path_seconds"] >= entry["boundary_seconds"]
        assert 0 <= entry["appends_system_seconds"] <= entry["appends_cpu_seconds"] + 0.01
        assert isinstance(entry["store_bytes"], int)
        assert entry["store_bytes"] > 0
        memory = entry["slowest_rank_memory"]
        assert set(memory) == {"peak_rss_bytes", "private_increase_bytes", "shared_touched_bytes"}
        assert all(isinstance(value, int) for value in memory.values())
    parts = {key: list(entry["boundary_steps"]) for key, entry in summary.items()}
    assert parts["eager/2/classic"] == ["split", "put"]
    assert parts["delayed/2/numpy"] == ["concat", "put"]
    assert parts["eager/2/arrow"] == ["convert", "put"]
    assert parts["delayed/2/builder"] == ["finish", "put"]


@pytest.mark.ray
def test_the_step_benchmark_measures_its_references_in_the_same_run(
    step_run: tuple[dict[str, Any], dict[str, Path]],
) -> None:
    results, _ = step_run
    refs = results["references"]
    assert refs["workload"] == "tiny"
    assert refs["batch_bytes"] > 0
    assert refs["one_buffer_put"]["bytes"] == refs["batch_bytes"]
    assert refs["memcpy_rank"]["dp_size"] == 2
    assert refs["memcpy_rank"]["bytes"] > 0
    assert (refs["planner"]["samples"], refs["planner"]["dp_size"]) == (65_536, 256)
    for figure in ("planner", "take"):
        for path in ("classic_seconds", "arrow_seconds"):
            assert _is_seconds(refs[figure][path]["median"]), (figure, path)
    turns = results["pickle"]  # the builder's appends and the pickle, taking turns
    assert turns["rounds"] == 3
    assert len(turns["builder_cpu_seconds"]["all"]) == len(turns["cpu_seconds"]["all"]) == 3
    ratio = turns["builder_cpu_seconds"]["median"] / turns["cpu_seconds"]["median"]
    assert turns["builder_vs_pickle"] == pytest.approx(ratio)
    assert results["targets"][-1]["target"].startswith("builder appends")
    assert results["targets"][-1]["value"] == turns["builder_vs_pickle"]
    assert all(
        set(t) == {"target", "where", "value", "goal", "reached"} for t in results["targets"]
    )


@pytest.mark.ray
def test_the_step_benchmark_writes_a_stamped_json_a_table_and_a_plot(
    step_run: tuple[dict[str, Any], dict[str, Path]],
) -> None:
    results, paths = step_run
    assert_stamped(results)
    table = paths["markdown"].read_text()
    assert "### Targets" in table
    assert "| delayed | 2 | arrow_split builder |" in table
    assert paths["plot"].read_bytes()[:8] == PNG


@pytest.mark.ray
def test_no_ray_is_left_behind(step_run: tuple[dict[str, Any], dict[str, Path]]) -> None:
    import psutil
    import ray

    assert not ray.is_initialized()
    children = psutil.Process().children(recursive=True)
    alive = [child for child in children if child.is_running() and child.status() != "zombie"]
    assert not [" ".join(child.cmdline()[:2]) for child in alive if "ray" in child.name()]


def test_the_gpu_benchmark_skips_cleanly_without_cuda_and_runs_with_it(tmp_path: Path) -> None:
    from benchmarks.gpu import cuda_available

    command = [sys.executable, "-m", "benchmarks.gpu", "--smoke", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    if not cuda_available():
        assert "no CUDA device" in done.stdout
        assert not list(tmp_path.iterdir())
        return
    results = json.loads((tmp_path / "gpu.json").read_text())
    assert_stamped(results)
    record = results["configs"][0]
    assert record["rank_bytes"] > 0
    assert _is_seconds(record["link"]["floor_seconds"])
    assert set(record["to_tensors_seconds"]) == {"per_sample", "packed", "padded", "nested"}
    assert (tmp_path / "gpu.md").read_text().startswith("| config")


@pytest.mark.ray
def test_the_step_benchmark_gives_the_floors_of_a_rank(
    step_run: tuple[dict[str, Any], dict[str, Path]],
) -> None:
    results, _ = step_run
    refs = results["references"]
    assert _is_seconds(refs["ray_get_small"]["seconds"]["median"])
    floor = refs["ray_get_small"]["seconds"]["median"] + refs["memcpy_rank"]["seconds"]["median"]
    assert refs["delayed_rank_floor_seconds"] == pytest.approx(floor)
    names = [t["target"] for t in results["targets"]]
    for name in (
        "take_rows / memcpy of the rank's bytes",
        "take_rows / list indexing",
        "delayed rank / (ray.get of a small object + memcpy)",
        "eager rank / numpy quick fix's rank",
    ):
        assert name in names


def test_the_rank_bytes_benchmark_writes_every_figure_at_smoke_size(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "benchmarks.rank_bytes", "--smoke", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "rank_bytes.json").read_text())
    assert_stamped(results)
    assert (tmp_path / "rank_bytes.png").stat().st_size > 0
    assert set(results["summary"]) == {
        "slice_experts_bytes_ratio",
        "prefetch_wait_vs_fetch",
        "block_vs_memcpy_dp2",
        "eager_block_vs_numpy",
        "eager_node_groups_block_vs_numpy",
    }
    cut = results["slice"]
    assert len(cut["slice_experts_bytes"]) == cut["pp"] * cut["cp"]
    assert cut["experts_bytes_ratio"] == max(cut["slice_experts_bytes"]) / cut["full_experts_bytes"]
    (block,) = results["block"]
    assert not block["block_moved"]
    assert block["vs_gather_floor"] > 0
    assert block["warm_fill_allocated_bytes"] < block["rank_bytes"] + 65_536
    prefetch = results["prefetch"]
    for measured in (prefetch, prefetch["default_arenas"]):  # one malloc arena, and glibc's own
        assert prefetch["steps"] == len(measured["wait_seconds"]["all"]) + 1
        assert len(measured["release_seconds"]["all"]) == prefetch["steps"]
        assert measured["step_bytes"] > 0
    eager = results["eager"]
    calls = {"numpy", "numpy_private", "arrow_to_tensors", "arrow_block", "copy_floor"}
    calls.add("arrow_block_node_groups")
    assert eager["ranks_per_node"] == 1  # dp 2: a node group per rank
    assert eager["node_groups_block_vs_numpy"] > 0
    assert set(eager["seconds"]) == calls
    assert eager["block_vs_numpy_private"] > 0
    assert eager["copy_floor_vs_numpy"] > 0
    assert eager["rank_bytes"] == block["rank_bytes"] > 0  # the same rank of the same step
    (delayed,) = results["delayed_block"]
    assert set(delayed["seconds"]) == {"take_then_fill", "fill_rank_block"}
    assert delayed["speedup"] > 0
