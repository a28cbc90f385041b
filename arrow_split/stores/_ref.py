"""The reference a put returns: the keys, schema and plan a rank needs, as plain JSON.

:meth:`StoredBatchRef.from_json` reads it like any input: a member missing or of the wrong type,
a number negative or past int64, a plan that does not fit the sample count, a column layout
that does not fit its Arrow type or the sample count, a key outside the reference's prefix is
refused, the error's ``key`` naming the member. What JSON cannot show wrong (a sample count and
index size changed together, other plan bounds) a take finds: the put writes the reference's
digest at the head of the index, and a take checks it against the reference it was given.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa

from arrow_split._args import INT64_MAX
from arrow_split._codecs._ranges import Node, node_problem, supported
from arrow_split.errors import NotARolloutBatchError, mistake
from arrow_split.plan import PlanKey

__all__ = ["FORMAT", "INDEX_HEADER", "StoredBatchRef"]

FORMAT = "arrow_split.stored_batch/2"
"""The ``format`` member of a reference's JSON; another value is refused. Format 2's index
starts with a header (:data:`INDEX_HEADER`); format 1's had none."""

INDEX_HEADER = 2
"""The int64 words at the head of a stored index: the reference's :attr:`~StoredBatchRef.digest`
and whether adapter slots follow the total lengths and the stored order (1) or not (0)."""


