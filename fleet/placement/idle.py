"""Idle holdings: an allocation whose GPU stays below a utilisation *and* a memory threshold for
`idle.after` is marked idle (`idle_since`) with one `allocation_idle` event naming its owner;
with `idle.release_reservations_after` set, an idle reservation is released once idle that long
(event `reservation_released_idle`). Tasks are never stopped for being idle, only reported.

Judged from the stored samples, by the leader's housekeeping: a GPU needs readings covering
most of the window (at least MIN_SAMPLES, the first within its first quarter) before it is
called idle; a GPU whose memory size is unknown is not judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleet.monitor.settings import setting

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.engine import Database
    from db.idle import GpuWindow
    from db.rows import AllocationDetail
    from db.sql import SqlReader
    from db.types import Severity

MIN_SAMPLES = 2


@dataclass(frozen=True)
class IdleSettings:
    """When a held GPU counts as idle, and what happens to idle reservations."""

    util_below_pct: float = setting(
        5.0, "a held GPU is idle while its utilisation stays below this (percent)",
        minimum=0.0, maximum=100.0)
    memory_below_pct: float = setting(
        5.0, "... and its memory used stays below this share of its memory (percent)",
        minimum=0.0, maximum=100.0)
    after: float = setting(
        3600.0, "how long both must hold before the allocation is marked idle",
        minimum=1.0, maximum=30 * 86400.0, duration=True)
    release_reservations_after: float | None = setting(
        None, "opt-in: release a reservation once it has been idle this long (tasks are never "
        "stopped) [default: never]", minimum=1.0, maximum=365 * 86400.0, duration=True)


@dataclass
class IdleOutcome:
    """One pass: allocations newly marked idle, marked in use again, and reservations released."""

    marked: list[int] = field(default_factory=list)
    cleared: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)


def is_idle(window: GpuWindow | None, since_ms: int, settings: IdleSettings) -> bool:
    """Whether the GPU's readings since `since_ms` are all below both thresholds (and cover
    the window)."""
    if window is None or window.samples < MIN_SAMPLES or not window.memory_total:
        return False
    quarter_ms = settings.after * 1000 / 4
    if window.first_ts_ms > since_ms + quarter_ms or window.util_max is None:
        return False
    used = window.memory_used_max or 0
    return (window.util_max < settings.util_below_pct
            and used * 100 / window.memory_total < settings.memory_below_pct)


def mark_idle(database: Database, settings: IdleSettings, now: float) -> IdleOutcome:
    """One pass over the active allocations (one transaction): mark, clear, release, and write
    the events.

    A reader looks first: the write transaction runs only when an allocation is old enough to
    be judged or is marked idle (most passes of an idle or young fleet need none).
    """
    from db.allocations import release_allocations
    from db.idle import gpu_windows, set_idle_since
    from db.sql import SessionReader

    outcome = IdleOutcome()
    moment = int(now)
    since_ms = int((now - settings.after) * 1000)
    with database.reader() as reader:
        if not _judged(reader, settings, now):
            return outcome
    with database.session() as session:
        held = _judged(SessionReader(session), settings, now)
        windows = gpu_windows(session, [row.gpu_id for row in held], since_ms)
        for row in held:
            idle = row.created_at <= now - settings.after and \
                is_idle(windows.get(row.gpu_id), since_ms, settings)
            idle_since = row.idle_since
            if idle and idle_since is None:
                idle_since = int(now - settings.after)
                if set_idle_since(session, row.id, idle_since):
                    outcome.marked.append(row.id)
                    _event(session, row, moment, "allocation_idle", "warning",
                           f"{_what(row)} of {row.owner} idle since "
                           f"{settings.after:g}s ago (below {settings.util_below_pct:g}% "
                           f"utilisation and {settings.memory_below_pct:g}% memory)")
            elif not idle and idle_since is not None:
                if set_idle_since(session, row.id, None):
                    outcome.cleared.append(row.id)
                continue
            limit = settings.release_reservations_after
            if (idle_since is not None and limit is not None and row.kind == "reservation"
                    and now - idle_since >= limit):
                release_allocations(session, now=moment, reason="idle",
                                    allocation_ids=[row.id])
                outcome.released.append(row.id)
                _event(session, row, moment, "reservation_released_idle", "warning",
                       f"released {_what(row)} of {row.owner}: idle for "
                       f"{now - idle_since:.0f}s (idle.release_reservations_after "
                       f"{limit:g}s)")
    return outcome


def _judged(reader: SqlReader, settings: IdleSettings, now: float) -> list[AllocationDetail]:
    """The active allocations a pass judges: old enough to be idle, or marked idle already."""
    from db.allocation_details import allocation_details

    return [row for row in allocation_details(reader)
            if row.created_at <= now - settings.after or row.idle_since is not None]


def _what(row: AllocationDetail) -> str:
    holder = f"task {row.task_id}" if row.task_id is not None else "reservation"
    return f"{row.host} GPU {row.gpu_idx} ({holder}, allocation {row.id})"


def _event(session: Session, row: AllocationDetail, ts: int, kind: str, severity: Severity,
           message: str) -> None:
    from db.events import add_event
    from db.models import Gpu

    gpu = session.get(Gpu, row.gpu_id)
    add_event(session, ts=ts, kind=kind, severity=severity, message=message,
              host_id=gpu.host_id if gpu is not None else None, gpu_id=row.gpu_id,
              task_id=row.task_id, data={"owner": row.owner, "allocation_id": row.id,
                                         "kind": row.kind})
