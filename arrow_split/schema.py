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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Literal, get_args

import pyarrow as pa

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

ColumnKind = Literal[
    "per_token",
    "per_token_list",
    "per_sample_tensor",
    "per_sample_scalar",
    "per_sample_object",
    "batch_global",
]
"""The six kinds of values in a rollout batch."""

LengthRule = Literal["tokens", "response", "tokens_minus_one"]
"""How long a sample's value must be.

``tokens``: ``len(tokens[i])``. ``response``: ``response_lengths[i]``. ``tokens_minus_one``:
``len(tokens[i]) - 1`` rows (more are allowed for a sample whose ``multimodal_train_inputs`` is
set, since expanded media tokens add rows).
"""

ObjectCodec = Literal["string", "string_list", "pickle"]
"""How a per-sample object is stored.

``string``: ``large_string``; a sample that is not a ``str`` makes the whole column fall back to
``pickle``. ``string_list``: ``large_list<large_string>``. ``pickle``: ``large_binary`` holding one
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
that holds every value of the batch (:attr:`ColumnSpec.storage_types`), chosen once per batch
when it is built, so that every shard of a step has the same Arrow type. ``value_type`` stays the
column's logical type: values are checked against it, ``to_train_data`` gives it back and
:func:`arrow_split.torch.to_tensors` widens to the dtype the trainer asks for (``id_dtype``).
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
"""The part a column plays beyond its values (see the module docstring); one column per role.

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

_ROLE_KINDS: dict[str, tuple[str, ...]] = {
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

_NARROW_TYPES = (pa.uint8(), pa.uint16(), pa.int32())
_NARROWABLE = (pa.int32(), pa.int64())
_INTEGER_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16())


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
        _check_choice("kind", self.kind, ColumnKind)
        if self.length is not None:
            _check_choice("length", self.length, LengthRule)
        _check_choice("codec", self.codec, ObjectCodec)
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
            _check_choice("global_shape", self.global_shape, GlobalShape)
        if self.role is not None:
            self._check_role()
        if self.storage != "exact":
            self._check_storage()

    def _check_storage(self) -> None:
        _check_choice("storage", self.storage, ColumnStorage)
        if self.kind != "per_sample_tensor" or self.value_type not in _NARROWABLE or self.flag:
            msg = (
                f"column `{self.name}`: `storage='narrow'` needs a per_sample_tensor column of "
                f"value_type int32 or int64 without `flag`, got a {self.kind} column of "
                f"{self.value_type}; declare the column that way or keep `storage='exact'`"
            )
            raise SchemaError(msg)

    def _check_role(self) -> None:
        _check_choice("role", self.role, Role)
        kinds = _ROLE_KINDS[str(self.role)]
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
        value_type = self.value_type
        if not isinstance(value_type, pa.DataType):
            msg = (
                f"column `{self.name}`: a {self.kind} column needs `value_type`, an Arrow type "
                f"such as `pa.int32()` or `pa.float32()`, got {value_type!r:.40}"
            )
            raise SchemaTypeError(msg)
        numeric = pa.types.is_floating(value_type) or value_type in _INTEGER_TYPES
        if not (numeric or pa.types.is_boolean(value_type)):
            msg = (
                f"column `{self.name}`: unsupported `value_type` {value_type}; expected a signed "
                "integer, uint8, uint16, a float or bool type (store other values as a "
                "per_sample_object column)"
            )
            raise SchemaError(msg)
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
        if self.storage == "exact":
            return (self.value_type,)
        width = self.value_type.bit_width
        narrower = tuple(t for t in _NARROW_TYPES if t.bit_width < width)
        return (*narrower, self.value_type)

    @property
    def is_per_sample(self) -> bool:
        """Whether the key holds one value per sample (every kind but ``batch_global``)."""
        return self.kind != "batch_global"


def _check_choice(name: str, value: object, allowed: object) -> None:
    choices = get_args(allowed)
    expected = f"expected one of: {', '.join(map(repr, choices))}"
    if not isinstance(value, str):
        msg = f"invalid `{name}`: {value!r:.40} of type {type(value).__name__}; {expected}"
        raise SchemaTypeError(msg)
    if value not in choices:
        msg = f"invalid `{name}`: {value!r}; {expected}"
        raise SchemaError(msg)


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
    _check_roles(resolved)
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


def _check_roles(specs: Mapping[str, ColumnSpec]) -> None:
    """Raise unless every role is held by at most one column and the length source exists."""
    holders: dict[str, str] = {}
    for spec in specs.values():
        if spec.role is None:
            continue
        if spec.role in holders:
            msg = (
                f"columns `{holders[spec.role]}` and `{spec.name}` both have role "
                f"{spec.role!r}; give the role to one column only"
            )
            raise SchemaError(msg)
        holders[spec.role] = spec.name


def role_column(specs: Mapping[str, ColumnSpec], role: Role) -> str | None:
    """The name of the column that plays ``role`` in ``specs``, or ``None`` if none does."""
    for name, spec in specs.items():
        if spec.role == role:
            return name
    return None
