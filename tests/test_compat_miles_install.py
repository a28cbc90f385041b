"""The miles drop-in's edges: install() arguments, keys of the rank dict, flops, total lengths."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from arrow_split import ColumnSpec, InstallError, OptionTypeError, SchemaError, SchemaTypeError
from arrow_split.compat import miles
from tests.error_facts import raises_facts
from tests.test_compat_miles import FULL_CONFIG, fake_miles, make_args, make_data  # noqa: F401


@pytest.mark.parametrize(
    ("options", "error", "facts"),
    [
        ({"verbose": "no"}, OptionTypeError, {"key": "verbose", "mistake": "flag_type"}),
        ({"strict_keys": 1}, OptionTypeError, {"key": "strict_keys", "mistake": "flag_type"}),
        ({"pad_to_dp": None}, OptionTypeError, {"key": "pad_to_dp", "mistake": "flag_type"}),
        ({"specs": [1]}, SchemaTypeError, {"key": "specs[0]"}),
        ({"specs": ["score"]}, SchemaTypeError, {"key": "specs[0]"}),
        ({"specs": "score"}, SchemaTypeError, {"key": "specs"}),
        ({"specs": 5}, SchemaTypeError, {"key": "specs"}),
    ],
)
def test_bad_install_arguments_are_typed_and_patch_nothing(
    fake_miles: Path,  # noqa: F811
    options: dict[str, Any],
    error: type[Exception],
    facts: dict[str, Any],
) -> None:
    import miles.ray.rollout.train_data_conversion as conversion

    with raises_facts(error, **facts):
        miles.install(**options)
    assert conversion.split_train_data_by_dp_raw(None, None, dp_size=1) == "miles"


def test_install_still_takes_a_tuple_of_specs(fake_miles: Path) -> None:  # noqa: F811
    spec = ColumnSpec("score", "per_sample_scalar", pa.float64())
    installation = miles.install(specs=(spec,), verbose=np.bool_(False))
    installation.undo()


@pytest.mark.parametrize("key", ["partition", "micro_batch_indices", "num_microbatches"])
def test_colliding_keys_are_refused_naming_the_key(key: str) -> None:
    data = make_data([3, 4], **{key: [0, 1]})
    with raises_facts(SchemaError, key=key):
        miles.split_train_data_by_dp_raw(make_args(), data, dp_size=2)
    with raises_facts(SchemaError, key=key):
        miles.split_train_data_by_dp_scheduled_raw(
            make_args(), {**data, "rollout_ids": [0, 1]}, train_parallel_config=FULL_CONFIG
        )


@pytest.mark.parametrize("flops", [3, "flops", [1.0, 2.0]])
def test_flops_that_is_not_callable_is_typed(flops: object) -> None:
    data = {**make_data([3, 4]), "rollout_ids": [0, 1]}
    with raises_facts(OptionTypeError, key="flops"):
        miles.split_train_data_by_dp_scheduled_raw(
            make_args(), data, train_parallel_config=FULL_CONFIG, flops=flops
        )  # type: ignore[arg-type]
    with raises_facts(OptionTypeError, key="flops"):
        miles.split_train_data_by_dp(make_args(), data, FULL_CONFIG, flops=flops)  # type: ignore[arg-type]


@pytest.mark.parametrize("lengths", [["3", "4"], [3.0, 4.0], [True, 4]])
def test_total_lengths_that_are_not_ints_are_typed(lengths: list[Any]) -> None:
    shard = miles.split_train_data_by_dp_raw(make_args(), make_data([3, 4]), dp_size=2)[0]
    shard["total_lengths"] = lengths
    with raises_facts(SchemaTypeError, key="total_lengths"):
        miles.process_rollout_data_shard(make_args(), shard)
    assert shard["total_lengths"] == lengths  # untouched


def test_negative_total_lengths_are_refused() -> None:
    shard = miles.split_train_data_by_dp_raw(make_args(), make_data([3, 4]), dp_size=2)[0]
    shard["total_lengths"] = [-1, 4]
    with raises_facts(SchemaError, key="total_lengths"):
        miles.process_rollout_data_shard(make_args(), shard)


def test_numpy_total_lengths_come_back_as_python_ints() -> None:
    shard = miles.split_train_data_by_dp_raw(make_args(), make_data([3, 4]), dp_size=2)[1]
    shard["total_lengths"] = np.array([3, 4])
    done = miles.process_rollout_data_shard(make_args(), shard)
    assert done["total_lengths"] == [4]
    assert type(done["total_lengths"][0]) is int


# --- miles at #1842's merge: the rollout side's binding lives in rollout_executor -------------

_EXECUTOR = """
from miles.ray.rollout.train_data_conversion import split_train_data_by_dp
"""
_TRAINING = """
from miles.utils.data import process_rollout_data
"""
_SIX = (
    "can_schedule_on_rollout_side",
    "process_rollout_data_shard",
    "split_train_data_by_dp",
    "split_train_data_by_dp_raw",
    "split_train_data_by_dp_scheduled_raw",
    "process_rollout_data",
)


@pytest.fixture
def miles_1842(fake_miles: Path) -> Path:  # noqa: F811
    (fake_miles / "miles/ray/rollout/rollout_manager.py").unlink()
    (fake_miles / "miles/ray/rollout/rollout_executor.py").write_text(_EXECUTOR)
    for package in ("miles/backends", "miles/backends/training_utils"):
        (fake_miles / package).mkdir()
        (fake_miles / package / "__init__.py").write_text("")
    (fake_miles / "miles/backends/training_utils/data.py").write_text(_TRAINING)
    return fake_miles


def _bindings() -> dict[str, object]:
    """Every loaded miles module's binding of one of the six names."""
    import sys

    return {
        f"{module_name}.{name}": getattr(module, name)
        for module_name, module in sorted(sys.modules.items())
        if module_name.startswith("miles")
        for name in _SIX
        if hasattr(module, name)
    }


