"""One task in full (`fleet tasks TASK`): every recorded fact, and its gang's or array's tasks."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fleet.render.table import format_bytes
from fleet.render.tasks import format_duration, render_tasks, task_duration
from fleet.textsafe import safe_text
from fleet.timeparse import format_time

if TYPE_CHECKING:
    from db.rows import TaskRow

LABEL_WIDTH = 13
SHOWN_MAX_CHARS = 100_000  # a value is shown whole; only control characters are replaced


def render_task_detail(row: TaskRow, members: Sequence[TaskRow]) -> str:
    """`row` as labelled lines (facts not recorded are left out), then its group's table."""
    code = "" if row.exit_code is None else f", exit code {row.exit_code}"
    timed_out = ", timed out" if row.timed_out else ""
    lines = [f"task {row.id}: {_shown(row.name)} — {row.state}{code}{timed_out}"]
    gpus = ", ".join(f"{gpu.idx} ({gpu.uuid})" if gpu.uuid else str(gpu.idx)
                     for gpu in row.gpus)
    facts: list[tuple[str, Any]] = [
        ("owner", row.owner),
        ("priority", row.priority or None),
        ("command", shlex.join([row.script, *row.args])),
        ("host", row.host),
        ("GPUs", gpus or None),
        ("GPUs asked", row.gpus_requested),
        ("submitted", _time(row.submitted_at)),
        ("started", _time(row.started_at)),
        ("ended", _time(row.ended_at)),
        ("duration", format_duration(task_duration(row))),
        ("GPU-seconds", row.gpu_seconds),
        ("peak memory", format_bytes(row.peak_memory_bytes)),
        ("runs in", _environment(row.constraints.get("environment"))),
        ("snapshot", _snapshot(row.constraints.get("snapshot"))),
        ("remote dir", row.remote_dir),
        ("remote pid", row.remote_pid),
        ("error", row.error),
    ]
    if row.group_id is not None:
        facts.append((row.group_kind or "group",
                      f"{row.group_id}, {'rank' if row.group_kind == 'gang' else 'index'} "
                      f"{row.group_index}"))
    lines += [f"  {label:<{LABEL_WIDTH}}{_shown(value)}" for label, value in facts
              if value is not None and value != ""]
    if members:
        kind = row.group_kind or "group"
        lines += ["", f"{kind} {row.group_id}: {len(members)} tasks", render_tasks(members)]
    return "\n".join(lines)


def _shown(value: object) -> str:
    """A recorded value on one line of the terminal: names, commands and errors come from
    users and hosts, and a CR or LF in them would redraw or split the lines around them."""
    return safe_text(value, limit=SHOWN_MAX_CHARS)


def _time(epoch_s: int | None) -> str | None:
    return None if epoch_s is None else format_time(epoch_s)


def _environment(environment: Any) -> str | None:
    """--venv/--conda/--container as recorded: `--container IMAGE (podman)`."""
    if not isinstance(environment, dict) or not environment.get("kind"):
        return None
    runtime = environment.get("runtime") or environment.get("tool")
    return f"--{environment['kind']} {environment.get('value', '')}" + \
        (f" ({runtime})" if runtime else "")


def _snapshot(snapshot: Any) -> str | None:
    """--snapshot as recorded: `3 files from /src/proj at 1a2b3c4`."""
    if not isinstance(snapshot, dict):
        return None
    commit = snapshot.get("commit")
    return f"{snapshot.get('files')} files from {snapshot.get('source')}" + \
        (f" at {str(commit)[:12]}" if commit else "")
