"""The architecture rules, checked on the source of the package and the benchmarks with :mod:`ast`.

- Imports point one way. A leaf (``ray``, ``torch``, ``testing``, ``compat``, the command line)
  imports, from the core, only names in the ``__all__`` of a public module (``arrow_split``,
  ``arrow_split.plan``, ``arrow_split.schema``, ...: no part of the module's path starts with
  ``_``), and the one internal interface :data:`INTERNAL_INTERFACE`; its own modules freely.
  Nothing in the core imports a leaf. A leaf imports another leaf's public names only where it
  is built on it (:data:`BUILDS_ON`); the command line runs the demo, which uses every leaf.
- The benchmarks use the public API only: names in the ``__all__`` of public modules, the leaves'
  public modules (``arrow_split.testing``, ``arrow_split.ray``...) included.
- Neither a leaf nor a benchmark reads a private attribute (``obj._name`` where ``obj`` is not
  ``self``, ``cls`` or a module of the standard library: ``os._exit`` is public).
- Only the kinds (``arrow_split._codecs``: one module per kind, one table) branch on a column's
  kind, its tensor role or its codec's class, and only they walk a nested Arrow type (a codec
  gives its column's type and reads one back). Every kind has its module and its row.
- Only the schema spells the known field names; the rest of the library finds a column by its
  role. Text (docstrings, messages) may name fields, so may a function its own parameters, a
  comparison with a spec's length rule (``rule == "tokens"``) and a value annotated as a
  ``LengthRule``; the generators of ``arrow_split.testing`` and the demo write train data as a
  user does, keyed by field name, and are not held to this rule.

No rule has an allow-list: code that breaks one is changed, or the rule is.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

import arrow_split
from arrow_split import KNOWN_COLUMNS, ColumnKind
from arrow_split.schema import LengthRule

PACKAGE = Path(arrow_split.__file__).parent
BENCHMARKS = PACKAGE.parent / "benchmarks"
LEAF_PACKAGES = ("ray", "torch", "testing", "compat", "mooncake")
COMMAND_LINE = ("__main__.py", "_demo.py")
INTERNAL_INTERFACE = "arrow_split._args"
"""The one internal module a leaf may import: the parsing rule of each kind of argument, so that a
leaf parses `dp_size`, `dp_rank` or a flag exactly as the core does."""
BUILDS_ON = {"compat": ("ray", "mooncake"), "command line": LEAF_PACKAGES}
"""The leaves each leaf is built on (their public names only): miles' hand-off is a Ray put and
get, or a Mooncake one, so the miles drop-in calls the Ray or Mooncake leaf as miles' own code
calls Ray or Mooncake."""
WRITES_TRAIN_DATA = ("testing/", "__main__.py", "_demo.py", "_dashboard.py")
"""Code that writes the classic train-data dict as a user does, by field name (and its static
types, whose keys `test_the_train_data_types_name_every_known_column` holds to the schema); the
dashboard file maps known keys to miles' own column names."""


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path))


def _benchmarks() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(BENCHMARKS.rglob("*.py")):
        yield f"benchmarks/{path.relative_to(BENCHMARKS).as_posix()}", ast.parse(path.read_text())


def _is_leaf(rel: str) -> bool:
    return rel.split("/")[0] in LEAF_PACKAGES or rel in COMMAND_LINE


def _leaf_of(rel: str) -> str:
    return rel.split("/")[0] if "/" in rel else "command line"


