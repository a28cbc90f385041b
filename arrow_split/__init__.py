"""arrow_split: move RL rollout batches to data-parallel ranks as Arrow record batches.

The core (this package's top level) needs only numpy and pyarrow. Ray and torch live in the leaf
modules :mod:`arrow_split.ray` and :mod:`arrow_split.torch`, imported only when used.
"""

from __future__ import annotations

from arrow_split.batch import RolloutBatch, TrainDataLayout
from arrow_split.errors import (
    ArrowSplitError,
    ColumnTypeError,
    NotARolloutBatchError,
    PlanError,
    PlanTypeError,
    RaggedLengthError,
    SchemaError,
    TransportError,
    ValueRangeError,
)
from arrow_split.partition import (
    SplitMethod,
    partition_for_rank,
    plan_fingerprint,
    plan_partitions,
)
from arrow_split.schema import KNOWN_COLUMNS, ColumnKind, ColumnSpec
from arrow_split.split import shard_for_rank, split_train_data_by_dp_raw, take_rows

__all__ = [
    "ArrowSplitError",
    "ColumnKind",
    "ColumnSpec",
    "ColumnTypeError",
    "KNOWN_COLUMNS",
    "NotARolloutBatchError",
    "PlanError",
    "PlanTypeError",
    "RaggedLengthError",
    "RolloutBatch",
    "SchemaError",
    "SplitMethod",
    "TrainDataLayout",
    "TransportError",
    "ValueRangeError",
    "__version__",
    "partition_for_rank",
    "plan_fingerprint",
    "plan_partitions",
    "shard_for_rank",
    "split_train_data_by_dp_raw",
    "take_rows",
]

__version__ = "0.1.0"
