"""The command line: ``python -m arrow_split demo|inspect`` (or the ``arrow-split`` script).

``inspect`` summarizes a dump, a Parquet file of ``to_parquet``, or a builder's journal (folder
or file, before ``recover()``), and can write miles' dashboard columns file from a dump.
``demo`` runs rollout -> data-parallel train actors on a local Ray (``arrow_split._demo``), every
sample's values checked on arrival, and stops its Ray; it imports Ray (and torch, if installed)
only when it runs, so a bad flag or ``inspect`` needs neither.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence

import arrow_split
from arrow_split import ArrowSplitError, RolloutBatch, __version__
from arrow_split._demo import DemoConfig, run_demo
from arrow_split.summary import inspect_path, summarize

__all__ = ["build_parser", "main"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        msg = f"expected a positive integer, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if value < 1:
        msg = f"expected a positive integer, got {value}"
        raise argparse.ArgumentTypeError(msg)
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``arrow-split`` command."""
    parser = argparse.ArgumentParser(
        prog="arrow-split",
        description="Move RL rollout batches to data-parallel ranks as Arrow record batches.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="rollout -> DP train actors on a local Ray, both modes, values checked",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for flag, default, text in (
        ("--samples", 512, "samples per step"),
        ("--mean-response", 1024, "mean response length"),
        ("--max-response", 4096, "response cap"),
        ("--dp-size", 8, "data-parallel ranks"),
        ("--steps", 3, "steps per mode"),
    ):
        demo.add_argument(flag, type=_positive_int, default=default, help=text)
    demo.add_argument(
        "--mode", choices=("eager", "delayed", "both"), default="both", help="hand-offs to run"
    )
    demo.add_argument(
        "--strided", action="store_true", help="strided plan instead of the balanced one"
    )
    demo.add_argument("--moe", action="store_true", help="add routed experts (4 layers, top-2)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the generated batches")
    inspect = commands.add_parser(
        "inspect",
        help="summarize a dump (batch.write), a Parquet file (batch.to_parquet) or a journal",
    )
    inspect.add_argument(
        "path", help="a dump (Arrow IPC), a Parquet file, or a journal folder or file"
    )
    inspect.add_argument(
        "--dashboard-columns",
        metavar="DIR",
        help="also write miles' DIR/dashboard_columns/rollout_{id}.parquet from the dump",
    )
    inspect.add_argument(
        "--rollout-id", type=int, help="the {id} of the dashboard file (default: 0)"
    )
    inspect.add_argument(
        "--dp-size",
        type=_positive_int,
        action="append",
        help="show the plan fingerprints for this DP size (repeatable; default: 8 and 64)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    arguments = parser.parse_args(argv)
    if arguments.command == "inspect":
        return _inspect(parser, arguments)
    if arguments.max_response < arguments.mean_response:
        parser.error(
            f"--max-response ({arguments.max_response}) must be >= --mean-response "
            f"({arguments.mean_response})"
        )
    if not arguments.strided and arguments.samples % arguments.dp_size:
        parser.error(
            f"the balanced plan needs --samples ({arguments.samples}) to be a multiple of "
            f"--dp-size ({arguments.dp_size}); change one, or pass --strided"
        )
    if not _installed("ray"):
        print(
            "arrow-split demo: needs Ray (not installed); install it with: pip install '.[ray]' "
            "from a clone (torch is optional: without it the ranks check Arrow values)",
            file=sys.stderr,
        )
        return 1
    same_names = ("samples", "mean_response", "max_response", "dp_size", "steps", "moe", "seed")
    config = DemoConfig(
        **{name: getattr(arguments, name) for name in same_names},
        modes=("eager", "delayed") if arguments.mode == "both" else (arguments.mode,),
        balance_data=not arguments.strided,
        tensors=_installed("torch"),
    )
    try:
        return run_demo(config)
    except ArrowSplitError as exc:
        return _failed("demo", exc)


def _inspect(parser: argparse.ArgumentParser, arguments: argparse.Namespace) -> int:
    if arguments.rollout_id is not None and arguments.dashboard_columns is None:
        parser.error("--rollout-id names the dashboard file: pass --dashboard-columns DIR too")
    path = arguments.path
    named = ".journal" in os.path.basename(path)  # step-<n>.journal, .journal.damaged, ...
    journal = os.path.isdir(path) or named or _magic(path) in (b"ASJ1", b"ASJ2")
    if journal and arguments.dashboard_columns is not None:
        parser.error("--dashboard-columns reads a dump or a Parquet file, not a journal")
    try:
        if journal:
            print(arrow_split.describe_journal(path))
            return 0
        parquet = _magic(path) == b"PAR1"
        read = RolloutBatch.read_parquet if parquet else RolloutBatch.read
        dp_sizes = tuple(arguments.dp_size or (8, 64))
        if parquet:
            print(f"file: {path}\n  Parquet (RolloutBatch.to_parquet)\n")
            print(summarize(read(path), dp_sizes=dp_sizes))
        else:
            print(inspect_path(path, dp_sizes))  # a dump's objects are never decoded
        if arguments.dashboard_columns is not None:
            directory, rollout_id = arguments.dashboard_columns, arguments.rollout_id or 0
            written = arrow_split.write_dashboard_columns(read(path), directory, rollout_id)
            print(f"wrote {written}")
    except (ArrowSplitError, FileNotFoundError, IsADirectoryError) as exc:
        return _failed("inspect", exc)
    return 0


def _magic(path: str) -> bytes:
    """The first 4 bytes of the file at ``path`` (none if it cannot be read)."""
    try:
        with open(path, "rb") as file:
            return file.read(4)
    except OSError:
        return b""


def _installed(name: str) -> bool:
    """Whether ``import name`` would find the package (without importing it: torch is slow)."""
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _failed(command: str, exc: BaseException) -> int:
    """Print the error on one line (a name read from a file may hold a newline: escaped); 2."""
    text = "".join(
        char if char.isprintable() or char == " " else repr(char)[1:-1] for char in str(exc)
    )
    print(f"arrow-split {command}: {type(exc).__name__}: {text}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