def _leaf_module(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LEAF_PACKAGES:
        return parts[1]
    if len(parts) > 1 and f"{parts[1]}.py" in COMMAND_LINE:
        return "command line"
    return None


def _is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


def _imports(tree: ast.Module) -> Iterator[tuple[str, list[str]]]:
    """Every arrow_split module a file imports, with the names it takes from it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [alias.name for alias in node.names]


def _package_imports(tree: ast.Module) -> Iterator[tuple[str, list[str]]]:
    """The arrow_split imports; ``from arrow_split import ray`` counts as importing the leaf."""
    for module, names in _imports(tree):
        if module.split(".")[0] != "arrow_split":
            continue
        yield module, names
        if module == "arrow_split":
            leaves = (f"{module}.{name}" for name in names)
            yield from ((leaf, []) for leaf in leaves if _leaf_module(leaf) is not None)


def _not_public(module: str, names: list[str]) -> list[str]:
    """What an import takes that is not public: the module itself, or names outside ``__all__``."""
    if _is_private(module):
        return [module]
    public = set(importlib.import_module(module).__all__)
    return [
        f"{module}.{name}"
        for name in names
        if name not in public and not _is_public_submodule(f"{module}.{name}")
    ]


def _is_public_submodule(module: str) -> bool:
    if _is_private(module):
        return False
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _leaf_import_faults(rel: str, module: str, names: list[str]) -> list[str]:
    own, target = _leaf_of(rel), _leaf_module(module)
    if target == own or module == INTERNAL_INTERFACE:
        return []
    if target is not None and target not in BUILDS_ON.get(own, ()):
        return [f"{module} (another leaf)"]
    return _not_public(module, names)


def _needs_every_leaf() -> None:
    """Reading a leaf's ``__all__`` imports it: skip without its dependency (make test-min)."""
    pytest.importorskip("ray")
    pytest.importorskip("torch")
    try:  # the wheel is Linux-only, and links libibverbs1
        import mooncake.store  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"needs Mooncake's store: {exc}")


def test_leaves_import_only_public_names_of_the_core() -> None:
    _needs_every_leaf()
    found = [
        f"{rel}: {fault}"
        for rel, tree in _modules()
        if _is_leaf(rel)
        for module, names in _package_imports(tree)
        for fault in _leaf_import_faults(rel, module, names)
    ]
    assert found == [], "import a name of a public module's `__all__`"


def test_the_benchmarks_use_the_public_api_only() -> None:
    _needs_every_leaf()
    found = [
        f"{rel}: {fault}"
        for rel, tree in _benchmarks()
        for module, names in _package_imports(tree)
        for fault in _not_public(module, names)
    ]
    assert found == [], "benchmarks use the public API and `arrow_split.testing`"


def test_the_core_imports_no_leaf() -> None:
    found = [
        (rel, module)
        for rel, tree in _modules()
        if not _is_leaf(rel)
        for module, _ in _package_imports(tree)
        if _leaf_module(module) is not None
    ]
    assert found == []