def _import_all() -> None:
    import miles.backends.training_utils.data
    import miles.ray.rollout.rollout_executor
    import miles.ray.rollout.train_data_conversion
    import miles.utils.data  # noqa: F401


def test_miles_1842_imported_first_every_binding_is_the_drop_in(miles_1842: Path) -> None:
    _import_all()
    before = _bindings()
    assert "miles.ray.rollout.rollout_executor.split_train_data_by_dp" in before
    installation = miles.install()
    after = _bindings()
    for where, value in after.items():
        name = where.rsplit(".", 1)[1]
        assert value.func is getattr(miles, name), where  # type: ignore[attr-defined]
    assert "miles.ray.rollout.rollout_executor.split_train_data_by_dp" in installation.patched
    installation.undo()
    assert _bindings() == before


def test_miles_1842_modules_imported_after_install_get_the_drop_in(miles_1842: Path) -> None:
    import importlib

    importlib.import_module("miles.ray.rollout.train_data_conversion")
    before_install = _bindings()
    installation = miles.install()
    _import_all()  # the executor binds what train_data_conversion holds now: the drop-in
    executor = importlib.import_module("miles.ray.rollout.rollout_executor")
    assert executor.split_train_data_by_dp.func is miles.split_train_data_by_dp  # type: ignore[attr-defined]
    installation.undo()  # found by identity in the executor too
    restored = _bindings()
    for where, value in before_install.items():
        assert restored[where] is value
    assert (
        executor.split_train_data_by_dp
        is before_install["miles.ray.rollout.train_data_conversion.split_train_data_by_dp"]
    )


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_undo_in_any_order_restores_miles(miles_1842: Path, order: tuple[int, int]) -> None:
    _import_all()
    before = _bindings()
    installations = [miles.install(), miles.install(pad_to_dp=True)]
    installations[order[0]].undo()
    held = _bindings()
    survivor = installations[order[1]]
    assert all(value in survivor.bound.values() for value in held.values())
    installations[order[1]].undo()
    assert _bindings() == before


def test_a_refused_binding_rolls_back_and_raises_typed(miles_1842: Path) -> None:
    import sys
    import types

    from arrow_split import InstallError

    _import_all()
    before = _bindings()

    class ReadOnly(types.ModuleType):
        def __setattr__(self, name: str, value: object) -> None:
            raise AttributeError(f"{self.__name__} is read-only")

    executor = sys.modules["miles.ray.rollout.rollout_executor"]
    executor.__class__ = ReadOnly
    try:
        with raises_facts(
            InstallError, key="miles.ray.rollout.rollout_executor.split_train_data_by_dp"
        ):
            miles.install()
    finally:
        object.__setattr__(executor, "__class__", types.ModuleType)
    assert _bindings() == before
    miles.install().undo()  # nothing was left half installed
    assert _bindings() == before


