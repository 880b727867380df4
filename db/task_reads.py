"""Reading tasks back: listing, one task, a group's members, each with its GPUs (plain SQL).

The statements are SQL text that SQLite and PostgreSQL both run (db.sql), so `fleet tasks` on
an SQLite file reads them with the stdlib driver, and write code reads them through its
session. A task's GPUs are the GPUs of its allocations (active or released), so a finished
task still shows where it ran. Times are integer epoch seconds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from db.rows import TaskGpu, TaskRow
from db.sql import Row, SqlReader, chunks, in_list
from db.types import TASK_STATES

# A task's columns in TaskRow's order, its host's name in the place of `host`.
_TASK_SELECT = """
SELECT tasks.id, tasks.name, tasks.script, tasks.args_json, tasks.host_id, hosts.name,
       tasks.state, tasks.exit_code, tasks.gpus_requested, tasks.constraints_json,
       tasks.priority, tasks.owner, tasks.remote_dir, tasks.remote_pid, tasks.submitted_at,
       tasks.started_at, tasks.ended_at, tasks.error, tasks.gpu_seconds,
       tasks.peak_memory_bytes, tasks.timed_out, tasks.group_id, tasks.group_kind,
       tasks.group_index
FROM tasks LEFT OUTER JOIN hosts ON hosts.id = tasks.host_id
"""


def get_task(reader: SqlReader, task_id: int) -> TaskRow | None:
    """The task with this id (with its GPUs), or None."""
    return next(iter(_task_rows(reader, f"{_TASK_SELECT} WHERE tasks.id = :task_id",
                                {"task_id": task_id})), None)


def group_members(reader: SqlReader, group_id: int) -> list[TaskRow]:
    """The members of a gang or array, by rank or index (empty when there is no such group)."""
    return _task_rows(reader, f"{_TASK_SELECT} WHERE tasks.group_id = :group_id "
                              "ORDER BY tasks.group_index, tasks.id", {"group_id": group_id})


def list_tasks(
    reader: SqlReader,
    *,
    states: Sequence[str] | None = None,
    owner: str | None = None,
    host: str | None = None,
    since: int | None = None,
    limit: int | None = None,
) -> list[TaskRow]:
    """Tasks (optionally in `states`, of `owner`, on `host`, submitted at or after `since`).

    Ordered oldest first; `limit` keeps the newest ones. Raises ValueError for an unknown state.
    """
    terms: list[str] = []
    parameters: dict[str, Any] = {"owner": owner, "host": host, "since": since, "limit": limit}
    if states is not None:
        for state in states:
            check_state(state)
        if not states:
            return []
        placeholders, bound = in_list("state", list(states))
        terms.append(f"tasks.state IN ({placeholders})")
        parameters.update(bound)
    if owner is not None:
        terms.append("tasks.owner = :owner")
    if host is not None:
        terms.append("hosts.name = :host")
    if since is not None:
        terms.append("tasks.submitted_at >= :since")
    where = f" WHERE {' AND '.join(terms)}" if terms else ""
    limited = " LIMIT :limit" if limit is not None else ""
    rows = _task_rows(reader, f"{_TASK_SELECT}{where} ORDER BY tasks.id DESC{limited}",
                      parameters)
    return list(reversed(rows))


def task_gpus(reader: SqlReader, task_ids: Sequence[int]) -> dict[int, tuple[TaskGpu, ...]]:
    """Each task's allocated GPUs (active and released), ordered by host GPU index."""
    found: dict[int, list[TaskGpu]] = {}
    for some_ids in chunks(list(dict.fromkeys(task_ids))):
        placeholders, parameters = in_list("task", some_ids)
        rows = reader.rows(
            "SELECT allocations.task_id, allocations.id, allocations.gpu_id, hosts.name, "
            "gpus.idx, gpus.uuid, allocations.released_at "
            "FROM allocations JOIN gpus ON gpus.id = allocations.gpu_id "
            "JOIN hosts ON hosts.id = gpus.host_id "
            f"WHERE allocations.task_id IN ({placeholders}) "
            "ORDER BY allocations.task_id, gpus.idx, allocations.id", parameters)
        for task_id, allocation_id, gpu_id, host, idx, uuid, released_at in rows:
            found.setdefault(task_id, []).append(TaskGpu(
                allocation_id=allocation_id, gpu_id=gpu_id, host=host, idx=idx, uuid=uuid,
                active=released_at is None))
    return {task_id: tuple(gpus) for task_id, gpus in found.items()}


def last_checks(reader: SqlReader, task_ids: Sequence[int]) -> dict[int, int | None]:
    """When each task's host last answered a status check (None if never)."""
    checks: dict[int, int | None] = {}
    for some_ids in chunks(list(dict.fromkeys(task_ids))):
        placeholders, parameters = in_list("task", some_ids)
        checks.update((task_id, checked) for task_id, checked in reader.rows(
            f"SELECT id, checked_at FROM tasks WHERE id IN ({placeholders})", parameters))
    return checks


def check_state(state: object) -> None:
    """ValueError unless `state` is a task state."""
    if state not in TASK_STATES:
        raise ValueError(f"unknown task state {state!r}; expected one of {TASK_STATES}")


def _task_rows(reader: SqlReader, sql: str, parameters: dict[str, Any]) -> list[TaskRow]:
    rows = reader.rows(sql, parameters)
    gpus = task_gpus(reader, [row[0] for row in rows]) if rows else {}
    return [_task_row(row, gpus.get(row[0], ())) for row in rows]


def _task_row(row: Row, gpus: tuple[TaskGpu, ...]) -> TaskRow:
    (task_id, name, script, args_json, host_id, host, state, exit_code, gpus_requested,
     constraints_json, priority, owner, remote_dir, remote_pid, submitted_at, started_at,
     ended_at, error, gpu_seconds, peak_memory_bytes, timed_out, group_id, group_kind,
     group_index) = row
    return TaskRow(
        id=task_id,
        name=name,
        script=script,
        args=tuple(str(arg) for arg in json.loads(args_json)),
        host_id=host_id,
        host=host,
        state=state,
        exit_code=exit_code,
        gpus_requested=gpus_requested,
        constraints=dict(json.loads(constraints_json)),
        priority=priority,
        owner=owner,
        remote_dir=remote_dir,
        remote_pid=remote_pid,
        submitted_at=submitted_at,
        started_at=started_at,
        ended_at=ended_at,
        error=error,
        gpu_seconds=gpu_seconds,
        peak_memory_bytes=peak_memory_bytes,
        gpus=gpus,
        timed_out=bool(timed_out),
        group_id=group_id,
        group_kind=group_kind,
        group_index=group_index,
    )
