"""Dispatched tasks as JSON-ready data and as the `fleet tasks` table."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fleet.render.table import Column, render_table
from fleet.timeparse import format_time

if TYPE_CHECKING:
    from db.rows import TaskRow

TASK_COLUMNS = (
    Column("ID", ">"), Column("NAME", max_width=24), Column("HOST"), Column("GPUS"),
    Column("STATE"), Column("EXIT", ">"), Column("SUBMITTED"), Column("STARTED"),
    Column("ENDED"), Column("DURATION", ">"), Column("ERROR", max_width=40),
)


def task_to_json(row: TaskRow) -> dict[str, Any]:
    """A task as JSON (times in epoch seconds)."""
    return {
        "id": row.id, "name": row.name, "state": row.state, "exit_code": row.exit_code,
        "timed_out": row.timed_out,
        "host": row.host, "gpus": [gpu.idx for gpu in row.gpus],
        "gpu_uuids": [gpu.uuid for gpu in row.gpus], "gpus_requested": row.gpus_requested,
        "owner": row.owner, "priority": row.priority, "script": row.script,
        "args": list(row.args), "submitted_at": row.submitted_at, "started_at": row.started_at,
        "ended_at": row.ended_at, "duration_s": task_duration(row),
        "gpu_seconds": row.gpu_seconds, "peak_memory_bytes": row.peak_memory_bytes,
        "error": row.error, "remote_dir": row.remote_dir, "remote_pid": row.remote_pid,
        "group_id": row.group_id, "group_kind": row.group_kind, "group_index": row.group_index,
        # Where it ran: --venv/--conda/--container (with the runtime found) and --snapshot.
        "environment": row.constraints.get("environment"),
        "snapshot": row.constraints.get("snapshot"),
    }


def task_duration(row: TaskRow) -> int | None:
    """Seconds from start to end (to now while running); None before it started."""
    if row.started_at is None:
        return None
    end = row.ended_at if row.ended_at is not None else int(time.time())
    return max(end - row.started_at, 0)


def format_duration(seconds: int | None) -> str | None:
    """Seconds as H:MM:SS; None stays None."""
    if seconds is None:
        return None
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def render_tasks(rows: Sequence[TaskRow]) -> str:
    """Tasks as an sacct-like table; the error column only for tasks that did not succeed."""
    body = [
        [row.id, row.name, row.host, ",".join(str(gpu.idx) for gpu in row.gpus) or None,
         row.state, row.exit_code, format_time(row.submitted_at),
         format_time(row.started_at), format_time(row.ended_at),
         format_duration(task_duration(row)), row.error if row.state != "succeeded" else None]
        for row in rows
    ]
    return render_table(TASK_COLUMNS, body)
