"""What a column kind is: the interface each kind's module implements (the table: ``__init__``).

A :class:`Kind` owns its spec rules; a :class:`Codec` (every kind but ``batch_global``) also
its encoding and checks, decoding, Arrow type, take, growth in the builder, padding fill and
tensor view. Nothing outside this package branches on a kind: it asks the kind.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal, cast

import numpy as np
import pyarrow as pa

from arrow_split._codecs._base import (
    EncodeOptions,
    RunsMemo,
    child_nulls,
    numpy_view,
    take_fixed,
)
from arrow_split._codecs._checks import check_flag
from arrow_split._codecs._growable import Growable, growable_for
from arrow_split._codecs._numeric import is_flag
from arrow_split.errors import SchemaError, SchemaTypeError, ValueRangeError

if TYPE_CHECKING:  # the spec's module imports the kinds: its types are for the checker only
    from arrow_split.schema import ColumnSpec, ObjectCodec

__all__ = [
    "Codec",
    "FlatNumbers",
    "Kind",
    "NARROWABLE_TYPES",
    "NumbersCodec",
    "TensorRole",
    "TypeFields",
    "storage_types",
    "stored_type",
]

TensorRole = Literal["ragged", "token_lists", "scalar", "none"]
"""What the torch leaf makes of a column: values + offsets, values + per-token offsets +
per-sample offsets (a list per token), a 1-D tensor, or nothing."""

NARROWABLE_TYPES = (pa.int32(), pa.int64())
"""The ``value_type`` of a column that may be stored narrow (``storage="narrow"``)."""

_NARROW_TYPES = (pa.uint8(), pa.uint16(), pa.int32())
_INTEGER_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16())


def storage_types(value_type: pa.DataType, storage: str) -> tuple[pa.DataType, ...]:
    """The types ``value_type`` values may be stored as, narrowest first (``ColumnStorage``)."""
    if storage == "exact":
        return (value_type,)
    width = value_type.bit_width
    narrower = tuple(t for t in _NARROW_TYPES if t.bit_width < width)
    return (*narrower, value_type)


@dataclasses.dataclass(frozen=True, slots=True)
class FlatNumbers:
    """A numeric column's numbers as numpy views: flat, or as a tensor is made of them."""

    values: np.ndarray  # 1-D; a tensor's: its rows (``[rows, *trailing]``)
    offsets: np.ndarray | None  # where each sample's values (a tensor's: tokens) start; None: one
    token_offsets: np.ndarray | None = None  # a list per token: where each token's values start


@dataclasses.dataclass(frozen=True, slots=True)
class TypeFields:
    """What a column's Arrow type says of its spec (the inverse of :meth:`Codec.arrow_type`)."""

    storage: pa.DataType | None = None  # the numbers' type: value_type, or a narrower integer
    trailing: tuple[int, ...] = ()  # a tensor's trailing shape
    codec: ObjectCodec | None = None  # how objects are stored


def stored_type(spec: ColumnSpec, fields: TypeFields | None) -> pa.DataType:
    """The type a numeric column's values are stored as: ``fields.storage`` or ``value_type``."""
    if fields is not None and fields.storage is not None:
        return fields.storage
    return cast("pa.DataType", spec.value_type)  # a numeric spec's, checked by its kind


class Kind(abc.ABC):
    """One kind of column (a value of ``ColumnSpec.kind``) and its spec rules."""

    text: ClassVar[str]  # what a value of the kind is, for people (a dump's field metadata)
    per_sample: ClassVar[bool] = True  # one value per sample (else one for the batch)
    numbers: ClassVar[bool] = True  # holds numbers: ``value_type`` is a number type
    takes_nonempty: ClassVar[bool] = False  # ``nonempty=True`` means something here
    takes_length: ClassVar[bool] = False  # a sample's value has a length (``length`` rules it)

    def check_spec(self, spec: ColumnSpec) -> None:
        """Raise SchemaError (SchemaTypeError) unless ``spec``'s fields fit this kind."""
        if spec.nonempty and not self.takes_nonempty:
            msg = f"column `{spec.name}`: `nonempty=True` is for per_token_list columns only"
            raise SchemaError(msg, key=spec.name)
        if spec.length is not None and not self.takes_length:
            msg = (
                f"column `{spec.name}`: a {spec.kind} value has no per-sample length, so no "
                f"`length` rule ({spec.length!r}); `length` is for list and tensor kinds"
            )
            raise SchemaError(msg, key=spec.name, got=repr(spec.length))
        if spec.global_shape is not None and self.per_sample:  # the batch-global kind checks it
            msg = f"column `{spec.name}`: `global_shape` is for batch_global columns only"
            raise SchemaError(msg, key=spec.name, got=f"{spec.global_shape!r:.40}")
        value_type = spec.value_type
        if self.numbers and not isinstance(value_type, pa.DataType):
            msg = (
                f"column `{spec.name}`: a {spec.kind} column needs `value_type`, an Arrow type "
                f"such as `pa.int32()` or `pa.float32()`, got {value_type!r:.40}"
            )
            raise SchemaTypeError(msg, key=spec.name)
        if self.numbers and not (
            pa.types.is_floating(value_type)
            or pa.types.is_boolean(value_type)
            or value_type in _INTEGER_TYPES
        ):
            msg = (
                f"column `{spec.name}`: unsupported `value_type` {value_type}; expected a signed "
                "integer, uint8, uint16, a float or bool type (store other values as a "
                "per_sample_object column)"
            )
            raise SchemaError(msg, key=spec.name)
        if value_type is not None and not isinstance(value_type, pa.DataType):
            msg = (
                f"column `{spec.name}`: `value_type` must be a pyarrow DataType or None, got "
                f"{type(value_type).__name__} {value_type!r:.40}"
            )
            raise SchemaTypeError(msg, key=spec.name)

    def stored_as(self, spec: ColumnSpec) -> str | None:
        """How ``spec``'s values are stored, for people, where the spec chooses it."""
        return None

    def check_storage(self, spec: ColumnSpec) -> None:
        """Raise SchemaError unless ``spec`` may store its integers narrow."""
        msg = (
            f"column `{spec.name}`: `storage='narrow'` needs a per_sample_tensor column of "
            f"value_type int32 or int64 without `flag`, got a {spec.kind} column of "
            f"{spec.value_type}; declare the column that way or keep `storage='exact'`"
        )
        raise SchemaError(msg, key=spec.name)


