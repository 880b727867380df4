"""The queue's order: priority first (high first); among equal priorities the owner with the
fewest recent GPU-hours (fair share); within one owner, first come first served.

Recent GPU-hours decay: a GPU-hour held `age` ago weighs 2^(-age / half_life) (half_life 7 d
by default, `queue.fair_share_half_life`); holdings older than ten half-lives are left out.
`queue.fair_share: false` orders by priority, then submission time, as plain FIFO.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleet.monitor.settings import setting

if TYPE_CHECKING:
    from db.task_runs import QueuedTask

HORIZON_HALF_LIVES = 10


@dataclass(frozen=True)
class QueueSettings:
    """How waiting tasks are ordered."""

    fair_share: bool = setting(
        True, "among tasks of equal priority, the owner with the fewest recent GPU-hours "
        "goes first (FIFO within an owner); false: plain FIFO")
    fair_share_half_life: float = setting(
        7 * 86400.0, "how fast past GPU-hours stop counting for fair share: one held this "
        "long ago counts half", minimum=60.0, maximum=365 * 86400.0, duration=True)


def horizon_s(now: float, half_life_s: float) -> int:
    """Holdings released before this time no longer count."""
    return int(now - HORIZON_HALF_LIVES * half_life_s)


def decayed_gpu_hours(held: Iterable[tuple[str, int, int | None]], now: float,
                      half_life_s: float) -> dict[str, float]:
    """Per owner, their GPU-hours held (created → released, or now), each moment weighed by
    2^(-(now - t) / half_life)."""
    rate = math.log(2) / half_life_s
    totals: dict[str, float] = defaultdict(float)
    for owner, created, released in held:
        end = min(now, released if released is not None else now)
        if end <= created:
            continue
        # ∫ exp(-rate (now - t)) dt from created to end
        totals[owner] += (math.exp(-rate * (now - end)) - math.exp(-rate * (now - created))) \
            / rate / 3600
    return dict(totals)


def queue_order(queued: Sequence[QueuedTask], recent_gpu_hours: dict[str, float] | None
                ) -> list[QueuedTask]:
    """The queued tasks in the order they may claim (`recent_gpu_hours` None: plain FIFO)."""
    usage = recent_gpu_hours or {}
    return sorted(queued, key=lambda task: (
        -task.priority, usage.get(task.owner, 0.0) if recent_gpu_hours is not None else 0.0,
        task.submitted_at, task.id))
