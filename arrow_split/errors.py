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
    │   ├── OptionTypeError    (TypeError)    a keyword argument of the wrong type
    │   │   └── PathTypeError                 a path that is no str (also a SchemaTypeError)
    │   └── PathError                         an empty path, a NUL in it (also a DumpError)
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
    ├── UnknownKeyWarning                     an unknown key given an inferred spec (once per key)
    └── ObjectFallbackWarning                 a json object column stored as pickles for a batch

An error's facts are fields (``key``, ``sample``, ``position``, ``item``, ``expected``, ``got``,
``fix``, ``path``, ``offset``), rendered into its message by one ``__str__``; which class a
mistake gets is decided by one table, :data:`MISTAKES` (raise one with :func:`mistake`).
Messages name the key, the sample, the expected and actual values, and the fix. Input errors are
raised before anything is put or split; a :class:`TransportError` on a rank, when a put is lost.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

__all__ = [
    "ArrowSplitError",
    "ArrowSplitWarning",
    "ColumnNotFoundError",
    "ColumnTypeError",
    "DumpError",
    "DuplicateSampleError",
    "InstallError",
    "JournalError",
    "MISTAKES",
    "NotARolloutBatchError",
    "ObjectFallbackWarning",
    "OptionError",
    "OptionTypeError",
    "PathError",
    "PathTypeError",
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
    "mistake",
]


_E = TypeVar("_E", bound="ArrowSplitError")


