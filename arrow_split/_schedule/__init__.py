"""The rollout-side micro-batch schedule (pure numpy), as miles computes it.

Private: the package's public core re-exports what users need. Modules, bottom up:
``config`` (parameters), ``pack`` (one step's micro-batches), ``plan`` (steps, distribution, the
:class:`Schedule`). Karmarkar-Karp is :mod:`arrow_split._karmarkar_karp`, the input checks
:mod:`arrow_split._args`; miles' output format is :mod:`arrow_split.compat`'s.
"""

from __future__ import annotations

from arrow_split._schedule.config import ScheduleConfig
from arrow_split._schedule.plan import (
    RankSchedule,
    Schedule,
    plan_schedule,
    schedule_for_rank,
)

__all__ = [
    "RankSchedule",
    "Schedule",
    "ScheduleConfig",
    "plan_schedule",
    "schedule_for_rank",
]
