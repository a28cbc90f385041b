"""Smoke test of the benchmarks on tiny sizes: figures, files, equal shards, equal plans.

Speed is never asserted here: only that every figure is produced and positive, that the JSON,
markdown and plot files are written, that the baseline and arrow_split hand each rank the same
shard, and that the baseline's own Karmarkar-Karp plans exactly as the tests' reference does.
This is the one test module that imports ``benchmarks``.
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
pytest.importorskip("tqdm")
pytest.importorskip("psutil")

from arrow_split import split_train_data_by_dp_raw
from benchmarks import baseline, bench_build, bench_planner, bench_take, harness
from benchmarks.config import STEPS, Options, Workload
from benchmarks.phases import shard_differences
from benchmarks.timing import Repeats
from tests.reference_plan import reference_partitions

REPO_ROOT = Path(__file__).resolve().parent.parent

DP_SIZES = (2, 4)


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.mark.parametrize("balance_data", [True, False])
@pytest.mark.parametrize("moe", [False, True])
def test_baseline_and_arrow_split_give_every_rank_the_same_shard(
    balance_data: bool, moe: bool
) -> None:
    workload = Workload.generate("tiny", seed=3, moe=moe)
    classic = baseline.classic_split(workload.lists, 4, balance_data)
    shards = split_train_data_by_dp_raw(workload.lists, 4, balance_data=balance_data)
    for expected, shard in zip(classic, shards, strict=True):
        assert shard_differences(expected, shard.to_train_data(layout="rollout")) == []


def test_the_agreement_check_sees_a_difference() -> None:
    workload = Workload.generate("tiny")
    classic = baseline.classic_split(workload.lists, 2, True)[0]
    changed = {**classic, "rewards": [1.0 - reward for reward in classic["rewards"]]}
    assert shard_differences(classic, changed) == ["rewards"]
    assert shard_differences(classic, {**classic, "extra": []}) == ["extra"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Path]]:
    out = tmp_path_factory.mktemp("bench")
    options = Options(
        workload="tiny",
        dp_sizes=DP_SIZES,
        repeats=1,
        min_seconds=0.0,
        ranks_per_config=1,
        out=out,
        progress=False,
    )
    results = harness.run(options)
    return results, harness.write_outputs(results, out)


@pytest.mark.ray
def test_every_figure_is_produced(tiny_run: tuple[dict[str, Any], dict[str, Path]]) -> None:
    results, _ = tiny_run
    assert [entry["dp_size"] for entry in results["agreement"]] == list(DP_SIZES)
    for figures in (results["build"]["from_lists"], results["build"]["from_numpy"]):
        assert _positive(figures["seconds"]["min"])
    put = results["put"]
    for figures in [put["single_buffer"], put["arrow_delayed"], put["baseline_delayed"]]:
        assert _positive(figures["seconds"]["median"])
        assert _positive(figures["store_bytes"])
    for key in ("arrow_eager", "baseline_eager"):
        assert sorted(put[key]) == sorted(str(dp) for dp in DP_SIZES)
        assert all(_positive(figures["store_bytes"]) for figures in put[key].values())
    configs = {(r["path"], r["mode"], r["dp_size"]) for r in results["per_rank"]}
    assert len(configs) == 4 * len(DP_SIZES)
    for record in results["per_rank"]:
        assert _positive(record["sum"]["median"])
        assert set(record["steps"]) <= set(STEPS)
        assert record["memory"]["peak_rss_bytes"] > 0
    assert all(_positive(entry["seconds"]["median"]) for entry in results["memcpy"])
    assert [(e["n"], e["dp_size"]) for e in results["planner"]][-1] == (65_536, 256)


@pytest.mark.ray
def test_ratios_targets_and_metadata(tiny_run: tuple[dict[str, Any], dict[str, Path]]) -> None:
    results, _ = tiny_run
    ratios = results["ratios"]
    for key in ("delayed_per_rank", "eager_per_rank", "eager_put"):
        assert sorted(ratios[key]) == sorted(str(dp) for dp in DP_SIZES)
        assert all(_positive(value) for value in ratios[key].values())
    assert _positive(ratios["arrow_put_over_single_buffer"]["delayed"])
    assert len(results["targets"]) == 6
    assert all(_positive(target["value"]) for target in results["targets"])
    meta = results["meta"]
    assert meta["machine"]["cpu_count"] >= 1
    assert meta["machine"]["ram_bytes"] > 0
    assert {"python", "pyarrow", "numpy", "ray", "torch", "arrow_split"} <= set(meta["versions"])


@pytest.mark.ray
def test_files_are_written(tiny_run: tuple[dict[str, Any], dict[str, Path]]) -> None:
    results, paths = tiny_run
    assert json.loads(paths["json"].read_text())["ratios"] == json.loads(
        json.dumps(results["ratios"])
    )
    table = paths["markdown"].read_text()
    assert "### Targets" in table
    assert "| 4 | delayed | arrow_split |" in table
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.ray
def test_no_ray_is_left_behind(tiny_run: tuple[dict[str, Any], dict[str, Path]]) -> None:
    import psutil
    import ray

    assert not ray.is_initialized()
    children = psutil.Process().children(recursive=True)
    alive = [child for child in children if child.is_running() and child.status() != "zombie"]
    assert not [" ".join(child.cmdline()[:2]) for child in alive if "ray" in child.name()]


def test_the_cluster_and_soak_plots_are_drawn(tmp_path: Path) -> None:
    from benchmarks.report import plot_cluster, plot_soak

    mode = {"cross_node_mib": 4.0, "rank_ms_median": 2.0, "rank_ms_max": 3.0}
    cluster = {
        "layout": "head + 2 nodes",
        "batch": {"object_bytes": 4 * 2**20},
        "summary": {"eager": mode, "local": {**mode, "cross_node_mib": 8.0}},
    }
    sample = {"store_used": 1.0, "driver_rss_private": 2.0, "driver_rss_shmem": 3.0}
    soak = {"batch_nbytes": 2**20, "samples": [{"step": i, **sample} for i in range(3)]}
    plot_cluster(cluster, tmp_path / "cluster.png")
    plot_soak(soak, tmp_path / "soak.png")
    assert (tmp_path / "cluster.png").stat().st_size > 1000
    assert (tmp_path / "soak.png").stat().st_size > 1000


@pytest.mark.parametrize("seed", range(40))
def test_the_baseline_plans_exactly_as_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dp_size = int(rng.integers(1, 9))
    lengths = rng.integers(1, int(rng.integers(2, 30)), dp_size * int(rng.integers(1, 12))).tolist()
    for balance_data in (True, False):
        expected = reference_partitions(lengths, dp_size, balance_data)
        assert baseline.classic_partitions(lengths, dp_size, balance_data) == expected


def test_the_planner_benchmark(tmp_path: Path) -> None:
    assert (
        bench_planner.main(
            ["--sizes", "512:8,256:16", "--repeats", "1", "--json", str(tmp_path / "p.json")]
        )
        == 0
    )
    report = json.loads((tmp_path / "p.json").read_text())
    assert [(r["n"], r["dp_size"]) for r in report["results"]] == [(512, 8), (256, 16)]
    assert all(r["identical"] and _positive(r["speedup_median"]) for r in report["results"])


def test_the_build_benchmark() -> None:
    result = bench_build.measure_build("tiny", 1)
    assert result["samples"] == 32
    assert set(result["ratios"]) == {
        "lists_vs_pa_array_inferred",
        "lists_vs_pa_array_typed",
        "numpy_vs_concatenate",
    }
    assert all(_positive(ratio) for ratio in result["ratios"].values())


@pytest.mark.parametrize("moe", [False, True])
def test_the_take_benchmark(moe: bool) -> None:
    result = bench_take.measure_take("tiny", 4, 3, Repeats(1, 0.0), moe=moe)
    assert result["rows"] == 8
    assert _positive(result["speedup_median"])
    assert set(result["seconds"]) == {"take_rows", "record_batch_take"}


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


# --- the step benchmark (benchmarks.step) ------------------------------------------------------


def _step_groups(samples: int = 32) -> Any:
    from arrow_split.testing import WORKLOADS
    from benchmarks.step_run import Groups

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


def test_the_step_builders_give_the_batch_of_from_train_data() -> None:
    from arrow_split import RolloutBatch
    from benchmarks.step_paths import Builder, _FallbackBuilder, is_per_sample, rollout

    groups = _step_groups()
    data, figures = rollout("classic", groups.lists)
    assert figures["cpu_seconds"] >= 0
    assert figures["wall_seconds"] > 0
    expected = RolloutBatch.from_train_data(data)
    for builder_class in {Builder, _FallbackBuilder}:
        by_group, by_sample = builder_class(), builder_class()
        for group in groups.lists:
            by_group.extend(group)
            rows = len(group["tokens"])
            for row in range(rows):
                by_sample.append({k: v[row] for k, v in group.items() if is_per_sample(k)})
        assert by_group.finish().equals(expected)
        assert by_sample.finish().equals(expected)


def test_the_step_paths_agree_and_the_largest_ranks_are_measured() -> None:
    from arrow_split import plan_partitions
    from benchmarks.step_paths import check_agreement
    from benchmarks.step_ranks import largest_ranks

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


def test_the_step_command_line() -> None:
    from benchmarks import step

    options = step.parse_args(["--workload", "small", "--quick", "--delayed-dp-sizes", "8,16"])
    assert (options.repeats, options.ranks, options.eager_dp_sizes) == (1, 1, (64,))
    assert options.delayed_dp_sizes == (8, 16)
    with pytest.raises(SystemExit):
        step.parse_args(["--eager-dp-sizes", "0"])


@pytest.fixture(scope="module")
def step_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Path]]:
    from benchmarks import step
    from benchmarks.step_run import StepOptions

    out = tmp_path_factory.mktemp("step")
    options = StepOptions(
        workload="tiny",
        eager_dp_sizes=(2,),
        delayed_dp_sizes=(2,),
        small_samples=0,
        repeats=1,
        ranks=1,
        out=out,
        progress=False,
    )
    results = step.run(options)
    return results, step.write_outputs(results, out)


@pytest.mark.ray
def test_the_step_benchmark_measures_every_path(
    step_run: tuple[dict[str, Any], dict[str, Path]],
) -> None:
    from benchmarks.step_paths import BUILDER_NAME, PATHS

    results, _ = step_run
    assert results["builder"] == BUILDER_NAME
    assert sorted(results["summary"]) == ["tiny"]
    for summary in results["summary"].values():
        assert sorted(summary) == sorted(f"{m}/2/{p}" for m in ("eager", "delayed") for p in PATHS)
        for entry in summary.values():
            for key in ("boundary_seconds", "slowest_rank_seconds", "critical_path_seconds"):
                assert _positive(entry[key]), key
            assert entry["critical_path_seconds"] > entry["boundary_seconds"]
            assert _positive(entry["cold_start"]["first_seconds"])
            assert _positive(entry["store_bytes"])
            assert entry["appends_cpu_seconds"] >= 0
    parts = {
        key: list(entry["boundary_steps"]) for key, entry in results["summary"]["tiny"].items()
    }
    assert parts["eager/2/classic"] == ["split", "put"]
    assert parts["delayed/2/numpy"] == ["concat", "put"]
    assert parts["eager/2/arrow"] == ["convert", "put"]
    assert parts["delayed/2/builder"] == ["finish", "put"]
    per_object = results["per_object"]
    assert (per_object["workload"], per_object["dp_size"]) == ("tiny", 2)
    assert _positive(per_object["tiny_put_seconds"]["median"])
    assert _positive(per_object["arrow_shard_put_seconds"]["median"])
    assert _positive(results["pickle"]["cpu_seconds"]["median"])
    assert len(results["targets"]) == 7
    assert all(_positive(target["value"]) for target in results["targets"])


@pytest.mark.ray
def test_the_step_benchmark_writes_its_files(
    step_run: tuple[dict[str, Any], dict[str, Path]],
) -> None:
    results, paths = step_run
    assert json.loads(paths["json"].read_text())["targets"] == json.loads(
        json.dumps(results["targets"])
    )
    table = paths["markdown"].read_text()
    assert "### Targets" in table
    assert "| delayed | 2 | arrow_split builder |" in table
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
