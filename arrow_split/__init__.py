"""arrow_split: move RL rollout batches to data-parallel ranks as Arrow record batches.

The core (this package's top level) needs only numpy and pyarrow. Ray and torch live in the leaf
subpackages :mod:`arrow_split.ray` and :mod:`arrow_split.torch`, imported only when used; test
helpers in :mod:`arrow_split.testing`.
"""

from __future__ import annotations

from arrow_split._args import SplitMethod
from arrow_split._builder import RolloutBatchBuilder
from arrow_split._codecs.per_token_list import TokenLists
from arrow_split._dashboard import write_dashboard_columns
from arrow_split._journal import JournalSync, OnDuplicate
from arrow_split._journal_inspect import describe_journal
from arrow_split._registry import register_column
from arrow_split._schedule import (
    RankSchedule,
    Schedule,
    ScheduleConfig,
    plan_schedule,
    schedule_for_rank,
)
from arrow_split._split import (
    pad_to_dp,
    shard_for_rank,
    split,
    split_train_data_by_dp_raw,
    take,
    take_rows,
)
from arrow_split._version import __version__
from arrow_split.batch import ColumnValues, RolloutBatch
from arrow_split.errors import (
    ArrowSplitError,
    ArrowSplitWarning,
    ColumnNotFoundError,
    ColumnTypeError,
    DumpError,
    DuplicateSampleError,
    InstallError,
    JournalError,
    NotARolloutBatchError,
    ObjectFallbackWarning,
    OptionError,
    OptionTypeError,
    PathError,
    PathTypeError,
    PlanError,
    PlanMismatchError,
    PlanTypeError,
    RaggedLengthError,
    SchemaError,
    SchemaTypeError,
    TransportError,
    UnknownKeyWarning,
    UntrustedObjectError,
    ValueRangeError,
)
from arrow_split.plan import (
    Plan,
    PlanKey,
    partition_for_rank,
    plan_fingerprint,
    plan_partitions,
)
from arrow_split.plan._karmarkar_karp import karmarkar_karp
from arrow_split.schema import (
    KNOWN_COLUMNS,
    ActorTrainData,
    ColumnKind,
    ColumnSpec,
    Role,
    RolloutTrainData,
    TrainData,
)
from arrow_split.shard import Shard, TrainDataLayout

__all__ = [
    "ActorTrainData",
    "ArrowSplitError",
    "ArrowSplitWarning",
    "ColumnKind",
    "ColumnNotFoundError",
    "ColumnSpec",
    "ColumnTypeError",
    "ColumnValues",
    "DumpError",
    "DuplicateSampleError",
    "InstallError",
    "JournalError",
    "JournalSync",
    "KNOWN_COLUMNS",
    "NotARolloutBatchError",
    "ObjectFallbackWarning",
    "OnDuplicate",
    "OptionError",
    "OptionTypeError",
    "PathError",
    "PathTypeError",
    "Plan",
    "PlanError",
    "PlanKey",
    "PlanMismatchError",
    "PlanTypeError",
    "RaggedLengthError",
    "RankSchedule",
    "Role",
    "RolloutBatch",
    "RolloutBatchBuilder",
    "RolloutTrainData",
    "Schedule",
    "ScheduleConfig",
    "SchemaError",
    "SchemaTypeError",
    "Shard",
    "SplitMethod",
    "TokenLists",
    "TrainData",
    "TrainDataLayout",
    "TransportError",
    "UnknownKeyWarning",
    "UntrustedObjectError",
    "ValueRangeError",
    "__version__",
    "describe_journal",
    "karmarkar_karp",
    "pad_to_dp",
    "partition_for_rank",
    "plan_fingerprint",
    "plan_partitions",
    "plan_schedule",
    "register_column",
    "schedule_for_rank",
    "shard_for_rank",
    "split",
    "split_train_data_by_dp_raw",
    "take",
    "take_rows",
    "write_dashboard_columns",
]
