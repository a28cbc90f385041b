"""miles' ``args`` read once, at the edge, with the library's one parsing rule per argument type.

miles hands its functions the argparse namespace of the whole run; these helpers read the fields
the drop-in uses and convert each with :mod:`arrow_split._args`' rules, so that a wrong value is
a typed error naming ``args.<field>`` instead of a silent coercion (``bool("False")`` is
``True``) or a bare ``AttributeError``:

- ``args`` is an object with attributes (miles' ``argparse.Namespace``); ``None``, a dict, a
  string or a number is refused (:class:`~arrow_split.OptionTypeError`);
- a flag (``balance_data``, ``delay_split_train_data_by_dp``, ``multi_lora``,
  ``use_dynamic_batch_size``, ``balance_by_flops``, ``allow_partial_train_step``) is a ``bool``
  or ``numpy.bool_``; ``"False"``, ``0`` and ``1`` are refused. An optional flag that is missing
  or ``None`` (argparse's default) is ``False``;
- an int (``global_batch_size``, ``micro_batch_size``, ``max_tokens_per_gpu``,
  ``multi_lora_n_adapters``) is an ``int`` or numpy integer >= 1, never ``"8"`` or ``8.0``; an
  optional one may be missing or ``None``;
- a required field that is missing is an :class:`~arrow_split.OptionError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from arrow_split._args import as_flag, as_int, describe
from arrow_split.errors import OptionError, OptionTypeError

__all__ = ["arg_flag", "arg_int", "arg_required_int", "check_args", "witness_ids_of"]

_MISSING = object()


def check_args(args: object) -> None:
    """Refuse an ``args`` that cannot be miles' argument namespace (no attributes to read)."""
    if args is None or isinstance(args, (Mapping, str, bytes, int, float, list, tuple)):
        msg = (
            f"`args` must be miles' argument namespace (an `argparse.Namespace`), got "
            f"{describe(args)}; pass the `args` miles' functions receive, or "
            "`argparse.Namespace(balance_data=False, ...)`"
        )
        raise OptionTypeError(msg)


def _field(args: object, name: str, *, required: bool) -> object:
    check_args(args)
    value = getattr(args, name, _MISSING)
    if value is _MISSING and required:
        msg = (
            f"`args` has no field `{name}`; miles' argument parser sets it: pass miles' `args`, "
            f"or set `args.{name}`"
        )
        raise OptionError(msg)
    return None if value is _MISSING else value


def arg_flag(args: object, name: str, *, required: bool = False) -> bool:
    """``args.<name>`` as a bool (see the module docstring)."""
    value = _field(args, name, required=required)
    if value is None and not required:
        return False
    return as_flag(f"args.{name}", value)


def arg_int(args: object, name: str) -> int | None:
    """Optional ``args.<name>`` as an int >= 1, or ``None`` when missing or ``None``."""
    value = _field(args, name, required=False)
    return None if value is None else as_int(f"args.{name}", value, minimum=1)


def arg_required_int(args: object, name: str) -> int:
    """Required ``args.<name>`` as an int >= 1."""
    return as_int(f"args.{name}", _field(args, name, required=True), minimum=1)


def witness_ids_of(witness_info: object) -> Any:
    """``witness_info.witness_ids``, or a typed error naming what was given instead."""
    if witness_info is None:
        return None
    witness_ids = getattr(witness_info, "witness_ids", _MISSING)
    if witness_ids is _MISSING:
        msg = (
            f"`witness_info` must have `witness_ids` (one int per sample of the whole batch), "
            f"got {describe(witness_info)}"
        )
        raise OptionTypeError(msg)
    return witness_ids
