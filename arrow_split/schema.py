"""Which rollout field is which kind of column, and the Arrow type it becomes.

A rollout batch holds six kinds of values (:data:`ColumnKind`):

``per_token``
    One ragged list per sample: ``tokens`` (prompt + response ids) and the columns aligned to the
    response (``loss_masks``, ``rollout_log_probs``, ...). Arrow type ``large_list<value_type>``.
``per_token_list``
    A list of numbers per token: one ragged list of ragged lists per sample, aligned like a
    per-token column (``rollout_sampling_masks``: for each response token, the ids the sampler
    could pick). Arrow type ``large_list<large_list<value_type>>``. A sample is given as a list
    of lists or as :class:`~arrow_split.TokenLists` (flat values + per-token offsets).
``per_sample_tensor``
    One array per sample of shape ``[rows, *trailing]``, with the same trailing shape across
    samples (``rollout_routed_experts``: ``[len(tokens) - 1, layers, top_k]``). Arrow type
    ``large_list<fixed_size_list<fixed_size_list<value_type, top_k>, layers>>``: the trailing shape
    lives in the type itself. An id column declared ``storage="narrow"`` (the routed experts)
    holds uint8 or uint16 there when its values fit (:data:`ColumnStorage`).
``per_sample_scalar``
    One number per sample (``response_lengths``, ``rewards``, ...). A primitive Arrow column.
``per_sample_object``
    One Python object per sample (``prompt``, ``metadata``, ...), stored by a :data:`ObjectCodec`.
``batch_global``
    One value for the whole batch (``raw_reward``, ``dynamic_global_batch_size``, ...), kept beside
    the record batch and shipped whole with every shard.

Every list column uses 64-bit offsets (``large_list``): offsets cost 8 bytes per sample, and no
column can pass the 2**31 values at which 32-bit list offsets overflow in ``take``.

A key the library does not know is never guessed: declare it with a :class:`ColumnSpec`.

Roles. A few columns play a part beyond their values (:data:`Role`): the length source (whose
offsets are every sample's token count and drive the plan), the response lengths (the reference of
response-aligned columns), the extra-rows marker (a sample with a value there may have more rows
in its ``tokens_minus_one`` tensors), the witness ids, the adapter slots (rows of each rank are
ordered by them) and the rollout ids; and two batch-global values: the rollouts per training step
and the number of LoRA adapters. Roles are declared here, on the specs, and the rest of the
library finds a column by its role (:func:`role_column`), never by its name.

The ``Literal`` types above and the checks of a spec's fields live in
:mod:`arrow_split._schema_types`; this module exports them with the specs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Literal

import pyarrow as pa

from arrow_split._schema_types import (
    NARROWABLE_TYPES,
    ROLE_KINDS,
    ColumnKind,
    ColumnStorage,
    GlobalShape,
    ObjectCodec,
    Role,
    check_choice,
    check_roles,
    check_value_type,
    storage_types,
)
from arrow_split.errors import SchemaError, SchemaTypeError

__all__ = [
    "ColumnKind",
    "ColumnSpec",
    "ColumnStorage",
    "GlobalShape",
    "KNOWN_COLUMNS",
    "LengthRule",
    "ObjectCodec",
    "PADDING_VALUES",
    "Role",
    "TOTAL_LENGTHS",
    "resolve_specs",
    "role_column",
]


LengthRule = Literal["tokens", "response", "tokens_minus_one"]
"""How long a sample's value must be.

