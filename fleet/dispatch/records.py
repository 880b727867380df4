"""A task's database record through its life: created, placed, started, checked, finished.

Functions are synchronous (call them with asyncio.to_thread); each is one transaction. Ending a
task is a compare-and-set on its active states, so the dispatcher, `fleet cancel` and the
reconciler can race to end the same task and exactly one wins; the allocation goes with it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from db.engine import Database
from db.hosts import host_ids_by_name
from db.task_runs import mark_checked, peak_memory_used
from db.tasks import ACTIVE_TASK_STATES, TaskRow, finish_task, get_task, update_task
from db.types import TaskState
from fleet.errors import ConfigError

if TYPE_CHECKING:
    from fleet.dispatch.remote import RemoteStatus

DEFAULT_LOST_AFTER_S = 300.0  # a task's host silent this long: the task is lost
DEFAULT_GRACE_S = 10.0  # between SIGTERM and SIGKILL


@dataclass(frozen=True)
class Ending:
    """How a task ended: its final state, exit code, error text and times (epoch seconds)."""

    state: TaskState
    exit_code: int | None
    error: str | None
    ended_at: int
    duration_s: float | None  # measured on the host when known (clock skew does not matter)
    timed_out: bool = False  # stopped for running past its --timeout (state is `failed`)


def ending_from_status(status: RemoteStatus, *, now: int, timeout_s: float | None = None
                       ) -> Ending:
    """The Ending a host status describes (status.state is exited or gone)."""
    duration = None
    if status.started_at is not None and status.ended_at is not None:
        duration = float(max(status.ended_at - status.started_at, 0))
    if status.state == "gone":
        reason = ("task directory is gone from the host" if status.dir_missing
                  else "task process vanished without an exit status (host rebooted or "
                       "wrapper killed)")
        return Ending("lost", None, reason, now, duration)
    code = status.exit_code
    if status.cancelled:
        return Ending("cancelled", code, "cancelled", now, duration)
    if status.timed_out:
        limit = f" after {timeout_s:g}s" if timeout_s is not None else ""
        return Ending("failed", code, f"timed out{limit}", now, duration, timed_out=True)
    if code == 0:
        return Ending("succeeded", 0, None, now, duration)
    return Ending("failed", code, f"exit code {code}", now, duration)


def now_s() -> int:
    return int(time.time())


def load(database: Database, task_id: int) -> TaskRow:
    """The task, or ConfigError (bad input, exit 2) if there is none."""
    with database.session() as session:
        row = get_task(session, task_id)
    if row is None:
        raise ConfigError(f"no task with id {task_id} (see `fleet tasks --all`)")
    return row


def set_fields(database: Database, task_id: int, *, from_states: tuple[str, ...] | None = None,
               **changes: Any) -> bool:
    with database.session() as session:
        return update_task(session, task_id, from_states=from_states, **changes)


def set_host(database: Database, task_id: int, host: str) -> None:
    """Record the placed host and move the task to `starting`."""
    with database.session() as session:
        host_id = host_ids_by_name(session).get(host)
        update_task(session, task_id, host_id=host_id, state="starting")
        mark_checked(session, task_id, now_s())


def checked(database: Database, task_id: int) -> None:
    with database.session() as session:
        mark_checked(session, task_id, now_s())


def finish(database: Database, task_id: int, ending: Ending) -> bool:
    """End the task with `ending` (GPU-seconds, peak memory computed); False if already ended."""
    with database.session() as session:
        row = get_task(session, task_id)
        if row is None or row.is_final:
            return False
        started = row.started_at
        duration = ending.duration_s
        if duration is None and started is not None:
            duration = float(max(ending.ended_at - started, 0))
        ended_at = ending.ended_at
        if started is not None and duration is not None:
            ended_at = started + round(duration)
        gpu_seconds = None if duration is None else duration * max(len(row.gpus), 0)
        peak = None
        if started is not None:
            peak = peak_memory_used(session, [gpu.gpu_id for gpu in row.gpus], started, ended_at)
        return finish_task(session, task_id, state=ending.state, now=ended_at,
                           exit_code=ending.exit_code, error=ending.error,
                           gpu_seconds=gpu_seconds, peak_memory_bytes=peak,
                           from_states=ACTIVE_TASK_STATES, released_at=now_s(),
                           timed_out=ending.timed_out)
