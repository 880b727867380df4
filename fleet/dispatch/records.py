"""A task's database record through its life: created, placed, started, checked, finished.

Functions are synchronous (call them with asyncio.to_thread); each is one transaction. Ending a
task is a compare-and-set on its active states, so the dispatcher, `fleet cancel` and the
reconciler can race to end the same task and exactly one wins; the allocation goes with it.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from db.engine import Database
from db.rows import TaskRow
from db.task_reads import get_task
from db.types import ACTIVE_TASK_STATES
from fleet.errors import ConfigError

if TYPE_CHECKING:
    from fleet.dispatch.ending import Ending


def now_s() -> int:
    return int(time.time())


def load(database: Database, task_id: int) -> TaskRow:
    """The task, or ConfigError (bad input, exit 2) if there is none."""
    with database.reader() as reader:
        row = get_task(reader, task_id)
    if row is None:
        raise ConfigError(f"no task with id {task_id} (see `fleet tasks --all`)")
    return row


def set_fields(database: Database, task_id: int, *, from_states: tuple[str, ...] | None = None,
               **changes: Any) -> bool:
    from db.tasks import update_task

    with database.session() as session:
        return update_task(session, task_id, from_states=from_states, **changes)


def set_host(database: Database, task_id: int, host: str) -> bool:
    """Record the placed host and move the task from `queued` or `placing` to `starting`;
    False when it had left them (cancelled from elsewhere once its GPUs were claimed)."""
    from db.hosts import host_ids_by_name
    from db.task_runs import mark_checked
    from db.tasks import update_task

    with database.session() as session:
        host_id = host_ids_by_name(session).get(host)
        if not update_task(session, task_id, from_states=("queued", "placing"),
                           host_id=host_id, state="starting"):
            return False
        mark_checked(session, task_id, now_s())
        return True


def checked(database: Database, task_id: int) -> None:
    from db.task_runs import mark_checked

    with database.session() as session:
        mark_checked(session, task_id, now_s())


def finish(database: Database, task_id: int, ending: Ending, *,
           unlaunched_only: bool = False) -> bool:
    """End the task with `ending` (GPU-seconds, peak memory computed); False if already ended,
    or with `unlaunched_only` once its dispatcher has recorded a task directory on the host."""
    from db.sql import SessionReader
    from db.task_runs import peak_memory_used
    from db.tasks import finish_task
    from fleet.dispatch.task_events import record_task_ended

    with database.session() as session:
        row = get_task(SessionReader(session), task_id)
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
        if not finish_task(session, task_id, state=ending.state, now=ended_at,
                           exit_code=ending.exit_code, error=ending.error,
                           gpu_seconds=gpu_seconds, peak_memory_bytes=peak,
                           from_states=ACTIVE_TASK_STATES, released_at=now_s(),
                           timed_out=ending.timed_out, unlaunched_only=unlaunched_only):
            return False
        # Only the one process whose compare-and-set won records the end as an event.
        record_task_ended(session, row, replace(ending, ended_at=ended_at), duration)
        return True


def started(database: Database, task_id: int, *, pgid: int | None, started_at: int) -> bool:
    """`starting` → `running` (with its process group and start time); False if it had left
    `starting`. A task that waited in the queue gets a `task_started` event with it."""
    from db.sql import SessionReader
    from db.tasks import update_task
    from fleet.dispatch.task_events import record_task_started

    with database.session() as session:
        if not update_task(session, task_id, from_states=("starting",), state="running",
                           remote_pid=pgid, started_at=started_at):
            return False
        row = get_task(SessionReader(session), task_id)
        if row is not None:
            record_task_started(session, row, started_at)
        return True
