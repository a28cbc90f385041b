"""The machinery behind ``install()``: bind the drop-ins wherever miles binds its functions.

Bindings are found by identity, not by module name (miles #1842 moved one): loaded modules'
globals and class attributes are rebound, and found again by :meth:`Installation.undo`. Other
holders (a partial, a container, a default, a closure) cannot be rebound: they are reported.
"""

from __future__ import annotations

import functools
import gc
import importlib
import inspect
import logging
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType, FunctionType, ModuleType
from typing import Any

from arrow_split import ArrowSplitWarning, ColumnSpec, InstallError, SchemaTypeError
from arrow_split._args import describe
from arrow_split.compat.miles._store import (
    STORE_MODULE,
    PutBatch,
    check_store,
    patch_store,
    unpatch_store,
)

__all__ = [
    "Installation",
    "REF_FACTORY",
    "UnpatchedBindingWarning",
    "as_specs",
    "current_installation",
    "patch",
]

RefFactory = Callable[[Any], Any]

REF_FACTORY: RefFactory | None = None
"""What wraps each Ray reference the drop-in returns: ``None`` for its ``Box``-shaped
``ArrowRef``, or the installed miles' own type (``install()`` sets it, ``undo()`` restores it)."""

_LOG = logging.getLogger("arrow_split.compat.miles")

_CONVERSION = "miles.ray.rollout.train_data_conversion"
_DATA = "miles.utils.data"
_DEFINED = {  # name -> the miles module that defines it (both must import)
    "can_schedule_on_rollout_side": _CONVERSION,
    "process_rollout_data_shard": _CONVERSION,
    "split_train_data_by_dp": _CONVERSION,
    "split_train_data_by_dp_raw": _CONVERSION,
    "split_train_data_by_dp_scheduled_raw": _CONVERSION,
    "process_rollout_data": _DATA,
}
_OPTIONAL = {  # modules of known bindings that a job may not load: reported as skipped
    "miles.ray.rollout.rollout_manager": "split_train_data_by_dp",
    "miles.backends.training_utils.data": "process_rollout_data",
}


class UnpatchedBindingWarning(ArrowSplitWarning):
    """``install()`` found one of miles' functions where it cannot rebind it; it stays miles'."""


@dataclass(eq=False, repr=False)
class Installation:
    """What :func:`install` patched (``"module.name"`` strings), skipped and left unpatched.

    ``unpatched`` names each holder of a miles function that could not be rebound (``"holder:
    name"``). ``bound`` maps the six names to this installation's drop-ins, found again by
    identity; ``factory`` is the reference type it set.
    """

    patched: tuple[str, ...]
    skipped: tuple[str, ...]
    bound: dict[str, Callable[..., Any]]
    factory: RefFactory | None
    unpatched: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ref_type(self) -> str:
        """The reference type the drop-in returns."""
        return "ArrowRef" if self.factory is None else self.factory.__qualname__

    def undo(self) -> None:
        """Restore every name this installation holds (idempotent, in any order of several).

        Each name goes to the newest installation still installed, or back to miles.
        """
        if self not in _ACTIVE:  # compared by identity (eq=False)
            return
        _ACTIVE.remove(self)
        top = _ACTIVE[-1] if _ACTIVE else None
        replacement = top.bound if top is not None else _BASE
        for holder, attr, name in _sites(_by_id(self.bound)):
            setattr(holder, attr, replacement[name])
        global REF_FACTORY  # the process's one reference type
        REF_FACTORY = top.factory if top is not None else None
        if top is None:
            _BASE.clear()
            unpatch_store()

    def __repr__(self) -> str:
        return f"Installation(patched={list(self.patched)}, skipped={list(self.skipped)})"


_ACTIVE: list[Installation] = []  # the installations not undone, oldest first
_BASE: dict[str, Callable[..., Any]] = {}  # miles' own functions, while any is installed

