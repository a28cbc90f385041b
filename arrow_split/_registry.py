"""Known columns added for this process: :func:`register_column`.

:data:`arrow_split.KNOWN_COLUMNS` is a read-only view; this is the one door that adds to it. A
registration lives in the process that made it: a Ray worker is another process and does not
see it (the specs given to ``compat.miles.install(specs=...)`` reach the workers).
"""

from __future__ import annotations

from arrow_split._declared import declared_spec
from arrow_split.errors import SchemaError, SchemaTypeError
from arrow_split.schema import _KNOWN, ColumnSpec, check_roles

__all__ = ["register_column"]


def register_column(spec: ColumnSpec, *, replace: bool = False) -> None:
    """Make ``spec.name`` a known column in this process, as if it were in ``KNOWN_COLUMNS``.

    Every batch, builder, dump and journal read made in this process afterwards knows the key
    without ``specs=``. Other processes (Ray workers) do not: pass the spec where they make a
    batch, or to ``arrow_split.compat.miles.install(specs=[...])``, which carries it to them.

    Parameters
    ----------
    spec
        The column's :class:`~arrow_split.ColumnSpec`.
    replace
        Replace the spec of a key that is already known (by default that is refused). The
        replacement keeps the known key's role (``tokens`` stays the length source).

    Raises
    ------
    SchemaTypeError
        ``spec`` is not a ColumnSpec, or ``replace`` is not a bool.
    SchemaError
        The key is already known (and ``replace`` is not set); is a key the library adds to
        train data itself (``total_lengths``, ``partition``, ``global_total_lengths``); the
        spec's role is played by another known column; or a replacement's kind cannot play
        the known key's role.

    Examples
    --------
    >>> import pyarrow as pa
    >>> import arrow_split
    >>> arrow_split.register_column(
    ...     arrow_split.ColumnSpec("our_kl_penalty", "per_sample_scalar", pa.float64())
    ... )
    >>> arrow_split.KNOWN_COLUMNS["our_kl_penalty"].kind
    'per_sample_scalar'
    """
    if not isinstance(spec, ColumnSpec):
        msg = f"`spec` must be a ColumnSpec, got {type(spec).__name__} {spec!r:.40}"
        raise SchemaTypeError(msg, key="spec")
    if not isinstance(replace, bool):
        msg = f"`replace` must be a bool, got {type(replace).__name__} {replace!r:.40}"
        raise SchemaTypeError(msg, key="replace")
    known = _KNOWN.get(spec.name)
    spec = declared_spec(spec, known)  # a key the library adds itself is refused; roles kept
    if known is not None and not replace:
        msg = (
            f"column `{spec.name}` is already known (a {known.kind} column); pass "
            "`replace=True` to change its spec in this process, or give a per-batch "
            "`specs=[ColumnSpec(...)]` instead"
        )
        raise SchemaError(msg, key=spec.name)
    others = [(name, known_spec.role) for name, known_spec in _KNOWN.items() if name != spec.name]
    check_roles([*others, (spec.name, spec.role)])
    _KNOWN[spec.name] = spec