class Codec(Kind):
    """A per-sample kind: encode, check, decode, type, take, grow, pad and view its column."""

    tensor_role: ClassVar[TensorRole] = "none"
    one_number: ClassVar[bool] = False  # exactly one number per sample (ids, flags, scores)

    @abc.abstractmethod
    def encode(
        self, spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
    ) -> tuple[pa.Array, ColumnSpec]:
        """One Arrow array of a user's ``samples``, checked once, and the spec as used."""

    @abc.abstractmethod
    def decode(self, spec: ColumnSpec, array: pa.Array) -> list[object]:
        """One classic Python value per sample."""

    def decode_read(
        self, spec: ColumnSpec, array: pa.Array, *, trust_objects: bool
    ) -> list[object]:
        """:meth:`decode` of a column that may come from a file (only objects can run code)."""
        return self.decode(spec, array)

    @abc.abstractmethod
    def arrow_type(self, spec: ColumnSpec, fields: TypeFields | None = None) -> pa.DataType:
        """``spec``'s column's Arrow type; ``fields``: what the values decide (default: none)."""

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
        """Values (or rows) per sample of a list column; ``None`` for single values."""
        return None

    def flat_numbers(self, array: pa.Array) -> FlatNumbers | None:
        """Every number of a numeric column (see :class:`FlatNumbers`); ``None`` for objects."""
        return None

    def check_content(self, spec: ColumnSpec, array: pa.Array) -> None:
        """Raise the typed error of the first rule a column read from a file breaks."""

    def stored(self, spec: ColumnSpec, array: pa.Array) -> pa.Array:
        """A column read from a file in the form this version stores (an older form converted)."""
        return array

    def tensor_values(self, array: pa.Array) -> FlatNumbers | None:
        """What a tensor is made of (its :data:`tensor_role` says how), or ``None``."""
        return None

    def take(self, array: pa.Array, indices: np.ndarray, memo: RunsMemo | None = None) -> pa.Array:
        """The rows ``indices`` (int64, checked by the caller) in fresh buffers.

        ``memo``: as :func:`take_runs`, shared by the columns of one take.
        """
        return take_fixed(array, indices)

    def growable(self, arrow_type: pa.DataType) -> Growable:
        """An empty column of ``arrow_type`` (one this codec made) the builder appends to."""
        return growable_for(arrow_type)

    @abc.abstractmethod
    def fill(self, array: pa.Array, rows: np.ndarray, value: int) -> pa.Array:
        """``array`` with the ``rows`` (a boolean mask) set to padding ``value`` where it can."""


class NumbersCodec(Codec):
    """A codec of numbers: no nulls, 0/1 in a flag column (checked on a column read back)."""

    def check_content(self, spec: ColumnSpec, array: pa.Array) -> None:
        if array.null_count:
            _null_error(spec, array.is_null())
        if child_nulls(array):
            _null_error(spec, None)
        numbers = self.flat_numbers(array)
        if numbers is not None and is_flag(spec):
            check_flag(spec.name, numbers.values, numbers.offsets)

    def fill(self, array: pa.Array, rows: np.ndarray, value: int) -> pa.Array:
        filled = np.array(numpy_view(array), copy=True)
        filled[rows] = value
        return pa.array(filled, type=array.type)


def _null_error(spec: ColumnSpec, nulls: pa.Array | None) -> None:
    row = None if nulls is None else int(np.argmax(nulls.to_numpy(zero_copy_only=False)))
    msg = f"`{spec.name}` is null; a {spec.kind} column holds no nulls"
    raise ValueRangeError(msg, key=spec.name, sample=row)
