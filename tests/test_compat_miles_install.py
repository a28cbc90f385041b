"""The miles drop-in's edges: install() arguments, keys of the rank dict, flops, total lengths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from arrow_split import ColumnSpec, OptionTypeError, SchemaError, SchemaTypeError
from arrow_split.compat import miles
from tests.test_compat_miles import FULL_CONFIG, fake_miles, make_args, make_data  # noqa: F401


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"verbose": "no"}, OptionTypeError, r"`verbose` must be a bool"),
        ({"strict_keys": 1}, OptionTypeError, r"`strict_keys` must be a bool"),
        ({"pad_to_dp": None}, OptionTypeError, r"`pad_to_dp` must be a bool"),
        ({"specs": [1]}, SchemaTypeError, r"`specs` item 0 must be a ColumnSpec, got int 1"),
        ({"specs": ["score"]}, SchemaTypeError, r"`specs` item 0 must be a ColumnSpec"),
        ({"specs": "score"}, SchemaTypeError, r"`specs` must be an iterable of ColumnSpec"),
        ({"specs": 5}, SchemaTypeError, r"`specs` must be an iterable of ColumnSpec, got int 5"),
    ],
)
def test_bad_install_arguments_are_typed_and_patch_nothing(
    fake_miles: Path,  # noqa: F811
    options: dict[str, Any],
    error: type[Exception],
    match: str,
) -> None:
    import miles.ray.rollout.train_data_conversion as conversion

    with pytest.raises(error, match=match):
        miles.install(**options)
    assert conversion.split_train_data_by_dp_raw(None, None, dp_size=1) == "miles"


def test_install_still_takes_a_tuple_of_specs(fake_miles: Path) -> None:  # noqa: F811
    spec = ColumnSpec("score", "per_sample_scalar", pa.float64())
    installation = miles.install(specs=(spec,), verbose=np.bool_(False))
    installation.undo()


@pytest.mark.parametrize("key", ["partition", "micro_batch_indices", "num_microbatches"])
def test_colliding_keys_are_refused_naming_the_key(key: str) -> None:
    data = make_data([3, 4], **{key: [0, 1]})
    with pytest.raises(SchemaError, match=rf"train data holds `{key}`, a key the split puts"):
        miles.split_train_data_by_dp_raw(make_args(), data, dp_size=2)
    with pytest.raises(SchemaError, match=rf"train data holds `{key}`"):
        miles.split_train_data_by_dp_scheduled_raw(
            make_args(), {**data, "rollout_ids": [0, 1]}, train_parallel_config=FULL_CONFIG
        )


@pytest.mark.parametrize("flops", [3, "flops", [1.0, 2.0]])
def test_flops_that_is_not_callable_is_typed(flops: object) -> None:
    data = {**make_data([3, 4]), "rollout_ids": [0, 1]}
    with pytest.raises(OptionTypeError, match=r"`flops` must be a function"):
        miles.split_train_data_by_dp_scheduled_raw(
            make_args(), data, train_parallel_config=FULL_CONFIG, flops=flops
        )  # type: ignore[arg-type]
    with pytest.raises(OptionTypeError, match=r"`flops` must be a function"):
        miles.split_train_data_by_dp(make_args(), data, FULL_CONFIG, flops=flops)  # type: ignore[arg-type]


@pytest.mark.parametrize("lengths", [["3", "4"], [3.0, 4.0], [True, 4]])
def test_total_lengths_that_are_not_ints_are_typed(lengths: list[Any]) -> None:
    shard = miles.split_train_data_by_dp_raw(make_args(), make_data([3, 4]), dp_size=2)[0]
    shard["total_lengths"] = lengths
    with pytest.raises(SchemaTypeError, match=r"`total_lengths` must be one int per sample"):
        miles.process_rollout_data_shard(make_args(), shard)
    assert shard["total_lengths"] == lengths  # untouched


def test_negative_total_lengths_are_refused() -> None:
    shard = miles.split_train_data_by_dp_raw(make_args(), make_data([3, 4]), dp_size=2)[0]
    shard["total_lengths"] = [-1, 4]
    with pytest.raises(SchemaError, match=r"token counts are >= 0"):
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
        with pytest.raises(InstallError, match=r"could not bind `miles.ray.rollout.rollout_exec"):
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