Known = Mapping[int, tuple[object, str]]  # id -> (function, name), matched by identity


def _by_id(functions: Mapping[str, object]) -> dict[int, tuple[object, str]]:
    return {id(value): (value, name) for name, value in functions.items()}


def _hits(holder: object, known: Known) -> list[tuple[object, str, str]]:
    """``(holder, attr, name)`` for each attribute of ``holder`` bound to one of ``known``."""
    # `known` holds its objects, so an id found there is one of them (ids of live objects differ)
    items = list(vars(holder).items())
    return [(holder, attr, known[id(value)][1]) for attr, value in items if id(value) in known]


def _own(holder: object) -> bool:
    name = holder.__module__ if isinstance(holder, type) else _attr(holder, "__name__", "")
    return str(name).startswith("arrow_split.")


def _attr(holder: object, name: str, default: Any) -> Any:
    """``getattr`` that treats any error (a module's raising ``__getattr__``) as absent."""
    try:
        return getattr(holder, name, default)
    except Exception:
        return default


def _module_globals() -> dict[int, str]:
    """``module.NAME`` of each global of the loaded modules but ours, by the value's id."""
    names: dict[int, str] = {}
    for name, module in list(sys.modules.items()):
        namespace = _attr(module, "__dict__", None)
        if isinstance(namespace, dict) and not str(name).startswith("arrow_split."):
            for attr, value in list(namespace.items()):
                names.setdefault(id(value), f"{name}.{attr}")  # the modules hold the values
    return names


def _sites(known: Known) -> list[tuple[object, str, str]]:
    """Every loaded module's global and every class attribute bound to one of ``known``."""
    modules = [
        m for m in list(sys.modules.values()) if isinstance(_attr(m, "__dict__", None), dict)
    ]
    dicts = [ref for ref in gc.get_referrers(*(v for v, _ in known.values())) if type(ref) is dict]
    classes = {id(ref): ref for ref in gc.get_referrers(*dicts) if isinstance(ref, type)}
    holders = [*modules, *classes.values()]
    return [hit for holder in holders if not _own(holder) for hit in _hits(holder, known)]


def _qualified(holder: object, attr: str) -> str:
    if isinstance(holder, type):
        return f"{holder.__module__}.{holder.__qualname__}.{attr}"
    return f"{getattr(holder, '__name__', '?')}.{attr}"


def _patch_all(known: Known, bound: Mapping[str, Callable[..., Any]]) -> list[str]:
    """Bind the drop-in at every site; on a refusal, put back what was bound and raise."""
    done: list[tuple[object, str, object]] = []
    for holder, attr, name in _sites(known):
        before = vars(holder)[attr]
        try:
            setattr(holder, attr, bound[name])
        except Exception as exc:
            for patched, patched_attr, value in reversed(done):
                setattr(patched, patched_attr, value)
            msg = (
                f"install() could not bind `{_qualified(holder, attr)}` "
                f"({type(exc).__name__}: {exc}); nothing was patched (the {len(done)} names "
                "bound before it are restored): call arrow_split.compat.miles' functions "
                "directly, or make that module's attribute writable"
            )
            raise InstallError(msg, key=_qualified(holder, attr)) from exc
        done.append((holder, attr, before))
    return [_qualified(holder, attr) for holder, attr, _ in done]


def _unpatched(originals: Mapping[str, object], ours: Iterable[object]) -> list[tuple[str, str]]:
    """``(holder, name)`` for each named holder (:func:`_where`) still bound to miles' function.

    ``__wrapped__`` is a wrapper's note of what it wraps, not a call of miles' function.
    """
    names = {id(value): name for name, value in originals.items()}
    skip = {id(holder) for holder in ours}
    globals_by_id = _module_globals()
    found = []
    for holder in gc.get_referrers(*originals.values()):
        if isinstance(holder, FrameType) or id(holder) in skip:
            continue
        held = {
            names[id(item)]
            for key, item in _items(holder)
            if id(item) in names and key != "__wrapped__"
        }
        where = _where(holder, globals_by_id) if held else ""
        if where:
            found += [(where, name) for name in sorted(held)]
    return found


