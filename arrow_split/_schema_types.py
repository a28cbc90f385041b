"""The words a :class:`~arrow_split.ColumnSpec` is written in, and the checks of its values.

The ``Literal`` types of a spec's fields (:data:`ColumnKind`, :data:`ObjectCodec`,
:data:`GlobalShape`, :data:`ColumnStorage`, :data:`Role`; the length rule, whose words are
field names too, stays in :mod:`arrow_split.schema`), the kinds each role may take
(:data:`ROLE_KINDS`), the Arrow types a column's values may have and the integer types narrow
storage picks from (:func:`storage_types`), with the checks that a field holds one of its words
(:func:`check_choice`), a ``value_type`` one of those types (:func:`check_value_type`) and each
role one column only (:func:`check_roles`). :mod:`arrow_split.schema` declares the specs with
them and exports the types; its module docstring says what each kind and role means.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

import pyarrow as pa

from arrow_split.errors import SchemaError, SchemaTypeError

__all__ = [
    "ColumnKind",
    "ColumnStorage",
    "GlobalShape",
    "NARROWABLE_TYPES",
    "ObjectCodec",
    "ROLE_KINDS",
    "Role",
    "check_choice",
    "check_roles",
    "check_value_type",
    "storage_types",
]

ColumnKind = Literal[
    "per_token",
    "per_token_list",
    "per_sample_tensor",
    "per_sample_scalar",
    "per_sample_object",
    "batch_global",
]
"""The six kinds of values in a rollout batch."""

ObjectCodec = Literal["string", "string_list", "pickle", "json"]
"""How a per-sample object is stored.

``string``: ``large_string``; a sample that is not a ``str`` makes the whole column fall back to
``pickle``. ``string_list``: ``large_list<large_string>``. ``json``: ``large_string`` holding one
JSON text per sample (``None`` as null), readable by any tool; a column with a sample that does
not round-trip exactly through JSON (a tuple, bytes, a non-str dict key, NaN, a numpy value)
falls back to ``pickle``. ``pickle``: ``large_binary`` holding one
pickle (protocol 5) per sample, ``None`` as null; objects round-trip exactly and are decoded only on
the rank that owns the row.
"""

GlobalShape = Literal["int", "int_list", "int_map", "str_list", "float_per_sample"]
"""The documented shape of a batch-global value.

``int``: one int. ``int_list``: a list of ints. ``int_map``: a dict of int keys to non-negative
int values (e.g. ``{adapter_slot: batch_size}``), kept a dict. ``str_list``: a list of strings.
``float_per_sample``: one number per sample of the whole batch.
"""

ColumnStorage = Literal["exact", "narrow"]
"""How the integers of a ``per_sample_tensor`` column are stored.

``exact``: as ``value_type``. ``narrow`` (id columns such as ``rollout_routed_experts``, whose
values are small: expert ids < 256): in the narrowest of uint8, uint16, int32 and ``value_type``
that holds every value of the batch (:attr:`~arrow_split.ColumnSpec.storage_types`), chosen once
per batch when it is built, so that every shard of a step has the same Arrow type. ``value_type``
stays the column's logical type: values are checked against it, ``to_train_data`` gives it back
and :func:`arrow_split.torch.to_tensors` widens to the dtype the trainer asks for (``id_dtype``).
"""

Role = Literal[
    "length_source",
    "response_length",
    "loss_mask",
    "sampling_mask",
    "extra_rows",
    "witness",
    "adapter_slot",
    "rollout_id",
    "step_batch_size",
    "adapter_count",
    "padding",
]
"""The part a column plays (see :mod:`arrow_split.schema`); one column per role.

