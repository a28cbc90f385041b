"""What a codec is: the one place that knows how a column kind is encoded, checked and taken.

A codec owns, for its :data:`~arrow_split.schema.ColumnKind`:

- ``encode``: per-sample values (Python lists, numpy arrays, any array-like) -> one Arrow array,
  with every check of that kind (types, ranges, shapes), naming the sample at fault;
- ``lengths``: how many values (or rows) each sample holds, for the schema's length rules;
- ``decode``: the Arrow array -> one classic Python value per sample;
- ``take``: the rows of a set of indices, in fresh, compact buffers;
- ``stored``: a column read from a file, in the form this version stores;
- ``tensor_role``: what the torch leaf makes of it (a ragged column, a 1-D tensor, or nothing).

:mod:`arrow_split._codecs` holds one codec per kind and :func:`codec_for` picks it; nothing else
in the library branches on a column's kind.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute  # Arrow's take needs it: loaded with the core, not in a rank's first call

from arrow_split.schema import ColumnSpec

__all__ = ["Codec", "EncodeOptions", "TensorRole"]

TensorRole = Literal["ragged", "scalar", "none"]
"""What the torch leaf makes of a column: values + offsets, a 1-D tensor, or nothing."""


@dataclasses.dataclass(frozen=True, slots=True)
class EncodeOptions:
    """Switches of :meth:`RolloutBatch.from_train_data` that change how values are checked.

    ``allow_nonfinite`` keeps NaN and infinity in float columns. ``exact_floats`` rejects a wider
    float that a float32 column would round; by default it is rounded as a float32 cast does (the
    value a trainer sees after ``torch.tensor(..., dtype=torch.float32)``).
    """

    allow_nonfinite: bool = False
    exact_floats: bool = False


class Codec(abc.ABC):
    """Encode, check, decode and take one kind of column (see the module docstring)."""

    tensor_role: ClassVar[TensorRole] = "none"

    @abc.abstractmethod
    def encode(
        self, spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
    ) -> tuple[pa.Array, ColumnSpec]:
        """One Arrow array of ``samples``, and the spec as used (a codec may refine it)."""

    @abc.abstractmethod
    def decode(self, spec: ColumnSpec, array: pa.Array) -> list[object]:
        """One classic Python value per sample."""

    def lengths(self, array: pa.Array) -> np.ndarray | None:
        """Values (or rows) per sample of a list column; ``None`` for a column of single values."""
        return None

    def stored(self, spec: ColumnSpec, array: pa.Array) -> pa.Array:
        """A column read from a file in the form this version stores (an older form converted)."""
        return array

    def take(self, array: pa.Array, indices: np.ndarray) -> pa.Array:
        """The rows ``indices`` (int64, checked) in fresh buffers: Arrow's own take."""
        return array.take(pa.array(indices, type=pa.int64()))