``tokens``: ``len(tokens[i])``. ``response``: ``response_lengths[i]``. ``tokens_minus_one``:
``len(tokens[i]) - 1`` rows (more are allowed for a sample whose ``multimodal_train_inputs`` is
set, since expanded media tokens add rows).
"""


@dataclasses.dataclass(frozen=True, slots=True)
class ColumnSpec:
    """How one key of the train data is validated and stored.

    Parameters
    ----------
    name
        The key in the train-data dict.
    kind
        Which kind of value the key holds (:data:`ColumnKind`).
    value_type
        The Arrow type of one value: the list items of a ``per_token`` column (the innermost
        items of a ``per_token_list``), the tensor
        elements of a ``per_sample_tensor`` column, the column type of a ``per_sample_scalar``.
        Unused (``None``) for objects and batch-global values.
    length
        For ``per_token``, ``per_token_list`` and ``per_sample_tensor``: the :data:`LengthRule`
        a sample's value must follow, or ``None`` for no rule (the sample's own length is kept
        as it is).
    flag
        Values are 0/1 (``bool`` accepted); anything else is rejected.
    finite
        Reject NaN and infinity in a float column (the default). In a column aligned to the
        response (``length="response"``) they are rejected only where the loss mask
        (``loss_masks``) is 1, and everywhere when the batch has no loss mask.
        ``from_train_data(allow_nonfinite=True)`` lifts the check for all columns (the specs as
        used then say ``finite=False``, so that a dump of the batch reads back).
    nonempty
        For ``per_token_list``: every token's list holds at least one value (a sampling support
        is never empty); a sample given as offsets needs them strictly increasing.
    codec
        For ``per_sample_object``: how the objects are stored (:data:`ObjectCodec`).
    global_shape
        For ``batch_global``: the documented shape of the value (:data:`GlobalShape`).
    role
        The part the column plays (:data:`Role`), or ``None``.
    storage
        For an integer ``per_sample_tensor`` of type int32 or int64: ``"narrow"`` stores the
        values in the narrowest integer type that holds the batch's values
        (:data:`ColumnStorage`); ``"exact"`` (the default) stores ``value_type``.

    Examples
    --------
    Declare a per-token advantage column aligned to the response, a per-sample score, and a
    list of ids per response token:

    >>> import pyarrow as pa
    >>> from arrow_split import ColumnSpec
    >>> advantages = ColumnSpec("advantages", "per_token", pa.float32(), length="response")
    >>> score = ColumnSpec("score", "per_sample_scalar", pa.float64())
    >>> tops = ColumnSpec("top_ids", "per_token_list", pa.int32(), length="response")
    """

    name: str
    kind: ColumnKind
    value_type: pa.DataType | None = None
    length: LengthRule | None = None
    flag: bool = False
    finite: bool = True
    nonempty: bool = False
    codec: ObjectCodec = "pickle"
    global_shape: GlobalShape | None = None
    role: Role | None = None
    storage: ColumnStorage = "exact"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            msg = f"`name` must be a non-empty str, got {self.name!r}"
            raise SchemaTypeError(msg)
        check_choice("kind", self.kind, ColumnKind)
        if self.length is not None:
            check_choice("length", self.length, LengthRule)
        check_choice("codec", self.codec, ObjectCodec)
        for switch in ("flag", "finite", "nonempty"):
            if not isinstance(getattr(self, switch), bool):
                value = getattr(self, switch)
                msg = f"column `{self.name}`: `{switch}` must be a bool, got {value!r:.40}"
                raise SchemaTypeError(msg)
        if self.nonempty and self.kind != "per_token_list":
            msg = f"column `{self.name}`: `nonempty=True` is for per_token_list columns only"
            raise SchemaError(msg)
        if self.kind in ("per_token", "per_token_list", "per_sample_tensor", "per_sample_scalar"):
            self._check_value_type()
        if self.kind == "batch_global":
            check_choice("global_shape", self.global_shape, GlobalShape)
        if self.role is not None:
            self._check_role()
        if self.storage != "exact":
            self._check_storage()

    def _check_storage(self) -> None:
        check_choice("storage", self.storage, ColumnStorage)
        if self.kind != "per_sample_tensor" or self.value_type not in NARROWABLE_TYPES or self.flag:
            msg = (
                f"column `{self.name}`: `storage='narrow'` needs a per_sample_tensor column of "
                f"value_type int32 or int64 without `flag`, got a {self.kind} column of "
                f"{self.value_type}; declare the column that way or keep `storage='exact'`"
            )
            raise SchemaError(msg)

    def _check_role(self) -> None:
        check_choice("role", self.role, Role)
        kinds = ROLE_KINDS[str(self.role)]
        if self.kind not in kinds:
            msg = (
                f"column `{self.name}`: role {self.role!r} needs a column of kind "
                f"{' or '.join(map(repr, kinds))}, got {self.kind!r}"
            )
            raise SchemaError(msg)
        integer = self.value_type is None or pa.types.is_integer(self.value_type)
        if self.role == "padding" and not (self.value_type == pa.bool_() and self.flag):
            msg = f"column `{self.name}`: role 'padding' needs a bool flag column"
            raise SchemaError(msg)
        scalar = self.kind == "per_sample_scalar"
        if self.role not in ("extra_rows", "padding") and scalar and not integer:
            msg = f"column `{self.name}`: role {self.role!r} needs an integer `value_type`"
            raise SchemaError(msg)

    def _check_value_type(self) -> None:
        value_type = check_value_type(self.name, self.kind, self.value_type)
        if self.kind == "per_sample_tensor" and pa.types.is_boolean(value_type):
            msg = f"column `{self.name}`: tensor columns hold integers or floats, got bool"
            raise SchemaError(msg)

    @property
    def storage_types(self) -> tuple[pa.DataType, ...]:
        """The Arrow types the values may be stored as, narrowest first (see ``storage``).

        ``(value_type,)`` for exact storage; for narrow storage uint8, uint16, int32 (those
        narrower than ``value_type``) and ``value_type``. Empty for objects and batch-globals.
        """
        if self.value_type is None:
            return ()
        return storage_types(self.value_type, self.storage)

    @property
    def is_per_sample(self) -> bool:
        """Whether the key holds one value per sample (every kind but ``batch_global``)."""
        return self.kind != "batch_global"


def _known() -> dict[str, ColumnSpec]:
    int32, float32 = pa.int32(), pa.float32()
    specs = [
        ColumnSpec("tokens", "per_token", int32, role="length_source"),
        ColumnSpec(
            "loss_masks", "per_token", pa.uint8(), length="response", flag=True, role="loss_mask"
        ),
        ColumnSpec("rollout_log_probs", "per_token", float32, length="response"),
        ColumnSpec(
            "rollout_sampling_masks",
            "per_token_list",
            int32,
            length="response",
            nonempty=True,
            role="sampling_mask",
        ),
        ColumnSpec("teacher_log_probs", "per_token", float32, length="response"),
        ColumnSpec("opd_reverse_kl", "per_token", float32, length="response"),
        ColumnSpec(
            "rollout_routed_experts",
            "per_sample_tensor",
            int32,
            length="tokens_minus_one",
            storage="narrow",
        ),
        ColumnSpec(
            "rollout_indexer_topk",
            "per_sample_tensor",
            int32,
            length="tokens_minus_one",
            storage="narrow",
        ),
        ColumnSpec("response_lengths", "per_sample_scalar", pa.int64(), role="response_length"),
        ColumnSpec("rewards", "per_sample_scalar", pa.float64()),
        ColumnSpec("truncated", "per_sample_scalar", pa.bool_(), flag=True),
        ColumnSpec("round_number", "per_sample_scalar", pa.int64()),
        ColumnSpec("sample_indices", "per_sample_scalar", pa.int64()),
        ColumnSpec("rollout_ids", "per_sample_scalar", pa.int64(), role="rollout_id"),
        ColumnSpec("rollout_mask_sums", "per_sample_scalar", pa.int64()),
        ColumnSpec("seq_witness_ids", "per_sample_scalar", pa.int64(), role="witness"),
        ColumnSpec("adapter_slots", "per_sample_scalar", pa.int64(), role="adapter_slot"),
        ColumnSpec("is_padding", "per_sample_scalar", pa.bool_(), flag=True, role="padding"),
        ColumnSpec("prompt", "per_sample_object", codec="string"),
        ColumnSpec("metadata", "per_sample_object", codec="pickle"),
        ColumnSpec("weight_versions", "per_sample_object", codec="string_list"),
        ColumnSpec("multimodal_train_inputs", "per_sample_object", role="extra_rows"),
        ColumnSpec("raw_reward", "batch_global", global_shape="float_per_sample"),
        ColumnSpec(
            "dynamic_global_batch_size", "batch_global", global_shape="int", role="step_batch_size"
        ),
        ColumnSpec("step_slots", "batch_global", global_shape="int_list"),
        ColumnSpec("step_adapter_names", "batch_global", global_shape="str_list"),
        ColumnSpec("step_adapter_batch_sizes", "batch_global", global_shape="int_map"),
        ColumnSpec("prompt_group_sizes", "batch_global", global_shape="int_list"),
        ColumnSpec("n_adapters", "batch_global", global_shape="int", role="adapter_count"),
    ]
    return {spec.name: spec for spec in specs}


KNOWN_COLUMNS: Mapping[str, ColumnSpec] = _known()
"""The keys arrow_split knows, by name. ``total_lengths`` is not among them: it is derived."""

TOTAL_LENGTHS = "total_lengths"
"""The derived key: each sample's token count, from the length source's offsets (never stored).