def _stdlib_modules(tree: ast.Module) -> set[str]:
    """Names a file binds to a module of the standard library (whose ``os._exit`` is public)."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.split(".")[0] in sys.stdlib_module_names
    }


def _private_attributes(tree: ast.Module) -> Iterator[str]:
    exempt = {"self", "cls", *_stdlib_modules(tree)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") and node.attr.endswith("__"):
            continue  # a dunder is a protocol, not a private attribute
        if isinstance(node.value, ast.Name) and node.value.id in exempt:
            continue
        yield ast.unparse(node)


def test_leaves_and_benchmarks_read_no_private_attribute() -> None:
    files = [(rel, tree) for rel, tree in _modules() if _is_leaf(rel)]
    found = [
        f"{rel}: {attribute}"
        for rel, tree in [*files, *_benchmarks()]
        for attribute in _private_attributes(tree)
    ]
    assert found == [], "use the object's public API (or make what is needed public)"


def _kind_names(tree: ast.Module) -> set[str]:
    """Module-level names bound to a collection of column kinds."""
    kinds = set(get_args(ColumnKind))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            strings = {
                child.value
                for child in ast.walk(node.value)
                if isinstance(child, ast.Constant) and isinstance(child.value, str)
            }
            if strings & kinds:
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _names_a_kind(node: ast.expr, kind_names: set[str]) -> bool:
    kinds = set(get_args(ColumnKind))
    if isinstance(node, ast.Constant):
        return node.value in kinds
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_kind(element, kind_names) for element in node.elts)
    return isinstance(node, ast.Name) and node.id in kind_names


def _asks_a_kind(node: ast.AST, kind_names: set[str]) -> bool:
    """A comparison with a kind or a tensor role, or an ``isinstance`` check of a codec class."""
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        return any(
            _names_a_kind(side, kind_names)
            or (isinstance(side, ast.Attribute) and side.attr == "tensor_role")
            for side in sides
        )
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance" and node.args[1:]:
        return any(
            isinstance(name, ast.Name) and name.id.endswith(("Codec", "Kind", "Global"))
            for name in ast.walk(node.args[1])
        )
    return False


def _kind_branches(files: Iterator[tuple[str, ast.Module]]) -> set[tuple[str, str]]:
    found = set()
    for rel, tree in files:
        if rel.startswith("_codecs/"):
            continue
        kind_names = _kind_names(tree)
        found |= {
            (rel, ast.unparse(node)) for node in ast.walk(tree) if _asks_a_kind(node, kind_names)
        }
    return found


def test_only_the_kinds_branch_on_a_column_kind() -> None:
    assert _kind_branches(_modules()) == set(), "ask the column's kind (`codec_for(spec)`) instead"


def test_each_kind_is_one_module_and_one_row() -> None:
    from arrow_split._codecs import KINDS
    from arrow_split._codecs._kind import Codec, Kind

    assert sorted(KINDS) == sorted(get_args(ColumnKind)), "one row per ColumnKind"
    for name, kind in KINDS.items():
        assert isinstance(kind, Kind), name
        assert type(kind).__module__ == f"arrow_split._codecs.{name}", "the kind's own module"
        assert not getattr(type(kind), "__abstractmethods__", None), f"{name}: all of its interface"
        assert isinstance(kind.text, str), f"{name}: what a value of the kind is, for people"
        assert isinstance(kind, Codec) is kind.per_sample, f"{name}: a per-sample kind is a Codec"


NESTED_TYPES = ("is_fixed_size_list", "is_large_list", "is_list", "is_struct", "list_size")


def test_only_the_codecs_walk_nested_arrow_types() -> None:
    found = [
        f"{rel}: {ast.unparse(node)}"
        for rel, tree in _modules()
        if not rel.startswith("_codecs/")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in NESTED_TYPES
    ]
    assert found == [], "ask the column's codec, or `arrow_split._codecs._base`"


def _text_constants(tree: ast.Module) -> set[int]:
    """ids of string constants that are not field names (see the module docstring)."""
    text: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            text.add(id(node.value))  # a docstring (module, class, function or attribute)
        elif isinstance(node, ast.JoinedStr):
            text.update(id(child) for child in ast.walk(node))
        elif isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "msg" for target in node.targets
        ):
            text.update(id(child) for child in ast.walk(node.value))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            text.update(_own_parameters(node))
        elif isinstance(node, ast.Compare) and any(map(_is_length_rule, _sides(node))):
            text.update(id(side) for side in _sides(node) if _is_rule_word(side))
        elif isinstance(node, ast.AnnAssign) and "LengthRule" in ast.unparse(node.annotation):
            text.update(id(child) for child in ast.walk(node) if _is_rule_word(child))
    return text


def _sides(node: ast.Compare) -> list[ast.expr]:
    return [node.left, *node.comparators]


def _is_length_rule(node: ast.expr) -> bool:
    """A spec's length rule: ``spec.length``, or a name ``rule``."""
    return (isinstance(node, ast.Attribute) and node.attr == "length") or (
        isinstance(node, ast.Name) and node.id == "rule"
    )


