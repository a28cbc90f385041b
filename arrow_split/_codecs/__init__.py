"""One codec per column kind, and :func:`codec_for`, the only place that picks one by kind.

See :mod:`arrow_split._codecs._base` for what a codec owns. Batch-global values are not columns:
:mod:`arrow_split._codecs.globals` checks and copies them.
"""

from __future__ import annotations

from arrow_split._codecs._base import Codec, EncodeOptions, FlatNumbers, TensorRole, TypeFields
from arrow_split._codecs.objects import ObjectsCodec
from arrow_split._codecs.ragged import RaggedCodec
from arrow_split._codecs.scalar import ScalarCodec
from arrow_split._codecs.tensor import TensorCodec
from arrow_split._codecs.token_lists import TokenListsCodec
from arrow_split.schema import ColumnSpec

__all__ = [
    "Codec",
    "EncodeOptions",
    "FlatNumbers",
    "ScalarCodec",
    "TensorRole",
    "TypeFields",
    "codec_for",
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
