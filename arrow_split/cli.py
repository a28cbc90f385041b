"""Command line: ``python -m arrow_split demo|inspect`` (or the ``arrow-split`` console script).

``demo`` runs :mod:`arrow_split.demo` (rollout -> data-parallel train actors on a local Ray, every
sample's values checked), importing Ray and torch only then; ``inspect`` summarizes a dump.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from arrow_split.errors import ArrowSplitError

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
    from arrow_split import __version__

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
    demo.add_argument("--samples", type=_positive_int, default=512, help="samples per step")
    demo.add_argument(
        "--mean-response", type=_positive_int, default=1024, help="mean response length"
    )
    demo.add_argument("--max-response", type=_positive_int, default=4096, help="response cap")
    demo.add_argument("--dp-size", type=_positive_int, default=8, help="data-parallel ranks")
    demo.add_argument("--steps", type=_positive_int, default=3, help="steps per mode")
    demo.add_argument(
        "--mode", choices=("eager", "delayed", "both"), default="both", help="hand-offs to run"
    )
    demo.add_argument(
        "--strided", action="store_true", help="strided plan instead of the balanced one"
    )
    demo.add_argument("--moe", action="store_true", help="add routed experts (4 layers, top-2)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the generated batches")
    inspect = commands.add_parser("inspect", help="summarize a rollout dump written by batch.write")
    inspect.add_argument("path", help="the dump file (Arrow IPC)")
    inspect.add_argument(
        "--dp-size",
        type=_positive_int,
        action="append",
        help="show the plan fingerprints for this DP size (repeatable; default: 8 and 64)",
    )
    return parser


def _inspect(arguments: argparse.Namespace) -> int:
    from arrow_split.summary import inspect_path

    try:
        print(inspect_path(arguments.path, tuple(arguments.dp_size or (8, 64))))
    except (ArrowSplitError, FileNotFoundError) as exc:
        print(f"arrow-split inspect: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 2
    return 0


def _check(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    arguments = parser.parse_args(argv)
    if arguments.command == "inspect":
        return _inspect(arguments)
    _check(arguments, parser)
    try:
        import ray  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        print(
            f"arrow-split demo: needs Ray and PyTorch ({exc.name or exc} is not installed); "
            "install them with: pip install 'arrow-split[ray,torch]'",
            file=sys.stderr,
        )
        return 1
    from arrow_split.demo import DemoConfig, run_demo

    config = DemoConfig(
        samples=arguments.samples,
        mean_response=arguments.mean_response,
        max_response=arguments.max_response,
        dp_size=arguments.dp_size,
        steps=arguments.steps,
        modes=("eager", "delayed") if arguments.mode == "both" else (arguments.mode,),
        balance_data=not arguments.strided,
        moe=arguments.moe,
        seed=arguments.seed,
    )
    try:
        return run_demo(config)
    except ArrowSplitError as exc:
        print(f"arrow-split demo: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: BaseException) -> str:
    """The message on one line: a name read from a file may hold a newline (shown escaped)."""
    text = str(exc)
    return "".join(char if char.isprintable() or char == " " else repr(char)[1:-1] for char in text)
