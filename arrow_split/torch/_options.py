"""The options of :func:`~arrow_split.torch.to_tensors`, each parsed once where the call enters.

:data:`TensorLayout` names the layouts (:mod:`arrow_split.torch._convert` describes them); the
dtypes each of ``token_dtype``, ``mask_dtype`` and ``id_dtype`` may be, with the numpy dtype a
column is cast to for it (:data:`TOKEN_DTYPES`, :data:`MASK_DTYPES`, :data:`ID_DTYPES`); the
largest ``pad_to_multiple_of`` (:data:`MAX_PAD_MULTIPLE`); and the checks that turn the
keywords into one :class:`~arrow_split.torch._layouts.TensorOptions` (:func:`check_options`,
:func:`check_id_dtype`), refusing a wrong value with the library's option errors.
"""

from __future__ import annotations

import contextlib
from typing import Literal, get_args

import numpy as np

try:
    import torch
except ImportError:
    msg = "arrow_split.torch needs PyTorch; install it with `pip install arrow-split[torch]`"
    raise ImportError(msg) from None

from arrow_split import OptionError, OptionTypeError, ValueRangeError
from arrow_split.torch._layouts import TensorOptions

__all__ = [
    "ID_DTYPES",
    "MASK_DTYPES",
    "MAX_PAD_MULTIPLE",
    "TOKEN_DTYPES",
    "TensorLayout",
    "check_id_dtype",
    "check_options",
]

TensorLayout = Literal["per_sample", "packed", "padded", "nested"]
"""How :func:`~arrow_split.torch.to_tensors` lays out the ragged columns.

See :mod:`arrow_split.torch._convert` for each layout.
"""


MAX_PAD_MULTIPLE = 2**20
"""The largest ``pad_to_multiple_of``: 1,048,576 tokens, beyond any model's context.

Every padded row is at least this wide, so the padded tensors' size grows with it whatever the
data; a larger value is a mistake (a byte count, ``2**31 - 1`` as "no limit") and is refused
before anything is allocated.
"""

TOKEN_DTYPES: dict[torch.dtype, type[np.generic]] = {torch.int32: np.int32, torch.int64: np.int64}
ID_DTYPES: dict[torch.dtype, type[np.generic]] = {torch.int32: np.int32, torch.int64: np.int64}
MASK_DTYPES: dict[torch.dtype, type[np.generic]] = {
    torch.bool: np.bool_,
    torch.uint8: np.uint8,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.float32: np.float32,
}


def check_options(
    layout: object,
    device: object,
    token_dtype: object,
    mask_dtype: object,
    pad_value: object,
    pad_to_multiple_of: object,
) -> TensorOptions:
    """The options of one call, checked (``id_dtype`` has its own check: :func:`check_id_dtype`)."""
    _check_layout(layout)
    multiple = _check_multiple(pad_to_multiple_of)
    return TensorOptions(
        _check_dtype("token_dtype", token_dtype, TOKEN_DTYPES),
        _check_dtype("mask_dtype", mask_dtype, MASK_DTYPES),
        _check_device(device),
        _check_pad_value(pad_value),
        multiple,
    )


def _check_pad_value(pad_value: object) -> int | float:
    """A real number (Python or numpy, 0-d arrays too) as a Python int or float; never a bool."""
    if isinstance(pad_value, np.ndarray) and pad_value.ndim == 0:
        pad_value = pad_value[()]
    if isinstance(pad_value, (bool, np.bool_)) or not isinstance(
        pad_value, (int, float, np.integer, np.floating)
    ):
        msg = (
            f"`pad_value` must be an int or a float, got {type(pad_value).__name__} "
            f"{pad_value!r:.40}"
        )
        raise OptionTypeError(msg)
    return int(pad_value) if isinstance(pad_value, (int, np.integer)) else float(pad_value)


def _check_layout(layout: object) -> None:
    choices = ", ".join(map(repr, get_args(TensorLayout)))
    if not isinstance(layout, str):
        msg = (
            f"invalid `layout`: {layout!r:.40} of type {type(layout).__name__}; expected one of: "
            f"{choices}"
        )
        raise OptionTypeError(msg)
    if layout not in get_args(TensorLayout):
        msg = f"invalid `layout`: {layout!r}; expected one of: {choices}"
        raise OptionError(msg)


def _check_multiple(pad_to_multiple_of: object) -> int | None:
    if pad_to_multiple_of is None:
        return None
    if isinstance(pad_to_multiple_of, np.ndarray) and pad_to_multiple_of.ndim == 0:
        pad_to_multiple_of = pad_to_multiple_of[()]
    if isinstance(pad_to_multiple_of, (bool, np.bool_)) or not isinstance(
        pad_to_multiple_of, (int, np.integer)
    ):
        msg = (
            f"`pad_to_multiple_of` must be None or an int >= 1, got {pad_to_multiple_of!r:.40} "
            f"of type {type(pad_to_multiple_of).__name__}; pass an int such as 8"
        )
        raise OptionTypeError(msg)
    if pad_to_multiple_of < 1:
        msg = f"`pad_to_multiple_of` must be None or an int >= 1, got {pad_to_multiple_of!r}"
        raise ValueRangeError(msg)
    if pad_to_multiple_of > MAX_PAD_MULTIPLE:
        msg = (
            f"`pad_to_multiple_of` must be at most {MAX_PAD_MULTIPLE}, got {pad_to_multiple_of!r}; "
            "every padded row is at least that wide: pass a token multiple such as 8 or 128"
        )
        raise ValueRangeError(msg)
    return int(pad_to_multiple_of)


def _check_dtype(
    name: str, dtype: object, allowed: dict[torch.dtype, type[np.generic]]
) -> torch.dtype:
    choices = ", ".join(map(str, allowed))
    if not isinstance(dtype, torch.dtype):
        msg = (
            f"invalid `{name}`: {dtype!r:.40} of type {type(dtype).__name__}; expected a "
            f"torch.dtype, one of: {choices}"
        )
        raise OptionTypeError(msg)
    if dtype not in allowed:
        msg = f"invalid `{name}`: {dtype!r}; expected one of: {choices}"
        raise OptionError(msg)
    return dtype


def check_id_dtype(id_dtype: object) -> torch.dtype | None:
    """``id_dtype`` checked against :data:`ID_DTYPES`, or ``None`` (keep the stored type)."""
    if id_dtype is None:
        return None
    return _check_dtype("id_dtype", id_dtype, ID_DTYPES)


def _check_device(device: object) -> torch.device | None:
    if device is None or isinstance(device, torch.device):
        return device
    expected = "expected None, a torch.device or a str such as 'cpu' or 'cuda:0'"
    if not isinstance(device, str):
        msg = f"invalid `device`: {device!r:.40}; {expected} (got a {type(device).__name__})"
        raise OptionTypeError(msg)
    with contextlib.suppress(RuntimeError):
        return torch.device(device)
    msg = f"invalid `device`: {device!r}; {expected}"
    raise OptionError(msg)
