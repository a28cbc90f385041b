"""One codec per column kind, and :func:`codec_for`, the only place that picks one by kind.

The codec contract: ``_base``; batch globals: ``scalar``; dict <-> columns: ``_convert``.
"""

from __future__ import annotations

from arrow_split._codecs._base import Codec
from arrow_split._codecs.lists import RaggedCodec, TensorCodec, TokenListsCodec
from arrow_split._codecs.objects import ObjectsCodec
from arrow_split._codecs.scalar import ScalarCodec
from arrow_split.schema import ColumnSpec

__all__ = ["codec_for"]

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
