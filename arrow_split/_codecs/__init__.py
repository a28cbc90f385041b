"""The column kinds: one module per kind, and :data:`KINDS`, the one table that picks one.

Each kind module implements :class:`~arrow_split._codecs._kind.Kind` (spec rules) and, for a
per-sample kind, :class:`~arrow_split._codecs._kind.Codec`. Adding a kind: one module, one row.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from arrow_split._codecs._kind import Codec, Kind
from arrow_split._codecs.batch_global import BatchGlobal
from arrow_split._codecs.per_sample_object import ObjectsCodec
from arrow_split._codecs.per_sample_scalar import ScalarCodec
from arrow_split._codecs.per_sample_tensor import TensorCodec
from arrow_split._codecs.per_token import RaggedCodec
from arrow_split._codecs.per_token_list import TokenListsCodec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from arrow_split.schema import ColumnSpec

__all__ = [
    "KINDS",
    "codec_for",
    "kind_of",
]

KINDS: Mapping[str, Kind] = MappingProxyType(
    {
        "per_token": RaggedCodec(),
        "per_token_list": TokenListsCodec(),
        "per_sample_tensor": TensorCodec(),
        "per_sample_scalar": ScalarCodec(),
        "per_sample_object": ObjectsCodec(),
        "batch_global": BatchGlobal(),
    }
)
"""Each value of ``ColumnSpec.kind`` -> its kind (a :class:`Codec` for a per-sample kind)."""

_CODECS: Mapping[str, Codec] = MappingProxyType(
    {name: kind for name, kind in KINDS.items() if isinstance(kind, Codec)}
)


def kind_of(spec: ColumnSpec) -> Kind:
    """The kind of ``spec`` (every kind has its rules)."""
    return KINDS[spec.kind]


def codec_for(spec: ColumnSpec) -> Codec:
    """The codec of a per-sample column's kind (batch-global specs have none: a KeyError)."""
    return _CODECS[spec.kind]