# --- bindings outside module globals (issue 29) ----------------------------------------------

_HOLDERS = """
import functools
from miles.ray.rollout.train_data_conversion import split_train_data_by_dp_raw
from miles.utils.data import process_rollout_data

class Splitter:
    split = split_train_data_by_dp_raw

QUICK = functools.partial(process_rollout_data, witness_info=None)
"""
_MORE_HOLDERS = """
from miles.ray.rollout.train_data_conversion import can_schedule_on_rollout_side as can

REGISTRY = {"can": can}

def make():
    held = can
    def inner():
        return held
    return inner

INNER = make()

def with_default(check=can):
    return check
"""


@pytest.fixture
def holders(fake_miles: Path) -> Any:  # noqa: F811
    import importlib

    (fake_miles / "miles/ray/rollout/holders.py").write_text(_HOLDERS)
    return importlib.import_module("miles.ray.rollout.holders")


def test_a_class_attribute_is_patched_and_undone_a_partial_reported(holders: Any) -> None:
    original = holders.Splitter.__dict__["split"]
    with pytest.warns(miles.UnpatchedBindingWarning) as caught:
        installation = miles.install()
    assert holders.Splitter.split.func is miles.split_train_data_by_dp_raw
    assert "miles.ray.rollout.holders.Splitter.split" in installation.patched
    assert installation.unpatched == (
        "functools.partial `miles.ray.rollout.holders.QUICK`: process_rollout_data",
    )
    assert len(caught) == 1
    assert str(caught[0].message).startswith(
        "install() cannot rebind miles' `process_rollout_data` in the functools.partial "
        "`miles.ray.rollout.holders.QUICK`: it still calls miles' own"
    )
    installation.undo()
    assert holders.Splitter.__dict__["split"] is original
    assert holders.Splitter.split(None, None, dp_size=1) == "miles"


def test_dicts_closures_and_defaults_holding_miles_are_reported(
    holders: Any,
    fake_miles: Path,  # noqa: F811
) -> None:
    import importlib

    (fake_miles / "miles/ray/rollout/more_holders.py").write_text(_MORE_HOLDERS)
    importlib.import_module("miles.ray.rollout.more_holders")
    with pytest.warns(miles.UnpatchedBindingWarning):
        installation = miles.install()
    installation.undo()
    where = "miles.ray.rollout.more_holders"
    assert set(installation.unpatched) == {
        "functools.partial `miles.ray.rollout.holders.QUICK`: process_rollout_data",
        f"dict `{where}.REGISTRY`: can_schedule_on_rollout_side",
        f"cell of `{where}.make.<locals>.inner`: can_schedule_on_rollout_side",
        f"tuple of `{where}.with_default`: can_schedule_on_rollout_side",
    }


def test_a_local_container_is_no_binding(fake_miles: Path) -> None:  # noqa: F811
    import miles.ray.rollout.train_data_conversion as conversion

    held = [conversion.split_train_data_by_dp_raw]
    installation = miles.install()  # no warning: a local variable is not a binding
    installation.undo()
    assert installation.unpatched == ()
    assert held[0](None, None, dp_size=1) == "miles"


def test_class_attributes_undo_in_any_order(holders: Any) -> None:
    original = holders.Splitter.__dict__["split"]
    with pytest.warns(miles.UnpatchedBindingWarning):
        first, second = miles.install(), miles.install(pad_to_dp=True)
    first.undo()
    assert holders.Splitter.__dict__["split"] is second.bound["split_train_data_by_dp_raw"]
    second.undo()
    assert holders.Splitter.__dict__["split"] is original


# --- miles' store, and holders install() cannot rebind -------------------------------------------

_STORE = """
    class ObjectStoreGetResult:
        def __init__(self, value, release_fn):
            self.value = value

    class RayObjectStore:
        def put(self, value, value_spec=None):
            return ("miles put", value)

        def get(self, ref):
            return ObjectStoreGetResult(ref, lambda value: None)
"""


def _write(root: Path, relative: str, text: str) -> None:
    import textwrap

    (root / relative).write_text(textwrap.dedent(text))