def _items(holder: object) -> list[tuple[object, object]]:
    """``(key, item)`` for each object ``holder`` refers to (keys for dicts, else ``None``)."""
    if type(holder) is dict:
        return list(holder.items())
    return [(None, item) for item in gc.get_referents(holder)]


_DEPTH = 6  # containers above a holder searched for a name


def _where(holder: object, globals_by_id: Mapping[int, str]) -> str:
    """``holder``'s label and where it is bound: a module global, or a function or class.

    Containers, namespaces and instances above it are followed a few steps up (``"list in
    `module.NAME`"``); ``""`` when no such root is reached (a frame's local, a cycle).
    """
    seen = {id(holder)}
    kind = type(holder)
    label = f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")
    items: list[object] = [holder]
    for depth in range(_DEPTH):
        link = " " if depth == 0 else " in "
        above: list[object] = []
        for item in items:
            if id(item) in globals_by_id:
                return f"{label}{link}`{globals_by_id[id(item)]}`"
            for ref in gc.get_referrers(item):
                if isinstance(ref, FrameType) or id(ref) in seen or ref is items:
                    continue
                seen.add(id(ref))
                if isinstance(ref, (FunctionType, type)):
                    if not _own(ref):
                        return f"{label} of `{ref.__module__}.{ref.__qualname__}`"
                elif isinstance(ref, (dict, list, tuple, set, frozenset)) or hasattr(
                    ref, "__dict__"
                ):
                    above.append(ref)
        items = above
    return ""


def _defined(modules: Mapping[str, ModuleType]) -> dict[str, Any]:
    """The six functions miles defines; a module without one is an InstallError, nothing patched."""
    missing = [
        f"`{module}.{name}`"
        for name, module in _DEFINED.items()
        if not hasattr(modules[module], name)
    ]
    if missing:
        msg = (
            f"install() patches miles' {', '.join(missing)}, which this miles does not define "
            "(an older or newer miles); nothing was patched: pin a miles that defines them, or "
            "call arrow_split.compat.miles' functions directly"
        )
        raise InstallError(msg)
    return {name: getattr(modules[module], name) for name, module in _DEFINED.items()}


def current_installation() -> Installation | None:
    """The newest :func:`install` in this process not undone, or ``None``.

    Ask it in any worker to see that the drop-in is installed there (:func:`setup_worker`).
    """
    return _ACTIVE[-1] if _ACTIVE else None


def _ref_factory(object_store: object) -> RefFactory | None:
    """The installed miles' ``_RayStoreObjectRef(payload=...)``; ``None`` for ``Box`` (ArrowRef)."""
    pydantic_ref = getattr(object_store, "_RayStoreObjectRef", None)
    if pydantic_ref is None:
        return None

    def wrap(ray_ref: Any) -> Any:
        return pydantic_ref(payload=ray_ref)

    wrap.__qualname__ = f"{pydantic_ref.__name__}(payload=...)"
    return wrap


def as_specs(specs: object) -> list[ColumnSpec]:
    """``specs`` as a list of :class:`ColumnSpec` (an iterable of them, never a str)."""
    msg = f"`specs` must be an iterable of ColumnSpec, got {describe(specs)}"
    if isinstance(specs, (str, bytes, Mapping)) or not isinstance(specs, Iterable):
        raise SchemaTypeError(msg, key="specs")
    try:
        checked = list(specs)
    except TypeError:  # iterable in name only (a 0-d array)
        raise SchemaTypeError(msg) from None
    for position, spec in enumerate(checked):
        if not isinstance(spec, ColumnSpec):
            msg = (
                f"`specs` item {position} must be a ColumnSpec, got {describe(spec)}; declare "
                'a key as `ColumnSpec("score", "per_sample_scalar", pa.float64())`'
            )
            raise SchemaTypeError(msg, key=f"specs[{position}]")
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


