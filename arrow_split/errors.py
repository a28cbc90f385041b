"""The exception tree of arrow_split.

Every error the library raises on purpose derives from :class:`ArrowSplitError`, and also from the
built-in exception a Python user would expect (``ValueError`` for a bad value, ``TypeError`` for a
value of the wrong type, ``RuntimeError`` for a failure of the transport)::

    ArrowSplitError
    ├── SchemaError            (ValueError)   undeclared key, bad column spec, bad batch-global
    │                                         value
    ├── ColumnTypeError        (TypeError)    a value of the wrong type: float in an integer
    │                                         column, None in a token list, a scalar where a
    │                                         list is required
    ├── RaggedLengthError      (ValueError)   lengths that disagree: a per-sample key vs `tokens`,
    │                                         a per-token column vs its sample's length
    ├── ValueRangeError        (ValueError)   a value outside its type or domain: int32 overflow,
    │                                         NaN/inf, a mask that is not 0/1
    ├── PlanError              (ValueError)   a partition request that cannot be met: `dp_size`,
    │   │                                     `dp_rank`, balanced mode on a batch it cannot split
    │   └── PlanTypeError      (TypeError)    `dp_size` or `dp_rank` of the wrong type (bool, float)
    ├── DumpError              (ValueError)   a dump file that cannot be written or read: not an
    │                                         Arrow file, truncated, no or bad arrow_split
    │                                         metadata, an unknown version; or a shard to write
    └── TransportError         (RuntimeError) the object store lost a batch or a shard, or a
        └── NotARolloutBatchError (TypeError) reference holds something that is not a rollout batch

Each message names the key, the sample, the expected and the actual values, and how to fix the call.
All of them are raised before anything is converted, put or split.
"""

from __future__ import annotations

__all__ = [
    "ArrowSplitError",
    "ColumnTypeError",
    "DumpError",
    "NotARolloutBatchError",
    "PlanError",
    "PlanTypeError",
    "RaggedLengthError",
    "SchemaError",
    "TransportError",
    "ValueRangeError",
]


class ArrowSplitError(Exception):
    """Base class of every error arrow_split raises on purpose."""


class SchemaError(ArrowSplitError, ValueError):
    """A key the library does not know, a bad column spec, or a malformed batch-global value."""


class ColumnTypeError(ArrowSplitError, TypeError):
    """A value of the wrong type for its column."""


class RaggedLengthError(ArrowSplitError, ValueError):
    """Lengths that must agree do not: a per-sample key against `tokens`, or a per-token column."""


class ValueRangeError(ArrowSplitError, ValueError):
    """A value outside its type's range or its column's domain."""


class PlanError(ArrowSplitError, ValueError):
    """A partition request that cannot be satisfied."""


class PlanTypeError(PlanError, TypeError):
    """`dp_size` or `dp_rank` of the wrong type."""


class DumpError(ArrowSplitError, ValueError):
    """A rollout dump that cannot be written or read back; the message names the file."""


class TransportError(ArrowSplitError, RuntimeError):
    """The object store could not deliver a batch or a shard."""


class NotARolloutBatchError(TransportError, TypeError):
    """An object reference that holds something other than a rollout batch."""