def test_the_store_class_is_patched_for_instances_built_before_and_undone(
    fake_miles: Path,  # noqa: F811
) -> None:
    _write(fake_miles, "miles/utils/object_store.py", _STORE)
    from miles.utils import object_store

    built_before = object_store.RayObjectStore()
    own_put = object_store.RayObjectStore.put
    installation = miles.install()
    assert "miles.utils.object_store.RayObjectStore.put" in installation.patched
    assert type(built_before).put is not own_put  # the class: every instance, old and new
    assert built_before.put({"other": 1}) == ("miles put", {"other": 1})  # not train data
    shard = {"tokens": [[1]], "partition": [0]}  # a rank's dict, not a whole batch
    assert built_before.put(shard) == ("miles put", shard)
    assert miles.current_installation() is installation
    second = miles.install(strict_keys=True)
    assert "miles.utils.object_store.RayObjectStore.put" in second.patched
    installation.undo()
    assert type(built_before).put is not own_put  # still installed by the second
    second.undo()
    assert object_store.RayObjectStore.put is own_put
    assert miles.current_installation() is None


@pytest.mark.parametrize(
    ("store", "problem"),
    [
        (
            "class ObjectStoreGetResult:\n    def __init__(self, value, release_fn): pass\n",
            "missing",
        ),
        (
            _STORE.replace("def put(self, value, value_spec=None)", "def put(self, data)"),
            "`RayObjectStore.put` is not",
        ),
        (_STORE.replace("def get(self, ref)", "def get(self)"), "`RayObjectStore.get` is not"),
        (_STORE.replace("ObjectStoreGetResult", "Result"), "ObjectStoreGetResult"),
    ],
)
def test_a_store_of_another_shape_is_an_install_error_with_nothing_patched(
    fake_miles: Path,  # noqa: F811
    store: str,
    problem: str,
) -> None:
    _write(fake_miles, "miles/utils/object_store.py", store)
    import miles.ray.rollout.train_data_conversion as conversion

    with raises_facts(InstallError, key="miles.utils.object_store") as caught:
        miles.install()
    assert problem in str(caught.value)
    assert conversion.split_train_data_by_dp_raw(None, None, dp_size=1) == "miles"
    assert miles.current_installation() is None


def test_a_miles_without_one_of_the_functions_is_an_install_error(
    fake_miles: Path,  # noqa: F811
) -> None:
    path = fake_miles / "miles/ray/rollout/train_data_conversion.py"
    path.write_text(path.read_text().replace("def can_schedule_on_rollout_side", "def renamed"))
    import miles.utils.data as data_module

    with pytest.raises(InstallError) as caught:
        miles.install()
    message = str(caught.value)
    assert "`miles.ray.rollout.train_data_conversion.can_schedule_on_rollout_side`" in message
    assert "nothing was patched" in message
    assert data_module.process_rollout_data(None, None, 0, 1, None) == "miles"


_NESTED = """
    import functools
    from types import SimpleNamespace

    from miles.ray.rollout.train_data_conversion import split_train_data_by_dp_raw as raw

    NESTED = {"splits": [raw]}
    SPACE = SimpleNamespace(split=raw)

    class Holder:
        def __init__(self):
            self.split = raw

    HOLDER = Holder()

    @functools.wraps(raw)
    def wrapper(*args, **kwargs):
        return "wrapper"
"""


def test_nested_containers_namespaces_and_instances_are_listed_wrappers_are_not(
    fake_miles: Path,  # noqa: F811
) -> None:
    import importlib

    _write(fake_miles, "miles/ray/rollout/nested.py", _NESTED)
    importlib.import_module("miles.ray.rollout.nested")
    with pytest.warns(miles.UnpatchedBindingWarning):
        installation = miles.install()
    installation.undo()
    where = "miles.ray.rollout.nested"
    assert set(installation.unpatched) == {
        f"list in `{where}.NESTED`: split_train_data_by_dp_raw",
        f"dict in `{where}.SPACE`: split_train_data_by_dp_raw",
        f"{where}.Holder `{where}.HOLDER`: split_train_data_by_dp_raw",
    }
    assert not any("wrapper" in entry for entry in installation.unpatched)


def test_a_module_whose_getattr_raises_is_skipped(
    fake_miles: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Hostile(types.ModuleType):
        def __getattribute__(self, name: str) -> Any:
            raise RuntimeError("no attributes here")

    monkeypatch.setitem(sys.modules, "hostile_module", Hostile("hostile_module"))
    installation = miles.install()
    installation.undo()
    assert installation.patched
