"""The specs of a builder's keys: declared once, resolved at a key's first use, kept across steps.

:class:`KeySpecs` is the part of :class:`~arrow_split.RolloutBatchBuilder` that says which spec
each key has: the specs the caller declared (checked when the builder is made, before any
sample), the library's known columns, and every key resolved so far, in any step, so that a key
is resolved once. The builder asks it whether a key gives one value per sample and for the specs
of a group's keys; the step's specs as used (a ``string`` column that fell back to ``pickle``)
are the step's own (:mod:`arrow_split._builder_step`) and win over these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from arrow_split.schema import KNOWN_COLUMNS, TOTAL_LENGTHS, ColumnSpec, resolve_specs

__all__ = ["KeySpecs"]

_DERIVED = TOTAL_LENGTHS  # checked against the length source, never stored


class KeySpecs:
    """The declared specs and every key's spec resolved so far (see the module docstring)."""

    __slots__ = ("_known", "declared")

    def __init__(self, specs: Iterable[ColumnSpec]) -> None:
        self.declared = tuple(specs)
        resolve_specs((), self.declared)  # type and duplicate checks, before any sample
        self._known: dict[str, ColumnSpec] = {}  # every key resolved so far (all steps)

    def spec(self, key: str) -> ColumnSpec:
        """The spec of ``key``, resolved at its first use (an unknown key raises then)."""
        if key not in self._known:
            self._known[key] = resolve_specs([key], self.declared)[key]
        return self._known[key]

    def per_sample(self, key: str) -> bool:
        """Whether ``key`` gives one value per sample (unknown keys too: resolving raises)."""
        if key == _DERIVED:
            return True
        declared = any(spec.name == key for spec in self.declared)
        if key not in self._known and key not in KNOWN_COLUMNS and not declared:
            return True
        spec = self.spec(key)
        return spec.is_per_sample or spec.global_shape == "float_per_sample"

    def resolve(
        self, keys: Iterable[str], used: Mapping[str, ColumnSpec], first: bool
    ) -> dict[str, ColumnSpec]:
        """The specs of a group's keys: as ``used`` so far this step, or resolved anew.

        ``first``: the step's first group, whose keys are resolved together (the role checks
        too); a later group's keys are the step's.
        """
        if first:
            resolved = resolve_specs(keys, self.declared)  # role checks too
            self._known.update(resolved)
            return {key: used.get(key, spec) for key, spec in resolved.items()}
        return {
            key: used[key] if key in used else self.spec(key) for key in keys if key != _DERIVED
        }
