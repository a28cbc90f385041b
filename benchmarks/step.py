"""The step benchmark: what one training step costs, from the rollout loop to each rank's tensors.

Run from the repository root::

    python -m benchmarks.step --workload medium      # the full run (a few minutes)
    python -m benchmarks.step --smoke                 # seconds: what the tests run

A rollout loop produces the workload's samples one group at a time
(:func:`arrow_split.testing.iter_sample_groups`, groups in a seeded order) into four paths
(:mod:`benchmarks.step_paths`: classic lists, numpy classic, arrow_split from lists, arrow_split
with the builder), each in eager mode (``--eager-dp-sizes``) and delayed mode
(``--delayed-dp-sizes``). For every configuration it reports the rollout loop's CPU time (the
appends, off the critical path), the step boundary on the driver (finish or convert + put), the
slowest measured rank (in a fresh Ray actor) and the critical path (boundary + slowest rank); then
the cold start of a fresh actor, a small workload (``--small-samples`` at ``--small-dp-size``) with
the per-object cost of an eager put against Ray's own (on the main workload at its largest dp size
when the small one is skipped), and the targets. :mod:`benchmarks.step_run` says what one step is;
:mod:`benchmarks.step_report` how figures are combined. Also measured in the same run, on the main
workload: one ``ray.put`` of a buffer of the batch's size, a memcpy
of a rank's bytes in a rank's process, both planners and both gathers. Writes ``step.json``,
``step.md`` and ``step.png`` under ``--out`` (``docs/benchmarks`` by default).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from arrow_split.testing import WORKLOADS
from benchmarks import step_report
from benchmarks._common import (
    MIB,
    Progress,
    benchmark_parser,
    dp_sizes_arg,
    local_ray,
    stamp,
    start_stamp,
    write_json,
)
from benchmarks.step_run import (
    Groups,
    StepOptions,
    measure_references,
    measure_workload,
    per_object_costs,
    pickle_cost,
    warm_up_driver,
)

__all__ = ["main", "parse_args", "run", "write_outputs"]

_SMOKE = {"workload": "tiny", "eager_dp_sizes": (2,), "delayed_dp_sizes": (2,), "small_samples": 0}
_SMOKE.update(small_dp_size=2, repeats=1, ranks=1)


def parse_args(argv: list[str] | None = None) -> StepOptions:
    """Parse the command line into :class:`benchmarks.step_run.StepOptions`."""
    parser = benchmark_parser("step", __doc__, "the tiny workload at dp 2, once: for the tests")
    add = parser.add_argument
    add("--workload", choices=list(WORKLOADS), default="medium")
    add("--eager-dp-sizes", type=dp_sizes_arg, default=(8, 64, 256), help="default 8,64,256")
    add("--delayed-dp-sizes", type=dp_sizes_arg, default=(64,), help="default 64")
    add("--small-samples", type=int, default=128, help="the small workload's samples; 0: skip")
    add("--small-dp-size", type=int, default=64)
    add("--repeats", type=int, default=3, help="warm steps per configuration, after the cold one")
    add("--ranks", type=int, default=2, help="ranks measured per configuration (most tokens)")
    add("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.ranks < 1 or args.small_samples < 0 or args.small_dp_size < 1:
        parser.error("--repeats, --ranks and --small-dp-size must be >= 1, --small-samples >= 0")
    if not args.eager_dp_sizes and not args.delayed_dp_sizes:
        parser.error("give at least one dp size")
    names = {field.name for field in dataclasses.fields(StepOptions)} & set(vars(args))
    options = StepOptions(**{name: getattr(args, name) for name in names})
    options = dataclasses.replace(options, progress=not args.no_progress)
    if args.smoke:
        options = dataclasses.replace(options, **_SMOKE)  # type: ignore[arg-type]
    return options


def _store_bytes(groups: Groups) -> int:
    """Room for one configuration's objects: the pickled lists of a step, three times over."""
    shape = groups.describe()
    pickled = 5 * shape["num_tokens"] + 11 * shape["response_tokens"]
    return max(768 * MIB, 3 * pickled + 256 * MIB)


def _generate(options: StepOptions) -> tuple[Groups, Groups | None, Groups]:
    def make(name: str, samples: int | None = None) -> Groups:
        base = WORKLOADS["small" if samples is not None else name]
        config = base if samples is None else dataclasses.replace(base, samples=samples)
        return Groups.generate(name, config, options.group_size, options.seed)

    main = make(options.workload)
    small = make(f"small-{options.small_samples}", options.small_samples)
    return main, (small if options.small_samples else None), make("tiny")


def _measure(
    options: StepOptions, groups: tuple[Groups, Groups | None, Groups], progress: Progress
) -> dict[str, Any]:
    main, small, tiny = groups
    warm_up_driver(tiny, options)
    results: dict[str, Any] = {"workloads": {}}
    results["workloads"][main.name] = measure_workload(
        main, options.eager_dp_sizes, options.delayed_dp_sizes, options, progress
    )
    results["pickle"] = pickle_cost(main, options.repeats)
    where, dp_size = main, max((*options.eager_dp_sizes, *options.delayed_dp_sizes))
    if small is not None:
        where, dp_size = small, options.small_dp_size
        dp = (dp_size,)
        results["workloads"][small.name] = measure_workload(small, dp, dp, options, progress)
    costs = per_object_costs(where, dp_size, options.repeats)
    results["per_object"] = {"workload": where.name, **costs}
    at = max(options.delayed_dp_sizes or options.eager_dp_sizes)
    with progress.task(f"{main.name}: references"):
        results["references"] = measure_references(main, at, options.ranks, options.repeats)
    return results


def run(options: StepOptions) -> dict[str, Any]:
    """Run the whole benchmark; return every figure, stamped and JSON-ready (nothing is written)."""
    started = start_stamp()
    progress = Progress(enabled=options.progress)
    progress.expect(2)
    with progress.task("generate the sample groups"):
        groups = _generate(options)
    store = max(_store_bytes(g) for g in groups if g is not None)
    with local_ray(store):
        results = _measure(options, groups, progress)
    results.update(
        main_workload=options.workload,
        plan="balanced" if options.balance_data else "strided",
        repeats=options.repeats,
        ranks_per_config=options.ranks,
        object_store_bytes=store,
        options={key: str(value) for key, value in dataclasses.asdict(options).items()},
    )
    results["summary"] = step_report.summarize_results(results)
    results["targets"] = step_report.targets(results)
    results["stamp"] = stamp(started)
    return results


def write_outputs(results: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write ``step.json``, ``step.md`` and ``step.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "step.json", "markdown": out / "step.md", "plot": out / "step.png"}
    write_json(results, paths["json"])
    paths["markdown"].write_text(step_report.markdown(results), encoding="utf-8")
    step_report.plot(results, paths["plot"])
    return paths


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the tables and where the files went."""
    options = parse_args(argv)
    results = run(options)
    paths = write_outputs(results, options.out)
    print(step_report.markdown(results))
    for kind, path in paths.items():
        print(f"wrote {kind}: {path}")
    print(f"wall time: {results['stamp']['wall_seconds']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
