"""The public names: sorted, complete, importable, and every public module keeps an ``__all__``."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import arrow_split

# Every module, private ones and the leaves included (the test environment has Ray and torch).
MODULES = [
    name.removeprefix("arrow_split.")
    for module in pkgutil.walk_packages(arrow_split.__path__, "arrow_split.")
    if not (name := module.name).endswith("__main__")
]


def test_all_is_sorted_and_unique() -> None:
    assert arrow_split.__all__ == sorted(arrow_split.__all__)
    assert len(set(arrow_split.__all__)) == len(arrow_split.__all__)


def test_every_public_name_exists() -> None:
    for name in arrow_split.__all__:
        assert hasattr(arrow_split, name), name


def test_every_public_top_level_object_is_exported() -> None:
    public = {name for name in vars(arrow_split) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(arrow_split, name)).__name__ == "module"}
    assert public - modules - {"annotations"} <= set(arrow_split.__all__)


@pytest.mark.parametrize("module_name", MODULES)
def test_every_module_declares_a_sorted_all(module_name: str) -> None:
    try:
        module = importlib.import_module(f"arrow_split.{module_name}")
    except ImportError as exc:  # a leaf whose dependency is not installed (the min-version run)
        pytest.skip(str(exc))
    assert module.__all__ == sorted(module.__all__), module_name
    for name in module.__all__:
        assert hasattr(module, name), f"{module_name}.{name}"


def test_the_fixed_names_of_the_api() -> None:
    for name in (
        "RolloutBatch",
        "plan_partitions",
        "split_train_data_by_dp_raw",
        "shard_for_rank",
        "plan_fingerprint",
    ):
        assert name in arrow_split.__all__
    assert callable(arrow_split.RolloutBatch.from_train_data)
    assert callable(arrow_split.RolloutBatch.to_train_data)


def test_one_name_means_one_function_across_arrow_splits_own_namespaces() -> None:
    """A name two of arrow_split's own public namespaces export is one object.

    ``arrow_split.compat.miles`` is the documented exception: it keeps miles' signatures under
    miles' names (docs/miles.md, "One name, one function").
    """
    names = ["arrow_split", "arrow_split.testing"]
    names += [f"arrow_split.{leaf}" for leaf in ("ray", "torch") if importlib.util.find_spec(leaf)]
    seen: dict[str, tuple[str, object]] = {}
    for module_name in names:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            first = seen.setdefault(name, (module_name, value))
            assert first[1] is value, f"`{name}` means two things: {first[0]} and {module_name}"


# The public faces: each gathers the names of its own package's private modules.
FACES = {
    "arrow_split",
    "arrow_split.batch",
    "arrow_split.compat.miles",
    "arrow_split.mooncake",
    "arrow_split.ray",
    "arrow_split.stores",
    "arrow_split.testing",
    "arrow_split.torch",
}


def _imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def _listed(path: Path) -> list[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return []


def test_no_module_reexports_another_modules_names() -> None:
    root = Path(arrow_split.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name in FACES:
            continue
        found += [f"{name}.{item}" for item in set(_listed(path)) & _imported_names(path)]
    assert found == [], "list a name in the `__all__` of the module that defines it"


def test_a_face_takes_its_names_from_its_own_package_only() -> None:
    root = Path(arrow_split.__file__).parent
    for face in FACES - {"arrow_split"}:
        path = root.joinpath(*face.split(".")[1:], "__init__.py")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                taken = set(_listed(path)) & {alias.name for alias in node.names}
                assert not taken or node.module.startswith(face + "."), (face, node.module)