class ArrowSplitError(Exception):
    """Base class of every error arrow_split raises on purpose; the facts are fields.

    Parameters
    ----------
    message
        What is wrong, in words, without the location (the sample, the file) and without the
        fix: those are fields, rendered by :meth:`__str__`. ``raise OptionError(msg)`` with a
        message alone stays valid (an error with no fields).
    key
        The column, key or argument the mistake is about (``"loss_masks"``, ``"dp_size"``).
    sample, position, item
        Where in the batch: the sample's index (in the batch, for a builder: counted from the
        step's first sample), the token's position in the sample, the value's index in the
        token's list (``per_token_list``).
    expected, got
        The value (or rule) expected and the value given, as text for the message.
    fix
        How to fix the call, rendered after the message.
    path, offset
        The file the error is about and the byte offset in it.
    mistake
        The mistake's name in :data:`MISTAKES` (the table that decides its class), if any.

    Examples
    --------
    >>> from arrow_split.errors import RaggedLengthError
    >>> error = RaggedLengthError("`loss_masks` has 2 values", key="loss_masks", sample=1)
    >>> str(error), error.key, error.sample
    ('sample 1: `loss_masks` has 2 values', 'loss_masks', 1)
    >>> str(error.shifted(4))
    'sample 5: `loss_masks` has 2 values'
    """

    def __init__(
        self,
        message: str = "",
        /,
        *,
        key: str | None = None,
        sample: int | None = None,
        position: int | None = None,
        item: int | None = None,
        expected: str | None = None,
        got: str | None = None,
        fix: str | None = None,
        path: str | None = None,
        offset: int | None = None,
        mistake: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.key, self.mistake = message, key, mistake
        self.sample, self.position, self.item = sample, position, item
        self.expected, self.got, self.fix = expected, got, fix
        self.path, self.offset = path, offset

    FIELDS: ClassVar[tuple[str, ...]] = tuple(__init__.__kwdefaults__ or ())
    """The names of the facts, in the order of ``__init__``'s keywords."""

    @property
    def facts(self) -> dict[str, Any]:
        """The fields that are set, by name (what :meth:`shifted` and tools read)."""
        return {name: value for name in self.FIELDS if (value := getattr(self, name)) is not None}

    def location(self) -> str:
        """Where the mistake is, as the message starts: ``sample 3, position 1`` or ``''``."""
        forms = ("`{}`", "byte {}", "sample {}", "position {}", "item {}")
        values = (self.path, self.offset, self.sample, self.position, self.item)
        return ", ".join(
            form.format(value)
            for form, value in zip(forms, values, strict=True)
            if value is not None
        )

    def what(self) -> str:
        """What is wrong, without location or fix: the message, else ``key must be expected``."""
        text = self.message
        if not text and self.expected is not None:
            subject = f"`{self.key}`" if self.key is not None else "the value"
            text = f"{subject} must be {self.expected}"
            if self.got is not None:
                text += f", got {self.got}"
        return text

    def __str__(self) -> str:
        """The one renderer: ``location: what; fix`` (see :meth:`what`)."""
        text = self.what()
        if self.fix:
            text = f"{text}; {self.fix}" if text else self.fix
        where = self.location()
        return f"{where}: {text}" if where else text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def replaced(self: _E, **facts: Any) -> _E:
        """A copy of the error with some facts replaced (its class and other fields kept)."""
        error = copy.copy(self)
        for name, value in facts.items():
            if name not in self.FIELDS:
                msg = f"{name!r} is not a field of {type(self).__name__}"
                raise AttributeError(msg)
            setattr(error, name, value)
        return error

    def shifted(self: _E, base: int) -> _E:
        """The same error with its sample counted from ``base`` (a group's index to a batch's)."""
        if self.sample is None or base == 0:
            return self
        return self.replaced(sample=self.sample + base)


class SchemaError(ArrowSplitError, ValueError):
    """A key the library does not know, a bad column spec, or a malformed batch-global value."""


class SchemaTypeError(SchemaError, TypeError):
    """An argument of the wrong type where the schema expects a mapping, a spec or a batch."""


class ColumnNotFoundError(SchemaError, KeyError):
    """A column that the batch does not have."""

    __str__ = ArrowSplitError.__str__  # KeyError's would quote the message


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

    def __init__(self, message: str = "", /, errno: int | None = None, **facts: Any) -> None:
        super().__init__(message, **facts)
        self.errno = errno


class DuplicateSampleError(ArrowSplitError, ValueError):
    """A sample whose identity the builder (or its journal) holds already this step."""


class OptionError(ArrowSplitError, ValueError):
    """A keyword argument outside its allowed values; the message lists them."""


class OptionTypeError(OptionError, TypeError):
    """A keyword argument of the wrong type (a float where an int is needed, a str for a dtype)."""


class PathTypeError(OptionTypeError, SchemaTypeError):
    """A path argument that is not a str or an ``os.PathLike`` of one, at every door.

    Also a :class:`SchemaTypeError`, what ``write``/``read`` raised for it before.
    """


class PathError(OptionError, DumpError):
    """A path argument that is empty or holds a NUL character, at every door.

    Also a :class:`DumpError`, what ``write``/``read`` raised for it before.
    """


class PlanError(ArrowSplitError, ValueError):
    """A partition request that cannot be satisfied."""


class PlanTypeError(PlanError, TypeError):
    """`dp_size` or `dp_rank` of the wrong type."""


class PlanMismatchError(PlanError):
    """A rank asks for a plan other than the one its data was put with."""


class InstallError(ArrowSplitError, RuntimeError):
    """The miles drop-in could not be installed; what it had patched is rolled back."""


class TransportError(ArrowSplitError, RuntimeError):
    """The object store could not deliver a batch or a shard.

    ``step`` and ``dp_rank`` name the step and the rank of the put or take, where known (the
    message names them too); ``got`` is the store's status code, where it gave one.
    """

    def __init__(
        self,
        message: str = "",
        /,
        step: int | None = None,
        dp_rank: int | None = None,
        **facts: Any,
    ) -> None:
        super().__init__(message, **facts)
        self.step, self.dp_rank = step, dp_rank


class NotARolloutBatchError(TransportError, TypeError):
    """An object reference that holds something other than a rollout batch."""


class ArrowSplitWarning(UserWarning):
    """Base class of every warning arrow_split issues."""


class UnknownKeyWarning(ArrowSplitWarning):
    """An unknown key carried with an inferred spec; the message gives the ColumnSpec to declare."""


class ObjectFallbackWarning(ArrowSplitWarning):
    """A ``json`` object column stored as pickles for a batch: a value JSON cannot keep exactly.

    ``key`` and ``sample`` name the column and the first such value (a set, bytes, an instance,
    a dict of non-str keys); the batch's column is then binary, not text, for readers such as
    polars. Numpy scalars, tuples, NaN and infinities stay JSON.
    """

    def __init__(self, key: str, sample: int, value_type: str) -> None:
        self.key, self.sample, self.value_type = key, sample, value_type
        super().__init__(  # the value's type only: a repr may be huge, or fail
            f"sample {sample}: `{key}` holds a {value_type} value that JSON cannot keep "
            "exactly; the column is stored as pickles in this batch (binary for readers such as "
            "polars); store plain data, or declare the column with "
            f'`ColumnSpec("{key}", "per_sample_object", codec="pickle")`'
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.key, self.sample, self.value_type))