@dataclass(frozen=True, slots=True)
class StoredBatchRef:
    """What a put returns: the keys, schema and plan a rank needs, as plain JSON.

    ``to_json`` / ``from_json`` carry it to a process with no Ray (nothing is pickled). A batch
    put without a plan has ``method``, ``dp_size`` and ``fingerprint`` ``None`` and no
    ``bounds``: each rank plans it for its own ``dp_size``.
    """

    prefix: str
    step: int | None
    num_samples: int
    schema: str
    method: str | None
    dp_size: int | None
    fingerprint: str | None
    bounds: tuple[int, ...]
    index: tuple[str, int]
    columns: tuple[Node, ...]

    @property
    def plan_key(self) -> PlanKey | None:
        """The key of the plan the batch was put with (``None``: put without one)."""
        if self.method is None or self.dp_size is None or self.fingerprint is None:
            return None
        return PlanKey(cast(Any, self.method), self.dp_size, self.fingerprint)

    def _objects(self) -> Iterator[tuple[str, int]]:
        """The key and size of each object the put wrote: the index, then the buffers."""
        yield self.index
        nodes = list(self.columns)
        while nodes:
            node = nodes.pop()
            yield from (buffer for buffer in node.buffers if buffer is not None)
            nodes.extend(node.children)

    @property
    def keys(self) -> list[str]:
        """Every key the put wrote."""
        return [key for key, _ in self._objects()]

    @property
    def nbytes(self) -> int:
        """The bytes the put wrote (the columns' buffers and the index)."""
        return sum(size for _, size in self._objects())

    def to_json(self) -> str:
        """The reference as a JSON string."""
        members = {
            "format": FORMAT,
            "prefix": self.prefix,
            "step": self.step,
            "num_samples": self.num_samples,
            "schema": self.schema,
            "plan": None
            if self.method is None
            else {
                "method": self.method,
                "dp_size": self.dp_size,
                "fingerprint": self.fingerprint,
                "bounds": list(self.bounds),
            },
            "index": list(self.index),
            "columns": [_node_to_json(node) for node in self.columns],
        }
        return json.dumps(members, separators=(",", ":"))

    @property
    def digest(self) -> int:
        """BLAKE2b of :meth:`to_json` as an int64: the put writes it at the head of the index."""
        hashed = hashlib.blake2b(self.to_json().encode(), digest_size=8, person=b"arrow_split.ref")
        return int.from_bytes(hashed.digest(), "little", signed=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> StoredBatchRef:
        """Parse a reference written by :meth:`to_json`; anything else is refused.

        Raises
        ------
        NotARolloutBatchError
            ``text`` is not such a reference (corrupt JSON, a member missing, mistyped or out
            of range, a column layout that does not fit its type); ``key`` names the member.
        """
        try:
            members = json.loads(text)
        except (ValueError, TypeError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise _refused("ref", f"not JSON: {type(exc).__name__}: {exc}") from None
        if not isinstance(members, dict):
            raise _refused("ref", f"not a JSON object but {type(members).__name__}")
        if members.get("format") != FORMAT:
            got = f"{members.get('format')!r:.60}"
            raise _refused("ref", f"its `format` is {got}, not {FORMAT!r}", repr(FORMAT), got)
        try:
            return _parsed(cls, members)
        except NotARolloutBatchError:
            raise  # refused with the member named: a TypeError too, not to be wrapped again
        except RecursionError:
            raise _refused("columns", "its columns are nested too deep") from None
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:  # a net
            raise _refused("ref", f"{type(exc).__name__}: {exc}") from None


def _refused(
    key: str, reason: str, expected: str | None = None, got: str | None = None
) -> NotARolloutBatchError:
    msg = (
        f"not a stored-batch reference ({reason}); pass the `to_json()` of what `put_batch` "
        "returned"
    )
    error = mistake("not_a_batch", msg, key=key, expected=expected, got=got)
    return cast(NotARolloutBatchError, error)


def _member(members: object, name: str, key: str) -> Any:
    """The member ``name`` of a JSON object (refused under ``key`` if it is none or lacks it)."""
    if not isinstance(members, dict) or name not in members:
        raise _refused(key, f"no member `{name}`" + (f" in `{key}`" if key != name else ""))
    return members[name]


def _typed(value: object, kind: type, key: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _refused(key, f"`{key}` holds {value!r:.40}, not of type {kind.__name__}")
    return value


def _int(value: object, key: str, least: int = 0) -> int:
    """An int of JSON in ``[least, INT64_MAX]``: a count, a size, a bound."""
    number: int = _typed(value, int, key)
    if not least <= number <= INT64_MAX:
        raise _refused(key, f"`{key}` holds {number}, outside [{least}, {INT64_MAX}]")
    return number


def _parsed(cls: type[StoredBatchRef], members: dict[str, Any]) -> StoredBatchRef:
    """The reference of a JSON object of the format, every member checked (see the module)."""
    step = _member(members, "step", "step")
    num_samples = _int(_member(members, "num_samples", "num_samples"), "num_samples")
    index = _typed(_member(members, "index", "index"), list, "index")
    if len(index) != 2:
        raise _refused("index", "`index` is not a key and a size")
    index_key, index_size = _typed(index[0], str, "index"), _int(index[1], "index")
    if index_size not in [8 * (INDEX_HEADER + words * num_samples) for words in (2, 3)]:
        raise _refused("index", f"an index of {index_size} bytes for {num_samples} samples")
    ref = cls(
        prefix=_typed(_member(members, "prefix", "prefix"), str, "prefix"),
        step=None if step is None else _int(step, "step"),
        num_samples=num_samples,
        schema=_typed(_member(members, "schema", "schema"), str, "schema"),
        **_plan(_member(members, "plan", "plan"), num_samples),
        index=(index_key, index_size),
        columns=_columns(members, _schema(members["schema"]), num_samples),
    )
    outside = [key for key in ref.keys if not key.startswith(f"{ref.prefix}/")]
    if outside:
        raise _refused("prefix", f"its key {outside[0]!r:.80} is outside {ref.prefix!r:.80}")
    return ref


def _plan(plan: object, num_samples: int) -> dict[str, Any]:
    """The plan members of a reference: none, or a plan whose bounds run from 0 to the count."""
    if plan is None:  # put without a plan: each rank plans for its own size
        return {"method": None, "dp_size": None, "fingerprint": None, "bounds": ()}
    method = _member(plan, "method", "plan")
    dp_size = _int(_member(plan, "dp_size", "plan"), "plan", least=1)
    fingerprint = _typed(_member(plan, "fingerprint", "plan"), str, "plan")
    listed = _typed(_member(plan, "bounds", "plan"), list, "plan")
    bounds = tuple(_int(bound, "plan") for bound in listed)
    if method not in ("balanced", "strided") or len(bounds) != dp_size + 1:
        raise _refused("plan", f"a {method!r:.20} plan of {dp_size} with {len(bounds)} bounds")
    steps = np.diff(np.asarray(bounds, dtype=np.int64))
    if bounds[0] != 0 or bounds[-1] != num_samples or (steps < 0).any():
        raise _refused("plan", f"its bounds do not run up from 0 to {num_samples}")
    return {"method": method, "dp_size": dp_size, "fingerprint": fingerprint, "bounds": bounds}


def _columns(members: dict[str, Any], schema: pa.Schema, num_samples: int) -> tuple[Node, ...]:
    """The column layouts, each one that holds ``num_samples`` rows of its schema's type."""
    nodes = tuple(
        _node_from_json(node)
        for node in _typed(_member(members, "columns", "columns"), list, "columns")
    )
    if len(nodes) != len(schema):
        raise _refused("columns", f"{len(nodes)} columns for a schema of {len(schema)}")
    for position, (node, field) in enumerate(zip(nodes, schema, strict=True)):
        if problem := node_problem(node, field.type, num_samples):
            raise _refused("columns", f"column {position} (`{field.name:.40}`): {problem}")
    return nodes


def _schema(text: str) -> pa.Schema:
    """The Arrow schema of a reference's ``schema`` member, each column's type one it stores."""
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))
    except (ValueError, pa.ArrowException) as exc:  # binascii.Error is a ValueError
        raise _refused("schema", f"`schema` does not decode: {exc}") from None
    for field in schema:
        if not supported(field.type):
            raise _refused("schema", f"column `{field.name:.40}` of type {field.type}")
    return schema


def _node_to_json(node: Node) -> dict[str, object]:
    return {
        "buffers": [None if buffer is None else list(buffer) for buffer in node.buffers],
        "children": [_node_to_json(child) for child in node.children],
        "entries": node.entries,
    }


def _node_from_json(members: object) -> Node:
    buffers: list[tuple[str, int] | None] = []
    for buffer in _typed(_member(members, "buffers", "columns"), list, "columns"):
        if buffer is not None and not (isinstance(buffer, list) and len(buffer) == 2):
            raise _refused("columns", f"a buffer {buffer!r:.40} is not a key and a size")
        key: str = "" if buffer is None else _typed(buffer[0], str, "columns")
        buffers.append(None if buffer is None else (key, _int(buffer[1], "columns")))
    children = _typed(_member(members, "children", "columns"), list, "columns")
    entries = _int(_member(members, "entries", "columns"), "columns")
    return Node(tuple(buffers), tuple(_node_from_json(child) for child in children), entries)
