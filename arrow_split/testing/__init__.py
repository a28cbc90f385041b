"""Test helpers that ship with the library: seeded rollout batches and equality assertions.

Like ``polars.testing``, this is what the project's own tests, benchmarks and demo test with,
and what users can test their code with. Numpy and pyarrow only; the hypothesis strategies live
in :mod:`arrow_split.testing.strategies` (``pip install arrow-split[test]``).

- :func:`make_train_data` and :func:`iter_sample_groups`: seeded train-data dicts of every kind
  of column, shaped by a :class:`RolloutConfig`; :data:`WORKLOADS` names the benchmark sizes;
  :func:`make_lengths`: the same batch's sample lengths alone;
  :func:`make_multimodal_train_data`: samples of a prompt sharing its image (objects stored once).
- :func:`run_kill_test`: a journaling writer SIGKILLed at random points, each recovery checked
  (:class:`KillReport`); POSIX only (it forks).
- :func:`assert_batches_equal` and :func:`assert_shards_equal`: ``AssertionError`` naming the
  first difference.

Importing :mod:`arrow_split` does not import this package.
"""

from __future__ import annotations

from arrow_split.testing._asserts import assert_batches_equal, assert_shards_equal
from arrow_split.testing._crash import KillReport, run_kill_test
from arrow_split.testing._generate import (
    WORKLOADS,
    ColumnSet,
    RolloutConfig,
    iter_sample_groups,
    make_lengths,
    make_multimodal_train_data,
    make_train_data,
)

__all__ = [
    "ColumnSet",
    "KillReport",
    "RolloutConfig",
    "WORKLOADS",
    "assert_batches_equal",
    "assert_shards_equal",
    "iter_sample_groups",
    "make_lengths",
    "make_multimodal_train_data",
    "make_train_data",
    "run_kill_test",
]