MISTAKES: Mapping[str, tuple[type[ArrowSplitError], str]] = MappingProxyType(
    {
        # arguments, at every door (core, Ray, torch, compat.miles)
        "flag_type": (OptionTypeError, "a flag that is not a bool (`balance_data`, `resplit`)"),
        "option_type": (OptionTypeError, "any other argument of the wrong type"),
        "option_value": (OptionError, "an argument outside its allowed values or range"),
        "path_type": (PathTypeError, "a path that is not a str or an os.PathLike of one"),
        "path_value": (PathError, "an empty path, or one with a NUL character"),
        "plan_type": (PlanTypeError, "`dp_size`, `dp_rank` or another planning number not an int"),
        "plan_value": (PlanError, "`dp_size`, `dp_rank` or another planning number out of range"),
        "plan": (PlanError, "a partition request that cannot be met"),
        "plan_mismatch": (PlanMismatchError, "a rank asks for another plan than its data's"),
        # data
        "data_type": (SchemaTypeError, "data, a spec or a batch of the wrong type"),
        "schema": (SchemaError, "an unknown key, a bad spec, a bad batch-global value"),
        "missing_column": (ColumnNotFoundError, "a column the batch does not have"),
        "column_type": (ColumnTypeError, "a value of the wrong type for its column"),
        "ragged_length": (RaggedLengthError, "lengths that disagree"),
        "value_range": (ValueRangeError, "a value outside its range: overflow, NaN, a mask of 2"),
        "duplicate_sample": (DuplicateSampleError, "a sample the builder holds already"),
        # files and transport
        "dump": (DumpError, "a dump that cannot be read or written"),
        "untrusted_object": (UntrustedObjectError, "a file's object that is not plain data"),
        "journal": (JournalError, "a journal that cannot be written or read"),
        "install": (InstallError, "the miles drop-in could not patch"),
        "transport": (TransportError, "the object store lost a batch or a shard"),
        "not_a_batch": (NotARolloutBatchError, "a reference that holds no rollout batch"),
    }
)
"""The one table of mistake kinds: which class a mistake gets, at every door, and what it is.

docs/errors.md shows it (tests/test_error_messages.py checks the two agree). Raise one with
:func:`mistake`; ``error.mistake`` is its name.
"""


def mistake(name: str, message: str = "", /, **facts: Any) -> ArrowSplitError:
    """The error of the mistake ``name`` of :data:`MISTAKES`, holding ``facts``.

    Examples
    --------
    >>> from arrow_split.errors import mistake
    >>> error = mistake("flag_type", key="resplit", expected="a bool", got="int 1")
    >>> type(error).__name__, str(error)
    ('OptionTypeError', '`resplit` must be a bool, got int 1')
    """
    cls, _ = MISTAKES[name]
    return cls(message, mistake=name, **facts)
