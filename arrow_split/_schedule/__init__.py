"""The rollout-side micro-batch schedule (pure numpy), with miles' exact output.

Private: the package's public core re-exports what users need. Modules, bottom up:
``config`` (parameters and input checks), ``kk`` (Karmarkar-Karp, equal and unequal sizes),
``pack`` (one step's micro-batches), ``plan`` (steps, distribution, the :class:`Schedule`).
"""

from __future__ import annotations

from arrow_split._schedule.config import ScheduleConfig
from arrow_split._schedule.kk import karmarkar_karp
from arrow_split._schedule.plan import (
    RankSchedule,
    Schedule,
    plan_schedule,
    schedule_for_rank,
    to_miles_fields,
)

__all__ = [
    "RankSchedule",
    "Schedule",
    "ScheduleConfig",
    "karmarkar_karp",
    "plan_schedule",
    "schedule_for_rank",
    "to_miles_fields",
]
