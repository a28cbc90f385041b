"""The architecture rules, checked on the package's source with :mod:`ast`.

- Imports point one way: a leaf (``ray``, ``torch``, ``testing``, ``compat``, the command line)
  imports only the public core (``arrow_split``, ``arrow_split.plan``, ``arrow_split.schema``,
  ``arrow_split.errors``, and ``arrow_split._args``, the one parsing rule per kind of argument)
  and its own modules; nothing in the core imports a leaf; no leaf
  imports another (the command line aside: it runs the demo, which uses them all).
- Only the codecs (and the schema that declares the kinds) branch on a column's kind.
- Only the schema spells the known field names; the rest of the library finds a column by its
  role. Docstrings and error messages may name fields (they are text, not code).

Each exception is listed with its reason. An entry that no longer matches anything fails too, so
the lists only shrink.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

import arrow_split
from arrow_split import KNOWN_COLUMNS, ColumnKind

PACKAGE = Path(arrow_split.__file__).parent
LEAF_PACKAGES = ("ray", "torch", "testing", "compat")
COMMAND_LINE = ("cli.py", "demo.py", "__main__.py")
PUBLIC_CORE = ("arrow_split", "arrow_split.plan", "arrow_split.schema", "arrow_split.errors")
# The one internal interface a leaf may import: the parsing rule of each kind of argument, so that
# a leaf parses `dp_size`, `dp_rank` or a flag exactly as the core does.
INTERNAL_INTERFACE = "arrow_split._args"

# Private core modules a leaf may import: (leaf file, module) -> reason.
LEAF_PRIVATE_IMPORTS: dict[tuple[str, str], str] = {
    ("cli.py", "arrow_split._inspect"): (
        "the `inspect` summary has no public function yet; the command line is its only user"
    ),
    ("testing/_asserts.py", "arrow_split._equality"): (
        "one NaN-aware equality rule, shared with `RolloutBatch.equals`"
    ),
    ("testing/_crash.py", "arrow_split._journal"): (
        "the kill test reads a journal's whole records to count the torn tails recovery drops"
    ),
}

# Comparisons on a column's kind outside the codecs: (file, source) -> reason.
KIND_BRANCHES: dict[tuple[str, str], str] = {}

# Known field names spelled in code outside the schema: (file, name) -> reason. A file given with
# the name "*" may spell any.
FIELD_NAMES: dict[tuple[str, str], str] = {
    ("testing/_generate.py", "*"): "generates the classic train-data dict, keyed by field name",
    ("testing/strategies.py", "*"): "generates the classic train-data dict, keyed by field name",
    ("testing/_crash.py", "sample_indices"): "the identity key of the generated stream it kills",
    ("demo.py", "*"): "the demo builds and reads train data as a user does, by field name",
    ("_convert.py", "tokens"): "the LengthRule value 'tokens' (same word as the field)",
    ("torch/_layouts.py", "tokens"): "the LengthRule value 'tokens' (same word as the field)",
    ("_args.py", "rollout_ids"): "the name of `plan_schedule`'s own argument",
    ("_dump_meta.py", "tokens"): "to fix: find the length source with `role_column`",
    ("_inspect.py", "rewards"): "to fix: the summary reads rewards by name (no role for them)",
    ("_inspect.py", "response_lengths"): "to fix: use `role_column(specs, 'response_length')`",
    ("compat/_miles_keys.py", "rollout_sampling_masks"): (
        "the one column miles' two sampling-mask keys map to (no role says it)"
    ),
}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path))


def _is_leaf(rel: str) -> bool:
    return rel.split("/")[0] in LEAF_PACKAGES or rel in COMMAND_LINE


def _leaf_of(rel: str) -> str:
    return rel.split("/")[0] if "/" in rel else "command line"


def _imported(tree: ast.Module) -> Iterator[str]:
    """Every arrow_split module a file imports (``from arrow_split import x`` counts ``x``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            if node.module == "arrow_split":  # `from arrow_split import ray` imports a module
                yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _package_imports(tree: ast.Module) -> set[str]:
    return {name for name in _imported(tree) if name.split(".")[0] == "arrow_split"}


def _is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


def _leaf_module(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LEAF_PACKAGES:
        return parts[1]
    if len(parts) > 1 and f"{parts[1]}.py" in COMMAND_LINE:
        return "command line"
    return None


def _private_imports_of_leaves() -> set[tuple[str, str]]:
    found = set()
    for rel, tree in _modules():
        if not _is_leaf(rel):
            continue
        for module in _package_imports(tree):
            own = _leaf_module(module) == _leaf_of(rel)
            allowed = module in PUBLIC_CORE or module == INTERNAL_INTERFACE
            if _is_private(module) and not own and not allowed:
                found.add((rel, module))
    return found


def test_leaves_import_only_the_public_core() -> None:
    found = _private_imports_of_leaves()
    assert found - set(LEAF_PRIVATE_IMPORTS) == set(), "a leaf imports a private core module"
    assert set(LEAF_PRIVATE_IMPORTS) - found == set(), "stale entries: remove them"


def test_the_core_imports_no_leaf() -> None:
    found = [
        (rel, module)
        for rel, tree in _modules()
        if not _is_leaf(rel)
        for module in _package_imports(tree)
        if _leaf_module(module) is not None
    ]
    assert found == []


# A leaf that builds on another leaf's public API, with the reason.
LEAF_ON_LEAF = {
    ("compat/_miles_store.py", "arrow_split.ray"): "miles' hand-off is a Ray put and get: the "
    "drop-in calls the Ray leaf's public functions, as miles' own code calls Ray",
}


def test_no_leaf_imports_another() -> None:
    found = {
        (rel, module)
        for rel, tree in _modules()
        if _is_leaf(rel) and _leaf_of(rel) != "command line"
        for module in _package_imports(tree)
        if _leaf_module(module) not in (None, _leaf_of(rel))
    }
    assert found - set(LEAF_ON_LEAF) == set()
    assert set(LEAF_ON_LEAF) - found == set(), "stale entries: remove them"


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


def _kind_branches() -> set[tuple[str, str]]:
    found = set()
    for rel, tree in _modules():
        if rel.startswith("_codecs/") or rel == "schema.py":
            continue
        kind_names = _kind_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                _names_a_kind(side, kind_names) for side in [node.left, *node.comparators]
            ):
                found.add((rel, ast.unparse(node)))
    return found


def test_only_the_codecs_branch_on_a_column_kind() -> None:
    found = _kind_branches()
    assert found - set(KIND_BRANCHES) == set(), "branch through `codec_for(spec)` instead"
    assert set(KIND_BRANCHES) - found == set(), "stale entries: remove them"


def _text_constants(tree: ast.Module) -> set[int]:
    """ids of string constants that are text: docstrings, f-string parts, `msg` assignments."""
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
    return text


def _field_names_in_code() -> set[tuple[str, str]]:
    found = set()
    for rel, tree in _modules():
        if rel == "schema.py":
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
    found = _field_names_in_code()
    allowed = {
        (rel, name)
        for rel, name in found
        if (rel, "*") in FIELD_NAMES or (rel, name) in FIELD_NAMES
    }
    assert found - allowed == set(), "find the column by its role (`role_column`) instead"
    used = {(rel, "*") for rel, _ in found} | found
    assert set(FIELD_NAMES) - used == set(), "stale entries: remove them"


@pytest.mark.parametrize(
    ("rule", "source", "expected"),
    [
        ("leaf-private", "from arrow_split._split import take_rows", True),
        ("leaf-private", "from arrow_split import take_rows", False),
        ("leaf-private", "from arrow_split.schema import role_column", False),
        ("kind", "x = spec.kind == 'per_token'", True),
        ("kind", "x = dtype.kind == 'f'", False),
        ("name", "key = 'loss_masks'", True),
        ("name", "msg = 'add `loss_masks`'", False),
        ("name", "def f():\n    'loss_masks'", False),
    ],
)
def test_the_rules_catch_what_they_should(rule: str, source: str, expected: bool) -> None:
    tree = ast.parse(source)
    if rule == "leaf-private":
        modules = _package_imports(tree)
        caught = any(_is_private(m) and m not in PUBLIC_CORE for m in modules)
    elif rule == "kind":
        caught = any(
            isinstance(node, ast.Compare) and _names_a_kind(node.comparators[0], set())
            for node in ast.walk(tree)
        )
    else:
        text = _text_constants(tree)
        caught = any(
            isinstance(node, ast.Constant) and node.value in KNOWN_COLUMNS and id(node) not in text
            for node in ast.walk(tree)
        )
    assert caught is expected
