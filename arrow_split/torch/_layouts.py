"""The layouts of :func:`arrow_split.torch.to_tensors` (docs/torch.md); added tensors are fresh."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TypeAlias

import numpy as np
import torch

from arrow_split import ColumnSpec, OptionError, OptionTypeError, SchemaError, ValueRangeError
from arrow_split.errors import mistake
from arrow_split.schema import LengthRule

__all__ = [
    "AllColumns",
    "MAX_PAD_MULTIPLE",
    "RaggedColumn",
    "TensorOptions",
    "Tensors",
    "arrange",
    "merge_extras",
    "move",
    "parse_device",
    "parse_dtype",
    "token_list_tensors",
]

Tensors: TypeAlias = "torch.Tensor | list[torch.Tensor]"
Arranged: TypeAlias = "tuple[dict[str, Tensors], dict[str, Tensors]]"  # the columns, extra keys
# A scalar column's tensor, a ragged column, or the keys of a list per token (token_list_tensors)
AllColumns: TypeAlias = "dict[str, RaggedColumn | torch.Tensor | dict[str, Tensors]]"

MAX_PAD_MULTIPLE = 2**20
"""The largest ``pad_to_multiple_of``: every padded row is at least this wide (1,048,576)."""

_INT32_MAX = int(np.iinfo(np.int32).max)
_SEQLENS_KEYS: dict[LengthRule, str] = {"tokens": "cu_seqlens", "response": "response_cu_seqlens"}
_MASK_KEYS: dict[LengthRule, str] = {"tokens": "attention_mask", "response": "response_mask"}


@dataclasses.dataclass(frozen=True, slots=True)
class TensorOptions:
    """The options of one :func:`~arrow_split.torch.to_tensors` call, parsed at the door."""

    layout: str
    token_dtype: torch.dtype
    mask_dtype: torch.dtype
    id_dtype: torch.dtype | None
    device: torch.device | None
    pad_value: int | float
    pad_to_multiple_of: int | None
    writable: bool = False  # tensors of their own: never a view of the shard's memory

    @property
    def on_cpu(self) -> bool:
        """Whether the tensors stay on the CPU (no device, or the CPU's)."""
        return self.device is None or self.device.type == "cpu"


def parse_device(device: object) -> torch.device | None:
    """``device`` (None, a ``torch.device`` or a str) as a ``torch.device`` or ``None``.

    A device this process cannot use (``"cuda"`` on a CPU-only torch) is an OptionError here,
    not torch's error at the first copy.
    """
    if device is None:
        return None
    expected = "expected None, a torch.device or a str such as 'cpu' or 'cuda:0'"
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            msg = f"invalid `device`: {device!r}; {expected}"
            raise OptionError(msg, key="device") from None
    if not isinstance(device, torch.device):
        msg = f"invalid `device`: {device!r:.40}; {expected} (got a {type(device).__name__})"
        raise OptionTypeError(msg, key="device")
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:  # torch asserts "not compiled with CUDA"
        reason = next(iter(str(exc).splitlines()), "")
        msg = f"`device` {str(device)!r} is not available here ({reason}); pass 'cpu' or None"
        raise OptionError(msg, key="device", got=str(device)) from None
    return device


def parse_dtype(name: str, dtype: object, allowed: Collection[torch.dtype]) -> torch.dtype:
    """``dtype``, one of ``allowed``: a non-dtype is a type mistake, another dtype a value one."""
    choices = ", ".join(map(str, allowed))
    if not isinstance(dtype, torch.dtype):
        msg = (
            f"invalid `{name}`: {dtype!r:.40} of type {type(dtype).__name__}; expected a "
            f"torch.dtype, one of: {choices}"
        )
        raise mistake("option_type", msg, key=name)
    if dtype not in allowed:
        msg = f"invalid `{name}`: {dtype!r}; expected one of: {choices}"
        raise mistake("option_value", msg, key=name, got=str(dtype))
    return dtype


def move(tensor: torch.Tensor, options: TensorOptions) -> torch.Tensor:
    """``tensor`` on the requested device (unchanged when none was requested)."""
    return tensor if options.device is None else tensor.to(options.device)


@dataclasses.dataclass(frozen=True, slots=True)
class RaggedColumn:
    """One ragged column: flat values (on the target device) and its offsets (numpy int64)."""

    spec: ColumnSpec
    values: torch.Tensor
    offsets: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        """Values (or rows) per sample."""
        return np.diff(self.offsets)

    @property
    def group(self) -> tuple[LengthRule | None, str]:
        """The length group: ``(rule, "")`` (its columns share extra keys), or ``(None, name)``."""
        length_source = self.spec.role == "length_source"
        rule: LengthRule | None = "tokens" if length_source else self.spec.length
        return (rule, "") if rule in _SEQLENS_KEYS else (None, self.spec.name)


def token_list_tensors(
    name: str,
    values: torch.Tensor,
    sample_offsets: np.ndarray,
    token_offsets: np.ndarray,
    options: TensorOptions,
) -> dict[str, Tensors]:
    """A list per token: ``sample_offsets`` (``n + 1``) index tokens, ``token_offsets`` values.

    ``per_sample``: one flat tensor per sample and its per-token offsets from 0; every other
    layout packs it (it has no dense shape), with ``name_cu_seqlens`` (int32).
    """
    if options.layout != "per_sample":
        offsets = move(torch.from_numpy(token_offsets.copy()), options)
        cu_seqlens = move(_cu_seqlens(name, sample_offsets), options)
        return {name: values, f"{name}_offsets": offsets, f"{name}_cu_seqlens": cu_seqlens}
    per_sample = list(torch.split(values, np.diff(token_offsets[sample_offsets]).tolist()))
    from_zero = [
        move(torch.from_numpy(token_offsets[b : e + 1] - token_offsets[b]), options)
        for b, e in itertools.pairwise(sample_offsets.tolist())
    ]
    return {name: per_sample, f"{name}_offsets": from_zero}


def _per_sample(ragged: dict[str, RaggedColumn], options: TensorOptions) -> Arranged:
    return {name: list(torch.split(c.values, c.lengths.tolist())) for name, c in ragged.items()}, {}


def _packed(ragged: dict[str, RaggedColumn], options: TensorOptions) -> Arranged:
    extras: dict[str, Tensors] = {}
    for name, column in ragged.items():
        rule, own = column.group
        key = _SEQLENS_KEYS[rule] if rule else f"{own}_cu_seqlens"
        if key not in extras:
            extras[key] = move(_cu_seqlens(name, column.offsets), options)
    return {name: column.values for name, column in ragged.items()}, extras


def _cu_seqlens(name: str, offsets: np.ndarray) -> torch.Tensor:
    """int32 cumulative lengths of column ``name`` from its int64 ``offsets``."""
    total = int(offsets[-1])
    if total > _INT32_MAX:
        msg = (
            f"column `{name}` holds {total} rows or tokens, more than int32 cumulative lengths can "
            f"index ({_INT32_MAX}); split the batch over more ranks or micro-batches"
        )
        raise ValueRangeError(msg, key=name)
    return torch.from_numpy(offsets.astype(np.int32))


def _padded(ragged: dict[str, RaggedColumn], options: TensorOptions) -> Arranged:
    masks: dict[tuple[LengthRule | None, str], torch.Tensor] = {}
    for column in ragged.values():
        if column.group not in masks:
            masks[column.group] = _length_mask(column, ragged, options)
    extras: dict[str, Tensors] = {
        _MASK_KEYS[rule]: mask for (rule, _), mask in masks.items() if rule
    }
    return {name: _pad(c, masks[c.group], options) for name, c in ragged.items()}, extras


def _length_mask(
    column: RaggedColumn, ragged: dict[str, RaggedColumn], options: TensorOptions
) -> torch.Tensor:
    """``[n, width]`` bool, True at a sample's real positions; width shared by the group."""
    group = [int(c.lengths.max(initial=0)) for c in ragged.values() if c.group == column.group]
    width = max(group, default=0)
    multiple = options.pad_to_multiple_of
    if multiple is not None:
        width = -(-width // multiple) * multiple
    lengths = move(torch.from_numpy(column.lengths), options)
    positions = torch.arange(width, device=lengths.device)
    return positions[None, :] < lengths[:, None]


def _pad(column: RaggedColumn, mask: torch.Tensor, options: TensorOptions) -> torch.Tensor:
    values = column.values
    masklike = column.spec.flag or values.dtype == torch.bool
    fill = 0 if masklike else _fill_value(options.pad_value, values.dtype, column.spec)
    shape = (*mask.shape, *values.shape[1:])
    padded = torch.full(shape, fill, dtype=values.dtype, device=values.device)
    if values.dtype == torch.uint16:  # index_put has no uint16 kernel: write the same bits
        padded.view(torch.int16)[mask] = values.view(torch.int16)
    else:
        padded[mask] = values
    return padded


def _fill_value(pad_value: int | float, dtype: torch.dtype, spec: ColumnSpec) -> int | float:
    """``pad_value`` for a ``dtype`` column (NaN and infinities too for floats), range first."""
    if dtype.is_floating_point:
        low, high, what = torch.finfo(dtype).min, torch.finfo(dtype).max, "a number"
        if isinstance(pad_value, float) and not math.isfinite(pad_value):
            return pad_value
        fits = low <= pad_value <= high
    else:
        low, high, what = torch.iinfo(dtype).min, torch.iinfo(dtype).max, "an integer"
        fits = low <= pad_value <= high and float(pad_value).is_integer()
    if not fits:  # an option its column cannot hold: the option's mistake, as at every door
        msg = (
            f"`pad_value` {pad_value!r} does not fit column `{spec.name}` ({dtype}); pass "
            f"{what} between {low} and {high}"
        )
        raise mistake("option_value", msg, key="pad_value", got=repr(pad_value))
    return pad_value if dtype.is_floating_point else int(pad_value)


def _nested(ragged: dict[str, RaggedColumn], options: TensorOptions) -> Arranged:
    """Columns of one length group share one offsets tensor, hence one jagged dimension."""
    tensors: dict[str, Tensors] = {}
    shared: dict[tuple[LengthRule | None, str], tuple[np.ndarray, torch.Tensor]] = {}
    for name, column in ragged.items():
        offsets = shared.get(column.group)
        if offsets is None or not np.array_equal(offsets[0], column.offsets):
            fresh = torch.from_numpy(column.offsets.copy()).to(column.values.device)
            offsets = (column.offsets, fresh)
            shared.setdefault(column.group, offsets)
        lengths = column.lengths
        low, high = (int(lengths.min()), int(lengths.max())) if len(lengths) else (None, None)
        with _quiet_nested():
            tensors[name] = torch.nested.nested_tensor_from_jagged(
                column.values, offsets[1], min_seqlen=low, max_seqlen=high
            )
    return tensors, {}


@contextlib.contextmanager
def _quiet_nested() -> Iterator[None]:
    """Silence exactly the known noise of torch's nested tensors (torch 2.13 and older)."""
    logger = logging.getLogger("torch.fx._symbolic_trace")
    logger.addFilter(_drop_fx_tracing_log)
    try:
        with warnings.catch_warnings():
            prototype = "The PyTorch API of nested tensors is in prototype stage"
            warnings.filterwarnings("ignore", prototype, UserWarning)
            yield
    finally:
        logger.removeFilter(_drop_fx_tracing_log)


def _drop_fx_tracing_log(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("is_fx_tracing will return true")


def merge_extras(
    tensors: dict[str, Tensors], extras: Mapping[str, Tensors], layout: str
) -> dict[str, Tensors]:
    """``tensors`` and the layout's ``extras`` (offsets...); a SchemaError where a name clashes."""
    clash = sorted(set(tensors) & set(extras))
    if clash:
        other = "" if layout == "per_sample" else " or use layout='per_sample'"
        msg = (
            f"column(s) {', '.join(f'`{name}`' for name in clash)} clash with the keys that "
            f"layout {layout!r} adds; rename the column(s){other}"
        )
        raise SchemaError(msg, key=clash[0])
    return {**tensors, **extras}


_ARRANGE: dict[str, Callable[[dict[str, RaggedColumn], TensorOptions], Arranged]] = {
    "per_sample": _per_sample,
    "packed": _packed,
    "padded": _padded,
    "nested": _nested,
}


def arrange(columns: AllColumns, options: TensorOptions) -> dict[str, Tensors]:
    """The columns in order as ``options.layout`` arranges them, its keys, the lists per token."""
    ragged = {name: column for name, column in columns.items() if isinstance(column, RaggedColumn)}
    arranged, extras = _ARRANGE[options.layout](ragged, options)
    tensors: dict[str, Tensors] = {}
    lists: dict[str, Tensors] = {}
    for name, column in columns.items():
        if isinstance(column, dict):
            lists.update(column)
        else:
            tensors[name] = arranged[name] if isinstance(column, RaggedColumn) else column
    return merge_extras(merge_extras(tensors, extras, options.layout), lists, options.layout)
