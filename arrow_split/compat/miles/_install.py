"""The machinery behind ``install()``: bind the drop-ins wherever miles binds its functions.

The patch follows miles' six functions by identity, not module names (miles #1842 moved a
binding), through every loaded module's globals; each installation binds fresh wrappers, so
:meth:`Installation.undo` finds its own again and rebinds the newest installation left, or
miles' own (undo in any order). A refused binding puts everything back: InstallError.
Bindings outside module globals (class attributes, dicts, closures) are not searched.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

from arrow_split import ColumnSpec, InstallError, SchemaTypeError
from arrow_split._args import describe

__all__ = ["Installation", "REF_FACTORY", "RefFactory", "as_specs", "patch", "ref_factory_of"]

RefFactory = Callable[[Any], Any]

REF_FACTORY: RefFactory | None = None
"""What wraps each Ray reference the drop-in returns: ``None`` for its ``Box``-shaped
``ArrowRef``, or the installed miles' own type (``install()`` sets it, ``undo()`` restores it)."""

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
_DEFINED = [
    *((_CONVERSION, name) for name in _REQUIRED[_CONVERSION]),
    (_DATA, "process_rollout_data"),
]
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

    ``bound`` maps each of the six names to this installation's drop-in (a fresh wrapper of the
    public function, found again by identity); ``factory`` is the reference type it set.

    :meth:`undo` puts miles' own functions back, in any order of several installations: the
    names an undone installation held go to the newest one still installed, or to miles.
    """

    def __init__(
        self,
        patched: Sequence[str],
        skipped: Sequence[str],
        bound: Mapping[str, Callable[..., Any]],
        factory: RefFactory | None,
    ) -> None:
        self.patched = tuple(patched)
        self.ref_type = "ArrowRef" if factory is None else factory.__qualname__
        self.skipped = tuple(skipped)
        self.bound = dict(bound)
        self.factory = factory

    def undo(self) -> None:
        """Restore every name this installation holds, wherever it is bound (idempotent)."""
        if not any(layer is self for layer in _ACTIVE):
            return
        _ACTIVE.remove(self)
        top = _ACTIVE[-1] if _ACTIVE else None
        replacement = dict(top.bound) if top is not None else dict(_BASE)
        known = {id(value): (value, name) for name, value in self.bound.items()}
        for module, attr, name in _sites(known):
            setattr(module, attr, replacement[name])
        global REF_FACTORY  # the process's one reference type
        REF_FACTORY = top.factory if top is not None else _BASE_FACTORY[0]
        if top is None:
            _BASE.clear()

    def __repr__(self) -> str:
        return f"Installation(patched={list(self.patched)}, skipped={list(self.skipped)})"


_ACTIVE: list[Installation] = []  # the installations not undone, oldest first
_BASE: dict[str, Callable[..., Any]] = {}  # miles' own functions, while any is installed
_BASE_FACTORY: list[Any] = []  # the reference type before the first installation


def _defined(modules: Mapping[str, ModuleType]) -> dict[str, Callable[..., Any]]:
    """Miles' own six functions, from the modules that define them."""
    return {name: getattr(modules[module], name) for module, name in _DEFINED}


def _known(originals: Mapping[str, Any]) -> dict[int, tuple[object, str]]:
    """``id -> (function, name)`` of miles' functions and every installed drop-in's."""
    known = {id(value): (value, name) for name, value in originals.items()}
    for layer in _ACTIVE:
        known.update({id(value): (value, name) for name, value in layer.bound.items()})
    return known


def _sites(known: Mapping[int, tuple[object, str]]) -> list[tuple[ModuleType, str, str]]:
    """Every loaded module's global bound to one of ``known`` (by identity), with its name."""
    found = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict) or getattr(module, "__name__", "").startswith(
            "arrow_split."
        ):
            continue
        for attr, value in list(namespace.items()):
            hit = known.get(id(value))
            if hit is not None and hit[0] is value:
                found.append((module, attr, hit[1]))
    return found


