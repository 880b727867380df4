"""The events a task's life records for notifications: `task_ended`, and `task_started` after a
wait in the queue; written in the transaction that makes the change, so each is written once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from db.events import add_event

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.rows import TaskRow
    from db.types import Severity
    from fleet.dispatch.ending import Ending

TASK_ENDED_KIND = "task_ended"
TASK_STARTED_KIND = "task_started"
# A `--wait` task starting at least this long after it was submitted gets a task_started event
# (one that found its GPUs free at once starts while its dispatcher still watches).
STARTED_AFTER_WAIT_S = 10


def ended_severity(ending: Ending) -> Severity:
    """info for a success or a cancel; error for a failure (a timeout too); warning for lost."""
    if ending.state == "failed":
        return "error"
    if ending.state == "lost":
        return "warning"
    return "info"


def record_task_ended(session: Session, row: TaskRow, ending: Ending,
                      duration_s: float | None) -> int:
    """Store the `task_ended` event of `row`, which `ending` just ended; returns its id."""
    what = "timed out" if ending.timed_out else ending.state
    message = f"task {row.id} ({row.name}) of {row.owner} {what}"
    if row.host:
        message += f" on {row.host}"
    if ending.state == "failed" and ending.exit_code is not None and not ending.timed_out:
        message += f" with exit code {ending.exit_code}"
    elif ending.state not in ("succeeded", "failed") and ending.error:
        message += f": {ending.error}"
    if duration_s is not None:
        message += f" after {_duration(duration_s)}"
    data: dict[str, object] = {
        "task": row.id, "name": row.name, "owner": row.owner, "state": ending.state,
        "exit_code": ending.exit_code, "error": ending.error, "timed_out": ending.timed_out,
        "duration_s": duration_s, "gpus": [gpu.idx for gpu in row.gpus],
        "notify": bool(row.constraints.get("notify")),
    }
    return add_event(session, ts=ending.ended_at, kind=TASK_ENDED_KIND,
                     severity=ended_severity(ending), message=message, host_id=row.host_id,
                     task_id=row.id, data=data)


def record_task_started(session: Session, row: TaskRow, started_at: int) -> int | None:
    """Store `task_started` when `row` (now running) waited in the queue; returns its id."""
    waited_s = started_at - row.submitted_at
    if not row.constraints.get("wait") or waited_s < STARTED_AFTER_WAIT_S:
        return None
    where = f" on {row.host}" if row.host else ""
    message = (f"task {row.id} ({row.name}) of {row.owner} started{where} after waiting "
               f"{_duration(waited_s)} in the queue")
    data: dict[str, object] = {"task": row.id, "name": row.name, "owner": row.owner,
                               "waited_s": waited_s, "gpus": [gpu.idx for gpu in row.gpus],
                               "notify": bool(row.constraints.get("notify"))}
    return add_event(session, ts=started_at, kind=TASK_STARTED_KIND, severity="info",
                     message=message, host_id=row.host_id, task_id=row.id, data=data)


def _duration(seconds: float) -> str:
    """90 -> "1m30s", 3725 -> "1h2m", 42 -> "42s"."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
