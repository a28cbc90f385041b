"""Tensors of a rank's routed-experts slice, in the zigzag layout a routing replay consumes."""

from __future__ import annotations

from typing import Literal

import torch

from arrow_split import OptionTypeError
from arrow_split._args import as_choice, as_int, describe
from arrow_split.routing import ExpertSlice
from arrow_split.torch._layouts import Tensors, parse_device

__all__ = ["ExpertLayout", "expert_tensors"]

ExpertLayout = Literal["per_sample", "packed"]
"""``"per_sample"``: one ``rows x layers x top_k`` tensor per sample; ``"packed"``: all of them
in one tensor, with ``cu_seqlens`` (int32)."""

_IDS = {torch.int32: "int32", torch.int64: "int64", torch.int16: "int16"}


def expert_tensors(
    expert_slice: ExpertSlice,
    *,
    layout: ExpertLayout = "per_sample",
    id_dtype: torch.dtype = torch.int32,
    pad_value: int = -1,
    device: torch.device | str | None = None,
) -> dict[str, Tensors]:
    """The slice's ids padded to the zigzag layout (``ExpertSlice.packed``), as tensors.

    Returns ``{name: tensors}`` (``name``: the slice's field) and, packed, ``cu_seqlens``.

    Raises
    ------
    OptionTypeError, OptionError
        Not an ExpertSlice, an unknown layout, a ``pad_value`` that is not an int, or an
        ``id_dtype`` other than int16, int32 or int64.
    """
    if not isinstance(expert_slice, ExpertSlice):
        msg = (
            "`expert_slice` must be an ExpertSlice (`take_expert_slice`), got "
            f"{describe(expert_slice)}"
        )
        raise OptionTypeError(msg)
    chosen = as_choice("layout", layout, ExpertLayout)
    if not isinstance(id_dtype, torch.dtype) or id_dtype not in _IDS:
        msg = f"`id_dtype` must be one of {list(_IDS)}, got {describe(id_dtype)}"
        raise OptionTypeError(msg)
    low, high = torch.iinfo(id_dtype).min, torch.iinfo(id_dtype).max
    fill = as_int("pad_value", pad_value, minimum=low, maximum=high)
    where = parse_device(device)
    values, offsets = expert_slice.packed(fill, _IDS[id_dtype])
    packed = torch.from_numpy(values)
    if where is not None:
        packed = packed.to(where)
    name = expert_slice.field.name
    if chosen == "packed":
        cu_seqlens = torch.from_numpy(offsets.astype("int32")).to(packed.device)
        return {name: packed, "cu_seqlens": cu_seqlens}
    return {name: list(torch.split(packed, expert_slice.padded_lengths.tolist()))}