def _patch_all(
    known: Mapping[int, tuple[object, str]], bound: Mapping[str, Callable[..., Any]]
) -> list[str]:
    """Bind the drop-in at every site; on a refusal, put back what was bound and raise."""
    done: list[tuple[ModuleType, str, object]] = []
    for module, attr, name in _sites(known):
        before = module.__dict__[attr]
        try:
            setattr(module, attr, bound[name])
        except Exception as exc:
            for patched_module, patched_attr, value in reversed(done):
                setattr(patched_module, patched_attr, value)
            msg = (
                f"install() could not bind `{module.__name__}.{attr}` "
                f"({type(exc).__name__}: {exc}); nothing was patched (the {len(done)} names "
                "bound before it are restored): call arrow_split.compat.miles' functions "
                "directly, or make that module's attribute writable"
            )
            raise InstallError(msg) from exc
        done.append((module, attr, before))
    return [f"{module.__name__}.{attr}" for module, attr, _ in done]


def ref_factory_of(object_store: object) -> RefFactory | None:
    """The installed miles' reference type: ``_RayStoreObjectRef(payload=...)`` or ``None``.

    ``None`` (``StoreObjectRef = Box``) means the drop-in's ``Box``-shaped ``ArrowRef``.
    """
    pydantic_ref = getattr(object_store, "_RayStoreObjectRef", None)
    if pydantic_ref is None:
        return None

    def wrap(ray_ref: Any) -> Any:
        return pydantic_ref(payload=ray_ref)

    wrap.__qualname__ = f"{pydantic_ref.__name__}(payload=...)"
    return wrap


def as_specs(specs: object) -> list[ColumnSpec]:
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


def _bind(function: Callable[..., Any], name: str, hooks: dict[str, Any]) -> Callable[..., Any]:
    keywords = {}
    if name in _TAKES_SPECS and hooks["specs"]:
        keywords["specs"] = hooks["specs"]
    if name in _TAKES_SPECS:
        keywords.update({key: hooks[key] for key in ("strict_keys", "pad_to_dp") if hooks[key]})
    if name in _TAKES_FLOPS and hooks["flops"] is not None:
        keywords["flops"] = hooks["flops"]
    if name in _TAKES_LENGTHS and hooks["on_batch_lengths"] is not None:
        keywords["on_batch_lengths"] = hooks["on_batch_lengths"]
    # a fresh object for every installation, even without keywords: undo() finds its own by
    # identity, never the public function a user imported from arrow_split.compat.miles
    patched = functools.wraps(function)(functools.partial(function, **keywords))
    return patched


def patch(
    drop_ins: Mapping[str, Callable[..., Any]],
    *,
    specs: list[ColumnSpec],
    strict_keys: bool,
    pad_to_dp: bool,
    verbose: bool,
) -> Installation:
    """Bind ``drop_ins`` (name -> public function) wherever miles binds its own (parsed options)."""
    modules = {name: _import_required(name) for name in _REQUIRED}
    hooks = {
        "specs": specs,
        "strict_keys": strict_keys,
        "pad_to_dp": pad_to_dp,
        "flops": _flops_hook(),
        "on_batch_lengths": _timer_hook(),
    }
    originals = dict(_BASE) if _ACTIVE else _defined(modules)
    bound = {name: _bind(drop_ins[name], name, hooks) for name in originals}
    patched = _patch_all(_known(originals), bound)
    skipped = [
        f"{module_name}.{name}"
        for module_name, names in _OPTIONAL.items()
        if module_name not in sys.modules
        for name in names
    ]
    global REF_FACTORY  # the process's one reference type
    factory = ref_factory_of(_import_optional(_OBJECT_STORE))
    if not _ACTIVE:
        _BASE.update(originals)
        _BASE_FACTORY[:] = [REF_FACTORY]
    REF_FACTORY = factory
    installation = Installation(patched, skipped, bound, factory)
    _ACTIVE.append(installation)
    summary = (
        f"arrow_split.compat.miles patched {len(patched)} names: {', '.join(patched)}; "
        f"references: {installation.ref_type}"
    )
    if skipped:
        summary += f"; skipped (not importable here): {', '.join(skipped)}"
    _LOG.info(summary)
    if verbose:
        print(summary)
    return installation
