"""The reference a put returns: the keys, schema and plan a rank needs, as plain JSON.

:meth:`StoredBatchRef.from_json` reads it like any input: a member missing or of the wrong type,
a plan that does not fit the sample count, a key outside the reference's prefix is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from arrow_split._codecs._ranges import Node
from arrow_split.errors import NotARolloutBatchError
from arrow_split.plan import PlanKey

__all__ = ["FORMAT", "StoredBatchRef"]

FORMAT = "arrow_split.stored_batch/1"
"""The ``format`` member of a reference's JSON; another value is refused."""


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

    @classmethod
    def from_json(cls, text: str | bytes) -> StoredBatchRef:
        """Parse a reference written by :meth:`to_json`; anything else is refused.

        Raises
        ------
        NotARolloutBatchError
            ``text`` is not such a reference (corrupt JSON, a member missing or mistyped).
        """
        try:
            members = json.loads(text)
            if members.get("format") != FORMAT:
                got = f"{members.get('format')!r:.60}"
                raise _refused(f"its `format` is {got}, not {FORMAT!r}", repr(FORMAT), got)
            plan = members["plan"]
            if plan is None:  # put without a plan: each rank plans for its own size
                plan = {"method": None, "dp_size": None, "fingerprint": None, "bounds": []}
            ref = cls(
                prefix=_typed(members["prefix"], str),
                step=None if members["step"] is None else _typed(members["step"], int),
                num_samples=_typed(members["num_samples"], int),
                schema=_typed(members["schema"], str),
                method=_optional(plan["method"], str),
                dp_size=_optional(plan["dp_size"], int),
                fingerprint=_optional(plan["fingerprint"], str),
                bounds=tuple(_typed(bound, int) for bound in plan["bounds"]),
                index=(_typed(members["index"][0], str), _typed(members["index"][1], int)),
                columns=tuple(_node_from_json(node) for node in members["columns"]),
            )
            _check_plan(ref)
            outside = [key for key in ref.keys if not key.startswith(f"{ref.prefix}/")]
            if outside:
                raise _refused(
                    f"its key {outside[0]!r:.80} is outside its prefix {ref.prefix!r:.80}"
                )
        except NotARolloutBatchError:
            raise  # refused above: a TypeError too, not to be wrapped again
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise _refused(
                f"{type(exc).__name__}: {exc}"
            ) from None  # corrupt JSON, a member missing
        return ref


def _refused(
    reason: str, expected: str | None = None, got: str | None = None
) -> NotARolloutBatchError:
    msg = (
        f"not a stored-batch reference ({reason}); pass the `to_json()` of what `put_batch` "
        "returned"
    )
    return NotARolloutBatchError(msg, key="ref", expected=expected, got=got)


def _typed(value: object, kind: type) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _refused(f"{value!r:.40} is not {kind.__name__}")
    return value


def _optional(value: object, kind: type) -> Any:
    return None if value is None else _typed(value, kind)


def _check_plan(ref: StoredBatchRef) -> None:
    """A plan of the sample count (or none at all); an index of 2 or 3 int64 per sample."""
    bounds = np.asarray(ref.bounds, dtype=np.int64)
    planless = ref.method is None and ref.dp_size is None and ref.fingerprint is None
    if (
        not (planless and not len(bounds))
        and (
            ref.method not in ("balanced", "strided")
            or ref.dp_size is None
            or ref.fingerprint is None
            or ref.dp_size < 1
            or len(bounds) != ref.dp_size + 1
            or bounds[0] != 0
            or bounds[-1] != ref.num_samples
            or np.any(np.diff(bounds) < 0)
        )
    ) or ref.index[1] not in (16 * ref.num_samples, 24 * ref.num_samples):
        raise _refused("its plan or index does not fit its sample count")


def _node_to_json(node: Node) -> dict[str, object]:
    return {
        "buffers": [None if buffer is None else list(buffer) for buffer in node.buffers],
        "children": [_node_to_json(child) for child in node.children],
        "entries": node.entries,
    }


def _node_from_json(members: Mapping[str, Any]) -> Node:
    buffers = tuple(
        None if buffer is None else (_typed(buffer[0], str), _typed(buffer[1], int))
        for buffer in members["buffers"]
    )
    children = tuple(_node_from_json(child) for child in members["children"])
    return Node(buffers, children, _typed(members["entries"], int))
