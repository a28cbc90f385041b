"""What a codec is: the one place that knows how a column kind is encoded, checked and taken.

A codec owns, for its :data:`~arrow_split.schema.ColumnKind`:

- ``encode``: per-sample values (Python lists, numpy arrays, any array-like) -> one Arrow array,
  with every check of that kind (types, ranges, shapes), naming the sample at fault;
- ``lengths``: how many values (or rows) each sample holds, for the schema's length rules;
- ``decode``: the Arrow array -> one classic Python value per sample;
- ``take``: the rows of a set of indices, in fresh, compact buffers;
- ``stored``: a column read from a file, in the form this version stores;
- ``tensor_role``: what the torch leaf makes of it (a ragged column, a 1-D tensor, or nothing),
  and ``tensor_values``: the numpy values (and offsets) it makes them of;
- ``flat_numbers``: every number of the column as one flat numpy view, with where each sample
  starts (for the checks a dump gets on read, and finiteness where the loss counts);
- ``arrow_type``: the Arrow type of a spec's column, and its inverse ``type_fields``: what a
  column's Arrow type says of its spec (``holds`` checks a stored column against its spec).

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

from arrow_split._codecs._arrow import numpy_view, ragged_values
from arrow_split._codecs._take import take_fixed
from arrow_split.errors import ColumnTypeError
from arrow_split.schema import ColumnSpec, ObjectCodec

__all__ = ["Codec", "EncodeOptions", "FlatNumbers", "TensorRole", "TypeFields", "stored_type"]

TensorRole = Literal["ragged", "token_lists", "scalar", "none"]
"""What the torch leaf makes of a column: values + offsets, values + per-token offsets +
per-sample offsets (a list per token), a 1-D tensor, or nothing."""


@dataclasses.dataclass(frozen=True, slots=True)
class EncodeOptions:
    """Switches of :meth:`RolloutBatch.from_train_data` that change how values are checked.

    ``allow_nonfinite`` keeps NaN and infinity in float columns. ``exact_floats`` rejects a wider
    float that a float32 column would round; by default it is rounded as a float32 cast does (the
    value a trainer sees after ``torch.tensor(..., dtype=torch.float32)``).
    """

    allow_nonfinite: bool = False
    exact_floats: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class FlatNumbers:
    """A numeric column's numbers, flat.

    ``values`` (1-D), ``offsets`` (where each sample's values start, ``n + 1`` from 0; ``None``
    for one number per sample) and, for a list per token, ``token_offsets`` (where each token's
    values start).
    """

    values: np.ndarray
    offsets: np.ndarray | None
    token_offsets: np.ndarray | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class TypeFields:
    """What a column's Arrow type says of its spec (the inverse of :meth:`Codec.arrow_type`).

    ``storage``: the Arrow type the numbers are stored as (``value_type``, or a narrower integer
    type for narrow storage); ``trailing``: a tensor's trailing shape; ``codec``: how objects are
    stored. A field the type does not speak of is ``None`` (or ``()``).
    """

    storage: pa.DataType | None = None
    trailing: tuple[int, ...] = ()
    codec: ObjectCodec | None = None


def stored_type(spec: ColumnSpec, fields: TypeFields | None) -> pa.DataType:
    """The type a numeric column's values are stored as: ``fields.storage`` or ``value_type``."""
    if fields is not None and fields.storage is not None:
        return fields.storage
    if spec.value_type is None:  # pragma: no cover - ColumnSpec guarantees it
        msg = f"column `{spec.name}` has no value type"
        raise ColumnTypeError(msg)
    return spec.value_type


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

    def decode_read(
        self, spec: ColumnSpec, array: pa.Array, *, trust_objects: bool
    ) -> list[object]:
        """:meth:`decode` of a column that may come from a file: objects by the trust rule.

        Only objects can run code when decoded; every other codec decodes as :meth:`decode`.
        """
        return self.decode(spec, array)

    @abc.abstractmethod
    def arrow_type(self, spec: ColumnSpec, fields: TypeFields | None = None) -> pa.DataType:
        """The Arrow type of ``spec``'s column; ``fields`` gives what the values decide.

        A tensor's trailing shape and a narrow column's storage type are chosen by the batch's
        values: without ``fields``, the type has no trailing shape and stores ``value_type``.
        """

    @abc.abstractmethod
    def type_fields(self, arrow_type: pa.DataType) -> TypeFields | None:
        """What ``arrow_type`` says of the spec, or ``None`` if this codec never makes it."""

    def holds(self, spec: ColumnSpec, arrow_type: pa.DataType) -> bool:
        """Whether a column of ``arrow_type`` is one this codec makes for ``spec``."""
        fields = self.type_fields(arrow_type)
        if fields is None:
            return False
        if fields.storage is not None and fields.storage not in spec.storage_types:
            return False
        return bool(self.arrow_type(spec, fields) == arrow_type)

    def lengths(self, array: pa.Array) -> np.ndarray | None:
        """Values (or rows) per sample of a list column; ``None`` for a column of single values."""
        return None

    def flat_numbers(self, array: pa.Array) -> FlatNumbers | None:
        """Every number of a numeric column (see :class:`FlatNumbers`); ``None`` for objects."""
        return None

    def stored(self, spec: ColumnSpec, array: pa.Array) -> pa.Array:
        """A column read from a file in the form this version stores (an older form converted)."""
        return array

    def tensor_values(self, array: pa.Array) -> tuple[np.ndarray, np.ndarray | None] | None:
        """What a tensor is made of: values and offsets (ragged), values alone, or ``None``."""
        if self.tensor_role == "ragged":
            return ragged_values(array)
        if self.tensor_role == "scalar":
            return numpy_view(array), None
        return None

    def take(self, array: pa.Array, indices: np.ndarray) -> pa.Array:
        """The rows ``indices`` (int64, checked) in fresh buffers.

        Numbers without nulls: one ``np.take``; anything else: Arrow's own take.
        """
        return take_fixed(array, indices)