def _is_rule_word(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in get_args(LengthRule)


def _own_parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[int]:
    """ids of string constants in a function that spell one of its own parameters."""
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    names = {argument.arg for argument in every}
    for child in ast.walk(function):
        if isinstance(child, ast.Constant) and child.value in names:
            yield id(child)


def _field_names_in_code() -> set[tuple[str, str]]:
    found = set()
    for rel, tree in _modules():
        if rel == "schema.py" or rel.startswith(WRITES_TRAIN_DATA):
            continue
        text = _text_constants(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in KNOWN_COLUMNS
                and id(node) not in text
            ):
                found.add((rel, node.value))
    return found


def test_only_the_schema_spells_field_names() -> None:
    assert _field_names_in_code() == set(), "find the column by its role (`role_column`) instead"


def _leaf_faults(source: str) -> list[str]:
    tree = ast.parse(source)
    return [
        fault
        for module, names in _package_imports(tree)
        for fault in _leaf_import_faults("ray/_x.py", module, names)
    ]


@pytest.mark.parametrize(
    ("rule", "source", "expected"),
    [
        ("leaf-import", "from arrow_split._split import take_rows", True),
        ("leaf-import", "from arrow_split import take_rows", False),
        ("leaf-import", "from arrow_split import Plan, dataclasses", True),
        ("leaf-import", "from arrow_split.schema import role_column", False),
        ("leaf-import", "from arrow_split.plan import np", True),
        ("leaf-import", "from arrow_split._args import check_dp_size", False),
        ("leaf-import", "from arrow_split.torch import to_tensors", True),
        ("leaf-import", "from arrow_split import torch", True),
        ("leaf-import", "from arrow_split.ray._eager import rank_slice", False),
        ("private", "shard._replace_shard(rows=1)", True),
        ("private", "self._rows", False),
        ("private", "type(x).__name__", False),
        ("private", "import os\nos._exit(0)", False),
        ("private", "import ray\nray._private", True),
        ("kind", "x = spec.kind == 'per_token'", True),
        ("kind", "x = dtype.kind == 'f'", False),
        ("kind", "x = codec.tensor_role != 'scalar'", True),
        ("kind", "x = isinstance(codec_for(spec), ScalarCodec)", True),
        ("kind", "x = codec_for(spec).one_number", False),
        ("name", "key = 'loss_masks'", True),
        ("name", "msg = 'add `loss_masks`'", False),
        ("name", "def f():\n    'loss_masks'", False),
        ("name", "x = {'tokens': [[]]}", True),
        ("name", "x = rule == 'tokens'", False),
        ("name", "def f(rollout_ids):\n    g('rollout_ids')", False),
        ("name", "rule: LengthRule = 'tokens'", False),
    ],
)
def test_the_rules_catch_what_they_should(rule: str, source: str, expected: bool) -> None:
    tree = ast.parse(source)
    if rule == "leaf-import":
        caught = bool(_leaf_faults(source))
    elif rule == "private":
        caught = any(True for _ in _private_attributes(tree))
    elif rule == "kind":
        caught = any(_asks_a_kind(node, set()) for node in ast.walk(tree))
    else:
        text = _text_constants(tree)
        caught = any(
            isinstance(node, ast.Constant) and node.value in KNOWN_COLUMNS and id(node) not in text
            for node in ast.walk(tree)
        )
    assert caught is expected


def _module_name(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["arrow_split", *parts])


# Import circles left to fix: (module, module) -> reason. The list only shrinks.
IMPORT_CIRCLES: dict[tuple[str, str], str] = {}


def _runtime(tree: ast.Module) -> ast.Module:
    """``tree`` without its ``if TYPE_CHECKING:`` blocks (imports for the type checker only)."""
    body = [
        node
        for node in tree.body
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    ]
    return ast.Module(body=body, type_ignores=[])


def test_no_module_imports_itself_back() -> None:
    # Every import that runs counts, at the top or inside a function (a lazy import is still a
    # circle); an import for the type checker only never runs (the kinds name the spec's type,
    # the spec asks its kind). The package itself is left out: it re-exports the public names.
    graph = {
        _module_name(rel): {m for m, _ in _package_imports(_runtime(tree)) if m != "arrow_split"}
        for rel, tree in _modules()
    }
    for left, right in IMPORT_CIRCLES:
        graph[left].discard(right)
    circles = []
    for start in graph:
        stack, seen = [(start, [start])], {start}
        while stack:
            module, path = stack.pop()
            for imported in graph.get(module, set()):
                if imported == start:
                    circles.append(" -> ".join([*path, imported]))
                elif imported not in seen:
                    seen.add(imported)
                    stack.append((imported, [*path, imported]))
    assert circles == [], "an import circle: move the shared part below both modules"


def test_the_train_data_types_name_every_known_column() -> None:
    tree = ast.parse((PACKAGE / "schema.py").read_text())
    typed = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    missing = set(KNOWN_COLUMNS) - typed
    assert missing == set(), "give each known column its type in arrow_split/schema.py"
