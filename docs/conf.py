"""Sphinx configuration: the Markdown pages of docs/ (MyST) and the API from the docstrings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import arrow_split  # noqa: E402

project = "arrow_split"
author = "arrow_split contributors"
release = arrow_split.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "benchmarks/*.md"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

html_theme = "alabaster"
html_title = f"arrow_split {release}"

# Nitpicky: every reference must resolve (CI builds with -W, warnings as errors).
nitpicky = True

# Type aliases instead of their expansions (numpy's ArrayLike is a 200-character union), and the
# library's own Literal aliases by name, linked to their entries in the reference.
_ALIASES = (
    "ColumnKind",
    "JournalSync",
    "OnDuplicate",
    "Role",
    "SplitMethod",
    "TrainDataLayout",
)
_SCHEMA_ALIASES = ("ColumnStorage", "GlobalShape", "LengthRule", "ObjectCodec")
autodoc_type_aliases = {
    "npt.ArrayLike": "numpy.typing.ArrayLike",
    "ArrayLike": "numpy.typing.ArrayLike",
    **{name: f"arrow_split.{name}" for name in _ALIASES},
    **{name: f"arrow_split.schema.{name}" for name in _SCHEMA_ALIASES},
    "Locality": "arrow_split.ray.Locality",
    "OnFetch": "arrow_split.ray.OnFetch",
    "ColumnSet": "arrow_split.testing.ColumnSet",
    "ObjectRef": "ray.ObjectRef",
}

# Intersphinx: links to numpy, pyarrow, torch and Ray. Their inventories are fetched over the
# network, which a hosted build has (Read the Docs sets READTHEDOCS) and an offline build or CI
# does not: there a failed fetch would be a warning, and -W fails on it. So the mapping is on
# where the network is (or ARROW_SPLIT_DOCS_INTERSPHINX=1 asks for it), and offline the names of
# those packages, and of the standard library, are left unresolved on purpose (nitpick_ignore).
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}
if os.environ.get("READTHEDOCS") or os.environ.get("ARROW_SPLIT_DOCS_INTERSPHINX") == "1":
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable", None),
        "pyarrow": ("https://arrow.apache.org/docs", None),
        "torch": ("https://docs.pytorch.org/docs/stable", None),
        "ray": ("https://docs.ray.io/en/latest", None),
        "pandas": ("https://pandas.pydata.org/docs", None),
        "polars": ("https://docs.pola.rs/api/python/stable", None),
    }
_EXTERNAL = (
    r"(numpy|np|npt|pyarrow|pa|torch|ray|pandas|polars|hypothesis|collections|os|typing)\..*"
)
nitpick_ignore_regex = [] if intersphinx_mapping else [(r"py:.*", _EXTERNAL)]
# Private helpers that a public signature names but the reference does not document.
nitpick_ignore = [
    ("py:class", "arrow_split.ray._nodes.NodeRows"),
    ("py:class", "NodeRows"),
    ("py:class", "arrow_split._journal.JournalDamage"),
    ("py:class", "arrow_split._journal_scan.JournalDamage"),  # where it lives now
    ("py:class", "ObjectRef"),  # ray.ObjectRef, named under TYPE_CHECKING in the Ray leaf
    ("py:class", "default 0"),  # numpydoc's "int, default 0"
    ("py:meth", "RolloutBatch.from_train_data"),  # a short name in the Ray leaf's docstrings
]
# Type variables, private helpers and short names in the docstrings of the modules added in
# 0.4.0 (errors, routing and blocks, prefetch, byte stores), and the standard library and
# Mooncake where no inventory is fetched: named, not documented pages of their own.
nitpick_ignore += [
    ("py:class", name)
    for name in (
        "arrow_split.errors._E",
        "arrow_split.ray._block.FilledT",
        "arrow_split.prefetch.SourceT",
        "arrow_split.prefetch.ResultT",
        "arrow_split.ray._prefetch.ResultT",
        "arrow_split._codecs._ranges.Node",
        "arrow_split.ray.OnFetch",
        "arrow_split.ray.Locality",
        "SourceT",
        "ResultT",
        "ProcessRolloutData",
        "optional",
        "pathlib.Path",
        "subprocess.Popen",
        "mooncake.store.MooncakeDistributedStore",
    )
] + [
    ("py:data", "MISTAKES"),
    ("py:func", "mistake"),
    ("py:meth", "__str__"),
    ("py:attr", "device"),
    ("py:attr", "allocations"),
]
# The Literal aliases of the leaves, named by their signatures (their values: the docstrings).
nitpick_ignore += [
    (role, name)
    for role in ("py:class", "py:data")
    for name in ("Locality", "OnFetch", "ColumnSet")
]

# Sphinx 9 renders an alias inside a union (``npt.ArrayLike | None``) by its repr,
# "TypeAliasForwardRef('numpy.typing.ArrayLike')": render it by its name, which the Python
# domain then links like any other type.
from sphinx.util import inspect as _sphinx_inspect  # noqa: E402

_sphinx_inspect.TypeAliasForwardRef.__repr__ = lambda self: str(self.name)  # type: ignore[method-assign]
