"""Patch the drop-in into an importable miles, in one call, and undo it.

miles imports some of these functions by name into other modules, so each name is patched
wherever miles binds it. The two modules that define them must import; the modules that only
re-bind a name (the rollout manager, the training backends) are patched when they import, and
listed as skipped when they do not (a rollout-only or a train-only process).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

from arrow_split import ColumnSpec, SchemaTypeError
from arrow_split._args import as_flag, describe
from arrow_split.compat import _miles_store as _store
from arrow_split.compat._miles_store import ref_factory_of

__all__ = ["Installation", "install"]

_LOG = logging.getLogger("arrow_split.compat.miles")
_ABSENT = object()  # a name the module did not have before install()

_CONVERSION = "miles.ray.rollout.train_data_conversion"
_OBJECT_STORE = "miles.utils.object_store"
_DATA = "miles.utils.data"
_REQUIRED: dict[str, tuple[str, ...]] = {
    _CONVERSION: (
        "can_schedule_on_rollout_side",
        "process_rollout_data_shard",
        "split_train_data_by_dp",
        "split_train_data_by_dp_raw",
        "split_train_data_by_dp_scheduled_raw",
    ),
    _DATA: ("process_rollout_data", "split_train_data_by_dp_raw"),
}
_OPTIONAL: dict[str, tuple[str, ...]] = {
    "miles.ray.rollout.rollout_manager": ("split_train_data_by_dp",),
    "miles.backends.training_utils.data": ("process_rollout_data",),
}
# Which functions take which of the hooks install() binds.
_TAKES_SPECS = frozenset(
    {
        "process_rollout_data",
        "split_train_data_by_dp",
        "split_train_data_by_dp_raw",
        "split_train_data_by_dp_scheduled_raw",
    }
)
_TAKES_FLOPS = frozenset({"split_train_data_by_dp", "split_train_data_by_dp_scheduled_raw"})
_TAKES_LENGTHS = frozenset({"process_rollout_data", "process_rollout_data_shard"})


class Installation:
    """What :func:`install` patched: ``patched`` and ``skipped`` (``"module.name"`` strings).

    :meth:`undo` puts miles' own functions back.
    """

    def __init__(
        self,
        patched: Sequence[str],
        skipped: Sequence[str],
        originals: Sequence[tuple[ModuleType, str, object]],
        ref_type: str = "ArrowRef",
    ) -> None:
        self.patched = tuple(patched)
        self.ref_type = ref_type
        self.skipped = tuple(skipped)
        self._originals = list(originals)

    def undo(self) -> None:
        """Restore every patched name (idempotent)."""
        while self._originals:
            module, name, original = self._originals.pop()
            if original is _ABSENT:
                delattr(module, name)
            else:
                setattr(module, name, original)

    def __repr__(self) -> str:
        return f"Installation(patched={list(self.patched)}, skipped={list(self.skipped)})"


def _specs_of(specs: object) -> list[ColumnSpec]:
    """``specs`` as a list of :class:`ColumnSpec` (an iterable of them, never a str)."""
    if isinstance(specs, (str, bytes, Mapping)) or not isinstance(specs, Iterable):
        msg = f"`specs` must be an iterable of ColumnSpec, got {describe(specs)}"
        raise SchemaTypeError(msg)
    checked = list(specs)
    for position, spec in enumerate(checked):
        if not isinstance(spec, ColumnSpec):
            msg = (
                f"`specs` item {position} must be a ColumnSpec, got {describe(spec)}; declare "
                'a key as `ColumnSpec("score", "per_sample_scalar", pa.float64())`'
            )
            raise SchemaTypeError(msg)
    return checked


def _import_required(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        msg = (
            f"arrow_split.compat.miles.install() patches an importable miles, but `{name}` does "
            f"not import ({type(exc).__name__}: {exc}); install miles (and its dependencies) "
            "in this environment, or call the functions of arrow_split.compat.miles directly"
        )
        raise ImportError(msg) from exc


def _import_optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _optional_attr(module: str, attr: str) -> Any:
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


def _timer_hook() -> Callable[[list[int]], None] | None:
    timer = _optional_attr("miles.utils.timer", "Timer")
    if timer is None:
        return None

    def keep_seq_lens(total_lengths: list[int]) -> None:
        timer().seq_lens = total_lengths

    return keep_seq_lens


def _flops_hook() -> Callable[[Sequence[int], Any], list[float]] | None:
    calculate = _optional_attr("miles.utils.flops_utils", "calculate_fwd_flops")
    if calculate is None:
        return None

    def flops(total_lengths: Sequence[int], args: Any) -> list[float]:
        return [calculate([length], args) for length in total_lengths]

    return flops


def _bound(name: str, hooks: dict[str, Any]) -> Callable[..., Any]:
    from arrow_split.compat import miles as compat  # the public functions live there

    function: Callable[..., Any] = getattr(compat, name)
    keywords = {}
    if name in _TAKES_SPECS and hooks["specs"]:
        keywords["specs"] = hooks["specs"]
    if name in _TAKES_SPECS:
        keywords.update({key: hooks[key] for key in ("strict_keys", "pad_to_dp") if hooks[key]})
    if name in _TAKES_FLOPS and hooks["flops"] is not None:
        keywords["flops"] = hooks["flops"]
    if name in _TAKES_LENGTHS and hooks["on_batch_lengths"] is not None:
        keywords["on_batch_lengths"] = hooks["on_batch_lengths"]
    if not keywords:
        return function
    patched = functools.wraps(function)(functools.partial(function, **keywords))
    return patched


def install(
    *,
    specs: Iterable[ColumnSpec] = (),
    strict_keys: bool = False,
    pad_to_dp: bool = False,
    verbose: bool = False,
) -> Installation:
    """Patch arrow_split's drop-in into miles; return what was patched (and how to undo it).

    Parameters
    ----------
    specs
        Column specs for keys the library does not know (miles' custom converters may add
        some), passed to every function that converts train data.
    strict_keys
        Refuse a key that is neither known nor declared (the core's ``SchemaError``) instead of
        carrying it with an inferred spec and an :class:`~arrow_split.UnknownKeyWarning`.
    pad_to_dp
        Pad every split batch to a multiple of the DP size (:func:`arrow_split.pad_to_dp`,
        miles #2694's rows), so that a balanced split of any batch size works.
    verbose
        Also print the summary (it is always logged at INFO).

    Returns
    -------
    Installation
        ``patched``: every ``module.name`` now bound to arrow_split; ``skipped``: names in
        modules that did not import here; ``ref_type``: the reference type the drop-in now
        returns (miles' own, detected); ``undo()`` restores miles' functions.

    Raises
    ------
    ImportError
        miles (or a module that defines these functions) is not importable.
    """
    checked_specs = _specs_of(specs)
    flags = {
        "strict_keys": as_flag("strict_keys", strict_keys),
        "pad_to_dp": as_flag("pad_to_dp", pad_to_dp),
        "verbose": as_flag("verbose", verbose),
    }
    modules = {name: _import_required(name) for name in _REQUIRED}
    hooks = {
        "specs": checked_specs,
        "strict_keys": flags["strict_keys"],
        "pad_to_dp": flags["pad_to_dp"],
        "flops": _flops_hook(),
        "on_batch_lengths": _timer_hook(),
    }
    patched: list[str] = []
    skipped: list[str] = []
    originals: list[tuple[ModuleType, str, object]] = []
    # Every module is imported before any name is patched: a module imported mid-loop would
    # bind the patched function by name, and undo() would save and restore that, not miles' own.
    for module_name, names in _OPTIONAL.items():
        module = _import_optional(module_name)
        if module is None:
            skipped.extend(f"{module_name}.{name}" for name in names)
        else:
            modules[module_name] = module
    for module_name, names in [*_REQUIRED.items(), *_OPTIONAL.items()]:
        module = modules.get(module_name)
        if module is None:
            continue
        for name in names:
            originals.append((module, name, getattr(module, name, _ABSENT)))
            setattr(module, name, _bound(name, hooks))
            patched.append(f"{module_name}.{name}")
    factory = ref_factory_of(_import_optional(_OBJECT_STORE))
    originals.append((_store, "REF_FACTORY", _store.REF_FACTORY))
    _store.REF_FACTORY = factory
    installation = Installation(patched, skipped, originals, factory.__qualname__)
    summary = (
        f"arrow_split.compat.miles patched {len(patched)} names: {', '.join(patched)}; "
        f"references: {installation.ref_type}"
    )
    if skipped:
        summary += f"; skipped (not importable here): {', '.join(skipped)}"
    _LOG.info(summary)
    if flags["verbose"]:
        print(summary)
    return installation
