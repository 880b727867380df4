"""What idle detection reads and writes: the active allocations' GPU readings over a window
(most utilisation and memory used, sample count, first sample), and each allocation's mark."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from db.models import Allocation, Gpu, GpuSample


@dataclass(frozen=True)
class GpuWindow:
    """One GPU's readings since the window's start: how many, the first, the highest."""

    samples: int
    first_ts_ms: int
    util_max: float | None
    memory_used_max: int | None
    memory_total: int | None


def gpu_windows(session: Session, gpu_ids: Sequence[int], since_ms: int) -> dict[int, GpuWindow]:
    """Per GPU of `gpu_ids` with samples since `since_ms`: those samples summarised."""
    if not gpu_ids:
        return {}
    rows = session.execute(
        select(GpuSample.gpu_id, func.count(), func.min(GpuSample.ts),
               func.max(GpuSample.utilization_gpu_pct), func.max(GpuSample.memory_used_bytes),
               Gpu.memory_total_bytes)
        .join(Gpu, Gpu.id == GpuSample.gpu_id)
        .where(GpuSample.gpu_id.in_(list(gpu_ids)), GpuSample.ts >= since_ms)
        .group_by(GpuSample.gpu_id, Gpu.memory_total_bytes))
    return {gpu_id: GpuWindow(int(count), int(first), util, used, total)
            for gpu_id, count, first, util, used, total in rows}


def set_idle_since(session: Session, allocation_id: int, idle_since: int | None) -> bool:
    """Mark (or, with None, unmark) an active allocation as idle; whether it changed."""
    changed = session.execute(
        update(Allocation).where(Allocation.id == allocation_id,
                                 Allocation.released_at.is_(None),
                                 Allocation.idle_since.is_(None)
                                 if idle_since is not None
                                 else Allocation.idle_since.is_not(None))
        .values(idle_since=idle_since))
    return bool(changed.rowcount)  # type: ignore[attr-defined]
