"""The exception tree of arrow_split.

Every error the library raises on purpose derives from :class:`ArrowSplitError`, and also from the
built-in exception a Python user would expect: ``TypeError`` for a value of the wrong type,
``ValueError`` for a wrong value, ``KeyError`` for a missing column, ``RuntimeError`` for a failure
of the transport::

    ArrowSplitError
    ├── SchemaError            (ValueError)   undeclared key, bad column spec, bad batch-global
    │   │                                     value, a missing required key
    │   ├── SchemaTypeError    (TypeError)    an argument of the wrong type: `data` that is not a
    │   │                                     mapping, a spec that is not a ColumnSpec, a
    │   │                                     ColumnSpec field of the wrong type
    │   └── ColumnNotFoundError (KeyError)    a column the batch does not have
    ├── ColumnTypeError        (TypeError)    a value of the wrong type: float in an integer
    │                                         column, None in a token list, a scalar where a
    │                                         list is required
    ├── RaggedLengthError      (ValueError)   lengths that disagree: a per-sample key vs `tokens`,
    │                                         a per-token column vs its sample's length
    ├── ValueRangeError        (ValueError)   a value outside its type or domain: int32 overflow,
    │                                         NaN/inf, a mask that is not 0/1
    ├── OptionError            (ValueError)   a keyword argument outside its allowed values
    │   │                                     (`layout`, `locality`, `device`, a dtype, ...)
    │   └── OptionTypeError    (TypeError)    a keyword argument of the wrong type
    │                                         (`pad_to_multiple_of=2.0`, `device=0.5`, a dtype
    │                                         given as a str)
    ├── DumpError              (ValueError)   a rollout dump that cannot be read or written:
    │   │                                     truncated, not an Arrow file, a wrong version,
    │   │                                     missing or corrupt metadata, corrupt objects
    │   └── UntrustedObjectError              an object read from a file that is not plain data
    │                                         (decode it with `trust_objects=True`)
    ├── JournalError           (RuntimeError) a builder's journal that cannot be written (a full
    │                                         disk, a file size limit) or read (not a journal)
    ├── DuplicateSampleError   (ValueError)   a sample whose identity the builder holds already
    ├── PlanError              (ValueError)   a partition request that cannot be met: `dp_size`,
    │   │                                     `dp_rank`, balanced mode on a batch it cannot split
    │   ├── PlanTypeError      (TypeError)    `dp_size` or `dp_rank` of the wrong type (bool, float)
    │   └── PlanMismatchError                 a rank asks for another plan than the one the data
    │                                         was put with (method, `dp_size`, rank)
    ├── InstallError           (RuntimeError) the miles drop-in could not patch a binding
    │                                         (rolled back: nothing stays patched)
    └── TransportError         (RuntimeError) the object store lost a batch or a shard, or a
        └── NotARolloutBatchError (TypeError) reference holds something that is not a rollout batch

Warnings, a tree of their own::

    ArrowSplitWarning          (UserWarning)
    └── UnknownKeyWarning                     the miles drop-in carries a key it does not know,
                                              with a spec inferred from its values (once per key)

Each message names the key, the sample, the expected and the actual values, and how to fix the call.
Input errors (schema, types, lengths, ranges, options, plans) are raised before anything is put or
split; a :class:`TransportError` is raised on a rank, when what was put cannot be had.
"""

from __future__ import annotations

__all__ = [
    "ArrowSplitError",
    "ArrowSplitWarning",
    "ColumnNotFoundError",
    "ColumnTypeError",
    "DumpError",
    "DuplicateSampleError",
    "InstallError",
    "JournalError",
    "NotARolloutBatchError",
    "OptionError",
    "OptionTypeError",
    "PlanError",
    "PlanMismatchError",
    "PlanTypeError",
    "RaggedLengthError",
    "SchemaError",
    "SchemaTypeError",
    "TransportError",
    "UnknownKeyWarning",
    "UntrustedObjectError",
    "ValueRangeError",
]


class ArrowSplitError(Exception):
    """Base class of every error arrow_split raises on purpose."""


class SchemaError(ArrowSplitError, ValueError):
    """A key the library does not know, a bad column spec, or a malformed batch-global value."""


class SchemaTypeError(SchemaError, TypeError):
    """An argument of the wrong type where the schema expects a mapping, a spec or a batch."""


class ColumnNotFoundError(SchemaError, KeyError):
    """A column that the batch does not have."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ColumnTypeError(ArrowSplitError, TypeError):
    """A value of the wrong type for its column."""


class RaggedLengthError(ArrowSplitError, ValueError):
    """Lengths that must agree do not: a per-sample key against `tokens`, or a per-token column."""


class ValueRangeError(ArrowSplitError, ValueError):
    """A value outside its type's range or its column's domain."""


class DumpError(ArrowSplitError, ValueError):
    """A rollout dump on disk that cannot be read (or a batch that cannot be written as one)."""


class UntrustedObjectError(DumpError):
    """An object read from a file that is not plain data, decoded without `trust_objects=True`."""


class JournalError(ArrowSplitError, RuntimeError):
    """A builder's journal that cannot be written or read; ``errno`` is the OS error's, if any."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class DuplicateSampleError(ArrowSplitError, ValueError):
    """A sample whose identity the builder (or its journal) holds already this step."""


class OptionError(ArrowSplitError, ValueError):
    """A keyword argument outside its allowed values; the message lists them."""


class OptionTypeError(OptionError, TypeError):
    """A keyword argument of the wrong type (a float where an int is needed, a str for a dtype)."""


class PlanError(ArrowSplitError, ValueError):
    """A partition request that cannot be satisfied."""


class PlanTypeError(PlanError, TypeError):
    """`dp_size` or `dp_rank` of the wrong type."""


class PlanMismatchError(PlanError):
    """A rank asks for a plan other than the one its data was put with."""


class InstallError(ArrowSplitError, RuntimeError):
    """The miles drop-in could not be installed; what it had patched is rolled back."""


class TransportError(ArrowSplitError, RuntimeError):
    """The object store could not deliver a batch or a shard."""


class NotARolloutBatchError(TransportError, TypeError):
    """An object reference that holds something other than a rollout batch."""


class ArrowSplitWarning(UserWarning):
    """Base class of every warning arrow_split issues."""


class UnknownKeyWarning(ArrowSplitWarning):
    """An unknown key carried with an inferred spec; the message gives the ColumnSpec to declare."""
