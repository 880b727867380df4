"""How a task ended (state, exit code, error), from what its host reports; what a reconcile
pass found ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from db.types import TaskState  # annotations only: db.types costs ~20 ms to import
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
    if status.state == "gone" and status.cancelled and not status.dir_missing:
        # Marked cancelled, and no wrapper left: one that never started (it never will run
        # the command now), or one that died under the cancel.
        reason = "cancelled before it started" if status.started_at is None else "cancelled"
        return Ending("cancelled", None, reason, now, duration)
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


@dataclass
class ReconcileReport:
    """What one reconcile pass did: task id → new state, and hosts it could not reach."""

    ended: dict[int, str] = field(default_factory=dict)
    still_running: list[int] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
