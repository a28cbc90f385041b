"""Which rollout field is which kind of column, its Arrow type, and its role (docs/columns.md).

Unknown keys are never guessed: declare them with a :class:`ColumnSpec`. The rest of the library
finds a column by its role (:class:`Roles`, :func:`role_column`), never by its name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal, TypedDict

import numpy as np
import pyarrow as pa

from arrow_split._args import as_choice, as_list_of
from arrow_split._codecs import kind_of
from arrow_split._codecs._kind import storage_types
from arrow_split._codecs.batch_global import Shape
from arrow_split._declared import declared_spec, refuse_library_key
from arrow_split._key_hints import unknown_key_in
from arrow_split.errors import SchemaError, SchemaTypeError

__all__ = [
    "ActorTrainData",
    "ColumnKind",
    "ColumnSpec",
    "ColumnStorage",
    "GlobalShape",
    "KNOWN_COLUMNS",
    "LengthRule",
    "MEDIA_REFS",
    "ObjectCodec",
    "PADDING_VALUES",
    "ROLE_KINDS",
    "ROUTED_EXPERTS",
    "Role",
    "Roles",
    "RolloutTrainData",
    "TEACHER_GATHER_POSITIONS",
    "TEACHER_RESPONSE_LENGTHS",
    "TOTAL_LENGTHS",
    "TrainData",
    "check_roles",
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
"""The six kinds of values in a rollout batch (their Arrow types: docs/columns.md); a
``batch_global`` value is one value for the batch, shipped whole with every shard."""

ObjectCodec = Literal["string", "string_list", "pickle", "json"]
"""How a per-sample object is stored, one of ``string`` (``large_string``), ``string_list``,
``json`` (text that round-trips exactly; else both fall back to ``pickle``) or ``pickle``
(protocol 5, decoded only on the rank that owns the row)."""

GlobalShape = Shape
"""The shape of a batch-global value (``int_map`` maps int keys to non-negative ints,
``float_per_sample`` holds one number per sample of the whole batch)."""

ColumnStorage = Literal["exact", "narrow"]
"""How the integers of a ``per_sample_tensor`` column are stored, ``exact`` (as ``value_type``)
or ``narrow`` (small ids: the narrowest of uint8, uint16, int32 and ``value_type`` holding every
value of the batch; ``value_type`` stays the logical type)."""

LengthRule = Literal["tokens", "response", "tokens_minus_one"]
"""How long a sample's value must be, ``len(tokens[i])``, ``response_lengths[i]`` or
``len(tokens[i]) - 1`` rows (more for a sample with extra rows, e.g. expanded media tokens)."""

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
"""The part a column plays, one column per role (each role's meaning: docs/columns.md, "Roles")."""

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
"""The kinds of column each role may be played by."""

_SCHEMA_ERRORS = {"type_error": SchemaTypeError, "value_error": SchemaError}
_INTEGER_ROLES = ("response_length", "witness", "adapter_slot", "rollout_id")


def check_roles(roles: Iterable[tuple[str, str | None]]) -> None:
    """Raise :class:`SchemaError` unless each role of ``(column, role)`` pairs has one column."""
    holders: dict[str | None, str] = {}
    for name, role in roles:
        if role is not None and role in holders:
            msg = (
                f"columns `{holders[role]}` and `{name}` both have role "
                f"{role!r}; give the role to one column only"
            )
            raise SchemaError(msg, key=name)
        holders[role] = name


@dataclasses.dataclass(frozen=True, slots=True)
class ColumnSpec:
    """How one key of the train data is validated and stored (tutorial: docs/columns.md).

    Parameters
    ----------
    name
        The key in the train-data dict.
    kind
        Which kind of value the key holds (:data:`~arrow_split.ColumnKind`).
    value_type
        The Arrow type of one number; ``None`` for objects and batch-global values.
    length
        For list and tensor kinds: the :data:`~arrow_split.schema.LengthRule` a sample's value
        follows, or ``None``.
    flag
        Values are 0/1 (``bool`` accepted).
    finite
        Reject NaN and infinity (in a response column only where the loss mask is 1).
    nonempty
        For ``per_token_list``: no token's list is empty.
    codec, global_shape, storage
        For objects (:data:`~arrow_split.schema.ObjectCodec`), batch-globals
        (:data:`~arrow_split.schema.GlobalShape`), int tensors
        (:data:`~arrow_split.schema.ColumnStorage`).
    role
        The part the column plays (:data:`~arrow_split.Role`), or ``None``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_split import ColumnSpec
    >>> entropies = ColumnSpec("entropies", "per_token", pa.float32(), length="response")
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
            raise SchemaTypeError(msg, key="name")
        as_choice("kind", self.kind, ColumnKind, **_SCHEMA_ERRORS)
        if self.length is not None:
            as_choice("length", self.length, LengthRule, **_SCHEMA_ERRORS)
        as_choice("codec", self.codec, ObjectCodec, **_SCHEMA_ERRORS)
        for switch in ("flag", "finite", "nonempty"):
            if not isinstance(value := getattr(self, switch), bool):
                msg = f"column `{self.name}`: `{switch}` must be a bool, got {value!r:.40}"
                raise SchemaTypeError(msg, key=self.name)
        kind = kind_of(self)
        kind.check_spec(self)  # the kind's own rules: its value types, shapes, switches
        if self.role is not None:
            self._check_role()
        if self.storage != "exact":
            as_choice("storage", self.storage, ColumnStorage, **_SCHEMA_ERRORS)
            kind.check_storage(self)

    def _check_role(self) -> None:
        as_choice("role", self.role, Role, **_SCHEMA_ERRORS)
        kinds = ROLE_KINDS[str(self.role)]
        if self.kind not in kinds:
            msg = (
                f"column `{self.name}`: role {self.role!r} needs a column of kind "
                f"{' or '.join(map(repr, kinds))}, got {self.kind!r}"
            )
            raise SchemaError(msg, key=self.name)
        if self.role == "padding" and not (self.value_type == pa.bool_() and self.flag):
            msg = f"column `{self.name}`: role 'padding' needs a bool flag column"
            raise SchemaError(msg, key=self.name)
        if self.role in _INTEGER_ROLES and not pa.types.is_integer(self.value_type):
            msg = f"column `{self.name}`: role {self.role!r} needs an integer `value_type`"
            raise SchemaError(msg, key=self.name)

    @property
    def storage_types(self) -> tuple[pa.DataType, ...]:
        """The Arrow types the values may be stored as, narrowest first (none for objects)."""
        if self.value_type is None:
            return ()
        return storage_types(self.value_type, self.storage)

    @property
    def is_per_sample(self) -> bool:
        """Whether the key holds one value per sample (every kind but ``batch_global``)."""
        return kind_of(self).per_sample


@dataclasses.dataclass(frozen=True, slots=True)
class Roles:
    """The column that plays each :data:`~arrow_split.Role` in resolved specs, or ``None``."""

    length_source: str | None = None
    response_length: str | None = None
    loss_mask: str | None = None
    sampling_mask: str | None = None
    extra_rows: str | None = None
    witness: str | None = None
    adapter_slot: str | None = None
    rollout_id: str | None = None
    step_batch_size: str | None = None
    adapter_count: str | None = None
    padding: str | None = None

    @classmethod
    def of(cls, specs: Mapping[str, ColumnSpec]) -> Roles:
        """The roles of ``specs``."""
        return cls(**{spec.role: name for name, spec in specs.items() if spec.role is not None})

    def column(self, role: Role) -> str | None:
        """The name of the column that plays ``role``, or ``None``."""
        return getattr(self, role)  # type: ignore[no-any-return]


ROUTED_EXPERTS = "rollout_routed_experts"
"""The MoE routing-replay column: per token, per layer, the top-k expert ids (stored narrow)."""

TEACHER_GATHER_POSITIONS = "teacher_gather_positions"
"""Per response token, its position in the teacher's response: strictly increasing."""

TEACHER_RESPONSE_LENGTHS = "teacher_response_lengths"
"""Per sample, the length of the teacher's response (bounds the gather positions)."""

MEDIA_REFS = "media_refs"
"""Per sample, media the train side loads itself: no rollout-side schedule for such a batch."""


def _known() -> dict[str, ColumnSpec]:
    int32, float32 = pa.int32(), pa.float32()
    specs = [
        ColumnSpec("tokens", "per_token", int32, role="length_source"),
        ColumnSpec("loss_masks", "per_token", pa.uint8(), "response", flag=True, role="loss_mask"),
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
        *(  # MoE ids: tokens x layers x top-k, stored narrow
            ColumnSpec(name, "per_sample_tensor", int32, "tokens_minus_one", storage="narrow")
            for name in ("rollout_routed_experts", "rollout_indexer_topk")
        ),
        # miles' newer keys: on-policy distillation's teacher view (#2410), advantage spans,
        # media references (#2569), the weight version a sample started at (#2296), loss scaling
        ColumnSpec("teacher_tokens", "per_token", int32),
        ColumnSpec("teacher_gather_positions", "per_token", int32, length="response"),
        ColumnSpec("teacher_response_lengths", "per_sample_scalar", pa.int64()),
        ColumnSpec("non_positive_advantage_spans", "per_sample_tensor", pa.int64()),
        ColumnSpec("media_refs", "per_sample_object", codec="json"),
        ColumnSpec("start_weight_version", "per_sample_object", codec="json"),
        ColumnSpec("loss_denominator_mask", "per_sample_scalar", pa.bool_(), flag=True),
        ColumnSpec("loss_global_batch_sizes", "per_sample_scalar", pa.int64()),
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
        ColumnSpec("metadata", "per_sample_object", codec="json"),
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
    specs += [  # PPO / GRPO: one float per response token, as rollout_log_probs
        ColumnSpec(name, "per_token", float32, length="response")
        for name in ("advantages", "returns", "values", "ref_log_probs")
    ]
    return {spec.name: spec for spec in specs}


_KNOWN = _known()  # grows only through arrow_split.register_column (this process)

KNOWN_COLUMNS: Mapping[str, ColumnSpec] = MappingProxyType(_KNOWN)
"""The keys arrow_split knows, by name (read-only; :func:`arrow_split.register_column` adds one
for this process). ``total_lengths`` is not among them: it is derived."""

TOTAL_LENGTHS = "total_lengths"
"""The derived key: each sample's token count, from the length source (never stored)."""

PADDING_VALUES: Mapping[str, int] = MappingProxyType(
    dict(loss_masks=0, sample_indices=-1, rollout_ids=-1, rollout_mask_sums=0, is_padding=1)
)
"""What :func:`arrow_split.pad_to_dp` writes into the rows it adds (copies of the last row), by
key: every value of a per-token key, the one value of a per-sample key (miles #2694)."""


def resolve_specs(
    keys: Iterable[str],
    specs: Iterable[ColumnSpec] = (),
    *,
    data: Mapping[str, Any] | None = None,
) -> dict[str, ColumnSpec]:
    """The spec of every key but ``total_lengths``, in order; declared specs override known ones.

    Raises :class:`SchemaError` for a key neither known nor declared (``data``, the values, words
    its hint), a spec declared twice, or one the library refuses (``arrow_split._declared``: a
    key it adds itself, an override that cannot keep its key's role).
    """
    declared: dict[str, ColumnSpec] = {}
    listed = specs if isinstance(specs, tuple) else as_list_of("specs", specs, ColumnSpec)
    for spec in listed:  # a tuple (the library's own, or a user's) is a list already
        if not isinstance(spec, ColumnSpec):
            msg = f"`specs` must hold ColumnSpec values, got {type(spec).__name__}"
            raise SchemaTypeError(msg, key="specs")
        if spec.name in declared:
            msg = f"column `{spec.name}` is declared twice in `specs`; keep one ColumnSpec per key"
            raise SchemaError(msg, key=spec.name)
        declared[spec.name] = declared_spec(spec, KNOWN_COLUMNS.get(spec.name))  # keeps roles
    resolved: dict[str, ColumnSpec] = {}
    for key in keys:
        if key == TOTAL_LENGTHS:
            continue
        found = declared.get(key, KNOWN_COLUMNS.get(key))
        if found is None:
            refuse_library_key(key)  # a shard's layout key: no spec can declare it
            raise SchemaError(unknown_key_in(key, data, KNOWN_COLUMNS), key=key)
        resolved[key] = found
    if declared:  # the known specs' roles are distinct by construction
        check_roles((spec.name, spec.role) for spec in resolved.values())
    return resolved


def role_column(specs: Mapping[str, ColumnSpec], role: Role) -> str | None:
    """The name of the column that plays ``role`` in ``specs``, or ``None`` if none does."""
    return next((name for name, spec in specs.items() if spec.role == role), None)


# The train-data dicts' static types: TypedDicts of the keys the library defines, so that a
# misspelt key is a type error. Not total (a batch holds the keys it was given). They are closed:
# a key you declared or registered is read with ``data.get("key")`` (typed ``object``) or through
# ``cast("dict[str, Any]", data)``; PEP 728's ``extra_items`` would allow more once mypy has it.


class TrainData(TypedDict, total=False):
    """A batch's train data: what :meth:`RolloutBatch.to_train_data` returns."""

    tokens: list[list[int]]
    loss_masks: list[list[int]]
    rollout_log_probs: list[list[float]]
    teacher_log_probs: list[list[float]]
    opd_reverse_kl: list[list[float]]
    rollout_sampling_masks: list[list[list[int]]]
    rollout_routed_experts: list[np.ndarray]
    rollout_indexer_topk: list[np.ndarray]
    response_lengths: list[int]
    rewards: list[float]
    truncated: list[bool]
    round_number: list[int]
    sample_indices: list[int]
    rollout_ids: list[int]
    rollout_mask_sums: list[int]
    seq_witness_ids: list[int]
    adapter_slots: list[int]
    is_padding: list[bool]
    prompt: list[Any]
    metadata: list[Any]
    weight_versions: list[list[str]]
    multimodal_train_inputs: list[Any]
    raw_reward: list[float]
    dynamic_global_batch_size: int
    step_slots: list[int]
    step_adapter_names: list[str]
    step_adapter_batch_sizes: dict[str, int]
    prompt_group_sizes: list[int]
    n_adapters: int
    # PPO / GRPO, one float per response token
    advantages: list[list[float]]
    returns: list[list[float]]
    values: list[list[float]]
    ref_log_probs: list[list[float]]
    # miles' newer keys
    teacher_tokens: list[list[int]]
    teacher_gather_positions: list[list[int]]
    teacher_response_lengths: list[int]
    non_positive_advantage_spans: list[np.ndarray]
    media_refs: list[Any]
    start_weight_version: list[Any]
    loss_denominator_mask: list[bool]
    loss_global_batch_sizes: list[int]


class RolloutTrainData(TrainData, total=False):
    """A shard in the ``rollout`` layout: ``partition``, the batch's ``total_lengths``."""

    partition: list[int]
    total_lengths: list[int]


class ActorTrainData(TrainData, total=False):
    """A shard in the ``actor`` layout: with ``total_lengths`` and ``global_total_lengths``."""

    total_lengths: list[int]
    global_total_lengths: list[int]
