"""The exception tree of arrow_split.

Every error raised on purpose derives from :class:`ArrowSplitError` and from the built-in a
user would expect (``TypeError``, ``ValueError``, ``KeyError``, ``RuntimeError``); docs/errors.md::

    ArrowSplitError
    ├── SchemaError            (ValueError)   undeclared key, bad spec or batch-global value
    │   ├── SchemaTypeError    (TypeError)    an argument of the wrong type (data, spec, field)
    │   └── ColumnNotFoundError (KeyError)    a column the batch does not have
    ├── ColumnTypeError        (TypeError)    a value of the wrong type for its column
    ├── RaggedLengthError      (ValueError)   lengths that disagree (per-sample, per-token)
    ├── ValueRangeError        (ValueError)   a value outside its range: overflow, NaN, mask 2
    ├── OptionError            (ValueError)   a keyword argument outside its allowed values
    │   └── OptionTypeError    (TypeError)    a keyword argument of the wrong type
    ├── DumpError              (ValueError)   a rollout dump that cannot be read or written
    │   └── UntrustedObjectError              a file's object that is not plain data
    ├── JournalError           (RuntimeError) a builder's journal that cannot be written or read
    ├── DuplicateSampleError   (ValueError)   a sample whose identity the builder holds already
    ├── PlanError              (ValueError)   a partition request that cannot be met
    │   ├── PlanTypeError      (TypeError)    `dp_size` or `dp_rank` of the wrong type
    │   └── PlanMismatchError                 a rank asks for another plan than its data's
    ├── InstallError           (RuntimeError) the miles drop-in could not patch (rolled back)
    └── TransportError         (RuntimeError) the object store lost a batch or a shard
        └── NotARolloutBatchError (TypeError) a reference that holds no rollout batch

Warnings, a tree of their own::

    ArrowSplitWarning          (UserWarning)
    └── UnknownKeyWarning                     an unknown key given an inferred spec (once per key)

Messages name the key, the sample, the expected and actual values, and the fix. Input errors are
raised before anything is put or split; a :class:`TransportError` on a rank, when a put is lost.
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