The one place the name is spelled; the train-data layouts (``to_train_data``) and the builder
find it here.
"""

_DERIVED = (TOTAL_LENGTHS,)

PADDING_VALUES: Mapping[str, int] = MappingProxyType(
    {
        "loss_masks": 0,
        "sample_indices": -1,
        "rollout_ids": -1,
        "rollout_mask_sums": 0,
        "is_padding": 1,
    }
)
"""What :func:`arrow_split.pad_to_dp` writes into the rows it adds, by key (miles #2694).

A padding row is a copy of the batch's last row, except these keys when the batch has them:
every value of a per-token key (a zero loss mask), or the one value of a per-sample key (no
sample index, no rollout id, no tokens counted toward a rollout, the padding flag set).
"""


def resolve_specs(keys: Iterable[str], specs: Iterable[ColumnSpec] = ()) -> dict[str, ColumnSpec]:
    """Return the spec of every key, in the order given; declared specs override known ones.

    Parameters
    ----------
    keys
        The keys of the train data (``total_lengths`` is skipped: the library derives it).
    specs
        Column specs declared by the caller, for keys the library does not know or to override
        a known key's spec.

    Raises
    ------
    SchemaError
        A key is neither known nor declared, or a spec is declared twice.
    """
    declared: dict[str, ColumnSpec] = {}
    for spec in _spec_list(specs):
        if not isinstance(spec, ColumnSpec):
            msg = f"`specs` must hold ColumnSpec values, got {type(spec).__name__}"
            raise SchemaTypeError(msg)
        if spec.name in declared:
            msg = f"column `{spec.name}` is declared twice in `specs`; keep one ColumnSpec per key"
            raise SchemaError(msg)
        declared[spec.name] = spec
    resolved: dict[str, ColumnSpec] = {}
    for key in keys:
        if key in _DERIVED:
            continue
        found = _inherit_role(declared.get(key), KNOWN_COLUMNS.get(key))
        if found is None:
            msg = (
                f"unknown key `{key}`: arrow_split does not guess a column's kind; declare it, "
                f'e.g. `specs=[ColumnSpec("{key}", "per_sample_scalar", pa.float64())]` for one '
                f'number per sample, or `ColumnSpec("{key}", "per_sample_object")` for any object'
            )
            raise SchemaError(msg)
        resolved[key] = found
    check_roles((spec.name, spec.role) for spec in resolved.values())
    return resolved


def _spec_list(specs: object) -> list[object]:
    """``specs`` as a list; a single spec, a str or a non-iterable is a :class:`SchemaTypeError`."""
    if not isinstance(specs, (ColumnSpec, str, bytes)):
        try:
            return list(specs)  # type: ignore[call-overload,no-any-return]
        except TypeError:
            pass
    msg = (
        f"`specs` must be a list of ColumnSpec values, got {type(specs).__name__} "
        f"{specs!r:.60}; wrap a single spec in a list"
    )
    raise SchemaTypeError(msg)


def _inherit_role(declared: ColumnSpec | None, known: ColumnSpec | None) -> ColumnSpec | None:
    """A declared override of a known key keeps the known key's role unless it sets its own."""
    if declared is None:
        return known
    if known is not None and known.role is not None and declared.role is None:
        return dataclasses.replace(declared, role=known.role)
    return declared


def role_column(specs: Mapping[str, ColumnSpec], role: Role) -> str | None:
    """The name of the column that plays ``role`` in ``specs``, or ``None`` if none does."""
    for name, spec in specs.items():
        if spec.role == role:
            return name
    return None
