"""One codec per column kind, and :func:`codec_for`, the only place that picks one by kind.

The private package's face: the library imports codecs and their helpers from here. What a codec
owns: :mod:`arrow_split._codecs._base`. Batch-global values are not columns:
:mod:`arrow_split._codecs.scalar` checks and copies them.
"""

from __future__ import annotations

from arrow_split._codecs._base import (
    Codec,
    EncodeOptions,
    FlatNumbers,
    TensorRole,
    TypeFields,
    arrow_take,
    child_nulls,
    data_buffer,
    leaf_type,
    numpy_dtype,
    numpy_view,
    parts,
    ragged_values,
    short_type,
    take_fixed,
    take_runs,
    trailing_shape,
)
from arrow_split._codecs._numeric import check_finite, check_flag, is_array, is_flag
from arrow_split._codecs.lists import (
    RaggedCodec,
    TensorCodec,
    TokenLists,
    TokenListsCodec,
    check_nonempty,
    token_list_values,
)
from arrow_split._codecs.objects import (
    NotPlainData,
    ObjectsCodec,
    canonical_codes,
    codes_and_validity,
    loads_plain,
)
from arrow_split._codecs.scalar import (
    ScalarCodec,
    check_batch_global,
    check_per_sample_values,
    global_to_python,
    unpadded_samples,
)
from arrow_split.schema import ColumnSpec

__all__ = [
    "Codec",
    "EncodeOptions",
    "FlatNumbers",
    "NotPlainData",
    "ScalarCodec",
    "TensorRole",
    "TokenLists",
    "TypeFields",
    "arrow_take",
    "canonical_codes",
    "check_batch_global",
    "check_finite",
    "check_flag",
    "check_nonempty",
    "check_per_sample_values",
    "child_nulls",
    "codec_for",
    "codes_and_validity",
    "data_buffer",
    "global_to_python",
    "is_array",
    "is_flag",
    "leaf_type",
    "loads_plain",
    "numpy_dtype",
    "numpy_view",
    "parts",
    "ragged_values",
    "short_type",
    "take_fixed",
    "take_runs",
    "token_list_values",
    "trailing_shape",
    "unpadded_samples",
]

_CODECS: dict[str, Codec] = {
    "per_token": RaggedCodec(),
    "per_token_list": TokenListsCodec(),
    "per_sample_tensor": TensorCodec(),
    "per_sample_scalar": ScalarCodec(),
    "per_sample_object": ObjectsCodec(),
}


def codec_for(spec: ColumnSpec) -> Codec:
    """The codec of a per-sample column's kind (batch-global specs have none: a KeyError)."""
    return _CODECS[spec.kind]