``length_source``: a ``per_token`` column whose lengths are the samples' token counts (``tokens``).
``response_length``: a ``per_sample_scalar`` of response lengths (``response_lengths``).
``loss_mask``: the per-token 0/1 column saying which response tokens count toward the loss
(``loss_masks``); NaN and infinity in a response-aligned float column are refused only where it
is 1.
``sampling_mask``: the ``per_token_list`` of the ids the sampler could pick at each response
token (``rollout_sampling_masks``; miles ships it as two flat keys).
``extra_rows``: a per-sample column whose non-null values allow extra ``tokens_minus_one`` rows
(``multimodal_train_inputs``). ``witness``: the per-sample witness ids a rank can attach
(``seq_witness_ids``). ``adapter_slot``: the LoRA adapter of each sample; a rank's rows are
ordered by it (``adapter_slots``). ``rollout_id``: the rollout a sample belongs to
(``rollout_ids``). Batch-global: ``step_batch_size``, the rollouts per training step when the
batch sets it (``dynamic_global_batch_size``); ``adapter_count``, the number of LoRA adapters
(``n_adapters``), which every shard of a batch with adapter slots carries. ``padding``: a bool
per-sample column that is true on the rows :func:`arrow_split.pad_to_dp` added (``is_padding``).
"""

ROLE_KINDS: dict[str, tuple[str, ...]] = {
    "length_source": ("per_token",),
    "response_length": ("per_sample_scalar",),
    "loss_mask": ("per_token",),
    "sampling_mask": ("per_token_list",),
    "extra_rows": ("per_sample_object", "per_sample_scalar"),
    "witness": ("per_sample_scalar",),
    "adapter_slot": ("per_sample_scalar",),
    "rollout_id": ("per_sample_scalar",),
    "step_batch_size": ("batch_global",),
    "adapter_count": ("batch_global",),
    "padding": ("per_sample_scalar",),
}

NARROWABLE_TYPES = (pa.int32(), pa.int64())
"""The ``value_type`` of a column that may be stored narrow (``storage="narrow"``)."""

_NARROW_TYPES = (pa.uint8(), pa.uint16(), pa.int32())
_INTEGER_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16())


def check_choice(name: str, value: object, allowed: object) -> None:
    """Raise unless ``value`` is one of the words of the ``Literal`` type ``allowed``.

    Raises
    ------
    SchemaTypeError
        ``value`` is not a str.
    SchemaError
        ``value`` is a str outside the words; the message lists them.
    """
    choices = get_args(allowed)
    expected = f"expected one of: {', '.join(map(repr, choices))}"
    if not isinstance(value, str):
        msg = f"invalid `{name}`: {value!r:.40} of type {type(value).__name__}; {expected}"
        raise SchemaTypeError(msg)
    if value not in choices:
        msg = f"invalid `{name}`: {value!r}; {expected}"
        raise SchemaError(msg)


def check_roles(roles: Iterable[tuple[str, str | None]]) -> None:
    """Raise unless every role of the ``(column, role)`` pairs is held by at most one column.

    Raises
    ------
    SchemaError
        Two columns have the same role; the message names both.
    """
    holders: dict[str, str] = {}
    for name, role in roles:
        if role is None:
            continue
        if role in holders:
            msg = (
                f"columns `{holders[role]}` and `{name}` both have role "
                f"{role!r}; give the role to one column only"
            )
            raise SchemaError(msg)
        holders[role] = name


def check_value_type(name: str, kind: str, value_type: object) -> pa.DataType:
    """``value_type`` of column ``name`` (of ``kind``) if it is a type a column's values may have.

    A signed integer, uint8, uint16, a float or bool type.

    Raises
    ------
    SchemaTypeError
        ``value_type`` is not an Arrow type.
    SchemaError
        An Arrow type outside those (store such values as a ``per_sample_object`` column).
    """
    if not isinstance(value_type, pa.DataType):
        msg = (
            f"column `{name}`: a {kind} column needs `value_type`, an Arrow type "
            f"such as `pa.int32()` or `pa.float32()`, got {value_type!r:.40}"
        )
        raise SchemaTypeError(msg)
    numeric = pa.types.is_floating(value_type) or value_type in _INTEGER_TYPES
    if not (numeric or pa.types.is_boolean(value_type)):
        msg = (
            f"column `{name}`: unsupported `value_type` {value_type}; expected a signed "
            "integer, uint8, uint16, a float or bool type (store other values as a "
            "per_sample_object column)"
        )
        raise SchemaError(msg)
    return value_type


def storage_types(value_type: pa.DataType, storage: ColumnStorage) -> tuple[pa.DataType, ...]:
    """The types values of ``value_type`` may be stored as, narrowest first (:data:`ColumnStorage`).

    ``(value_type,)`` for exact storage; for narrow storage uint8, uint16, int32 (those narrower
    than ``value_type``) and ``value_type``.
    """
    if storage == "exact":
        return (value_type,)
    width = value_type.bit_width
    narrower = tuple(t for t in _NARROW_TYPES if t.bit_width < width)
    return (*narrower, value_type)
