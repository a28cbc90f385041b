"""Tensors of a rank's routed-experts slice, in the zigzag layout a routing replay consumes."""

from __future__ import annotations

from typing import Literal

import torch

from arrow_split._args import as_choice, as_int, describe
from arrow_split.errors import mistake
from arrow_split.routing import ExpertSlice
from arrow_split.torch._layouts import Tensors, parse_device, parse_dtype

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
    SchemaTypeError
        ``expert_slice`` is not an ExpertSlice (as :func:`~arrow_split.torch.to_tensors` for a
        non-batch).
    OptionTypeError, OptionError
        An unknown layout, a ``pad_value`` that is not an int the ids' dtype holds, an
        ``id_dtype`` that is no ``torch.dtype`` (type) or not int16, int32 or int64 (value):
        the classes of :func:`~arrow_split.torch.to_tensors` for the same mistakes.
    """
    if not isinstance(expert_slice, ExpertSlice):
        expected, got = "an ExpertSlice (`take_expert_slice`)", describe(expert_slice)
        raise mistake("data_type", key="expert_slice", expected=expected, got=got)
    chosen = as_choice("layout", layout, ExpertLayout)
    id_dtype = parse_dtype("id_dtype", id_dtype, _IDS)
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