def _optional_attr(module: str, attr: str | None = None) -> Any:
    """``module.attr`` (or the module itself), ``None`` when it does not import."""
    try:
        found = importlib.import_module(module)
        return found if attr is None else getattr(found, attr)
    except (ImportError, AttributeError):
        return None


def _miles_hooks() -> dict[str, Any]:
    """The hooks from miles: its FLOPs estimate and throughput timer (``None`` where absent)."""
    timer = _optional_attr("miles.utils.timer", "Timer")
    calculate = _optional_attr("miles.utils.flops_utils", "calculate_fwd_flops")

    def keep_seq_lens(total_lengths: list[int]) -> None:
        timer().seq_lens = total_lengths

    def flops(total_lengths: Sequence[int], args: Any) -> list[float]:
        return [calculate([length], args) for length in total_lengths]

    return {
        "flops": None if calculate is None else flops,
        "on_batch_lengths": None if timer is None else keep_seq_lens,
    }


def _bind(function: Callable[..., Any], hooks: dict[str, Any]) -> Callable[..., Any]:
    """``function`` with each hook it takes that is set, as a fresh object."""
    takes = inspect.signature(function).parameters
    keywords = {key: value for key, value in hooks.items() if key in takes and value}
    # a fresh object for every installation, even without keywords: undo() finds its own by
    # identity, never the public function a user imported from arrow_split.compat.miles
    return functools.wraps(function)(functools.partial(function, **keywords))


def patch(
    drop_ins: Mapping[str, Callable[..., Any]],
    *,
    specs: list[ColumnSpec],
    strict_keys: bool,
    pad_to_dp: bool,
    verbose: bool,
    put_batch: PutBatch,
) -> Installation:
    """Bind ``drop_ins`` (name -> public function) wherever miles binds its own (parsed options).

    ``put_batch`` is what miles' patched store puts a converted batch with.
    """
    modules = {name: _import_required(name) for name in sorted(set(_DEFINED.values()))}
    options = {"specs": specs, "strict_keys": strict_keys, "pad_to_dp": pad_to_dp}
    hooks = {**options, **_miles_hooks()}
    originals = dict(_BASE) if _ACTIVE else _defined(modules)
    store = _optional_attr(STORE_MODULE)
    if store is not None:
        check_store(store)  # before anything is bound: a store of another shape patches nothing
    bound = {name: _bind(drop_ins[name], hooks) for name in originals}
    known = _by_id(originals)  # miles' functions and every installed drop-in
    for layer in _ACTIVE:
        known.update(_by_id(layer.bound))
    patched = _patch_all(known, bound)
    unpatched = _unpatched(originals, ours=(originals, _BASE))
    skipped = [
        f"{module}.{name}" for module, name in _OPTIONAL.items() if module not in sys.modules
    ]
    if store is None:
        skipped.append(STORE_MODULE)
    else:
        # a patched store's put converts with the newest installation's options
        patched += patch_store(store, lambda: _ACTIVE[-1].options, put_batch)
    if not _ACTIVE:
        _BASE.update(originals)
    global REF_FACTORY  # the process's one reference type
    REF_FACTORY = factory = _ref_factory(store)
    listed = tuple(f"{holder}: {name}" for holder, name in unpatched)
    installation = Installation(tuple(patched), tuple(skipped), bound, factory, listed, options)
    _ACTIVE.append(installation)
    for holder, name in unpatched:
        msg = (
            f"install() cannot rebind miles' `{name}` in the {holder}: it still calls miles' "
            "own; bind it as a module global or a class attribute (install() patches those), "
            f"or call `arrow_split.compat.miles.{name}` there"
        )
        warnings.warn(msg, UnpatchedBindingWarning, stacklevel=3)
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
