"""Every Python block of README.md and docs/*.md, and every docstring example, runs as a test.

Sybil collects them: the blocks of one page run in order in one namespace (a page reads as one
script), each page in a fresh temporary working directory with a small stand-in for miles on the
import path (what ``arrow_split.compat.miles.install()`` patches). docs/ray.md runs on a local
Ray started for that page and is marked ``ray``; docs/torch.md and the torch leaf's docstrings are
marked ``torch`` and skipped without PyTorch; docs/mooncake.md is marked ``mooncake`` and skipped
where Mooncake's store cannot be imported; docs/reading-dumps.md skips a block whose reader
(polars, duckdb) is not installed.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib.util
import io
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from sybil import Example, Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.integration import pytest as sybil_pytest
from sybil.parsers.markdown import CodeBlockParser, SkipParser
from sybil.parsers.rest import DocTestParser
from sybil.sybil import SybilCollection

ROOT = Path(__file__).resolve().parent
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
RAY_PAGES = ("docs/ray.md",)
TORCH_PAGES = ("docs/torch.md",)
MOONCAKE_PAGES = ("docs/mooncake.md",)

# A stand-in with the modules and names of miles that install() patches; the functions say
# "miles" so that a page can show they were replaced.
_STAND_IN_MILES = {
    "miles/__init__.py": "",
    "miles/ray/__init__.py": "",
    "miles/ray/rollout/__init__.py": "",
    "miles/utils/__init__.py": "",
    "miles/ray/rollout/train_data_conversion.py": """
        def split_train_data_by_dp(args, data, train_parallel_config): return "miles"
        def split_train_data_by_dp_raw(args, data, *, dp_size): return "miles"
        def split_train_data_by_dp_scheduled_raw(args, data, *, train_parallel_config):
            return "miles"
        def can_schedule_on_rollout_side(args, data, train_parallel_config): return "miles"
        def process_rollout_data_shard(args, rollout_data): return "miles"
    """,
    "miles/utils/data.py": """
        from miles.ray.rollout.train_data_conversion import split_train_data_by_dp_raw
        def process_rollout_data(args, rollout_data_ref, dp_rank, dp_size, witness_info):
            return "miles"
    """,
}


_sybil_filter = sybil_pytest.SybilItem._traceback_filter


def _traceback_filter(self: sybil_pytest.SybilItem, excinfo: pytest.ExceptionInfo[BaseException]):  # type: ignore[no-untyped-def]
    """Sybil's filter, or the whole traceback where it has no frame to cut (it would crash)."""
    try:
        return _sybil_filter(self, excinfo)
    except IndexError:
        return excinfo.traceback


sybil_pytest.SybilItem._traceback_filter = _traceback_filter  # type: ignore[method-assign]


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _mooncake_missing() -> str | None:
    """Why Mooncake's store cannot be imported (the wheel, or libibverbs1 it links), or None."""
    try:
        import mooncake.store  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def docs_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A page's working directory (a fresh temporary one) with the stand-in miles importable."""
    folder = tmp_path_factory.mktemp("page")
    for relative, text in _STAND_IN_MILES.items():
        path = folder / "site" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    before = set(sys.modules)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.syspath_prepend(str(folder / "site"))
        yield folder
    for name in set(sys.modules) - before:
        if name == "miles" or name.startswith("miles."):
            del sys.modules[name]


@pytest.fixture(scope="module")
def docs_ray() -> Iterator[None]:
    """A local Ray for one page (2 CPUs, a 300 MB object store), shut down after it."""
    import ray

    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", python_path)  # the workers import this checkout
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=300 * 1024 * 1024,
            log_to_driver=False,
            logging_level="ERROR",  # type: ignore[arg-type]  # Ray takes a name too
        )
    try:
        yield
    finally:
        ray.shutdown()


_python = PythonEvaluator()
_OUTPUT = "__printed__"


def _run_python(example: Example) -> None:
    """Run a ```python block; keep what it printed for an ```output block that follows."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        _python(example)
    example.namespace[_OUTPUT] = printed.getvalue()


def _check_output(example: Example) -> str | None:
    """An ```output block is exactly what the ```python block before it printed."""
    printed = example.namespace.pop(_OUTPUT, None)
    expected = str(example.parsed)
    if printed is None:
        return "an ```output block must follow a ```python block"
    if printed.strip() != expected.strip():
        return f"the block above printed:\n{printed}\nthe page says:\n{expected}"
    return None


def _setup(namespace: dict[str, object]) -> None:
    """A page runs as a script (``__main__``: Ray pickles its classes by value)."""
    namespace["__name__"] = "__main__"
    namespace["HAVE_POLARS"] = _has("polars")
    namespace["HAVE_DUCKDB"] = _has("duckdb")


def _markdown_parsers() -> list[object]:
    return [
        CodeBlockParser("python", _run_python),
        CodeBlockParser("output", _check_output),
        SkipParser(),
    ]


_pages = Sybil(
    parsers=_markdown_parsers(),  # type: ignore[arg-type]
    patterns=["README.md", "docs/*.md"],
    excludes=list(RAY_PAGES),
    fixtures=["docs_page"],
    setup=_setup,
    name="page",
)
_ray_pages = Sybil(
    parsers=_markdown_parsers(),  # type: ignore[arg-type]
    patterns=list(RAY_PAGES),
    fixtures=["docs_page", "docs_ray"],
    setup=_setup,
    name="ray-page",
)
_docstrings = Sybil(
    parsers=[DocTestParser(optionflags=FLAGS)],
    path="arrow_split",
    patterns=["*.py"],
    name="docstring",
)

pytest_collect_file = SybilCollection([_pages, _ray_pages, _docstrings]).pytest()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the Ray pages and the Ray leaf ``ray``, the torch ones ``torch`` (skipped without)."""
    no_torch = pytest.mark.skip(reason="needs PyTorch: pip install arrow-split[torch]")
    no_ray = pytest.mark.skip(reason="needs Ray: pip install arrow-split[ray]")
    for item in items:
        relative = item.path.relative_to(ROOT).as_posix() if item.path.is_relative_to(ROOT) else ""
        if relative in RAY_PAGES or relative.startswith("arrow_split/ray/"):
            item.add_marker(pytest.mark.ray)
            if not _has("ray"):
                item.add_marker(no_ray)
        if relative in MOONCAKE_PAGES or relative.startswith("arrow_split/mooncake/"):
            item.add_marker(pytest.mark.mooncake)
            missing = _mooncake_missing()
            if missing is not None:
                item.add_marker(pytest.mark.skip(reason=f"needs Mooncake's store: {missing}"))
        if relative in TORCH_PAGES or relative.startswith("arrow_split/torch/"):
            item.add_marker(pytest.mark.torch)
            if not _has("torch"):
                item.add_marker(no_torch)
