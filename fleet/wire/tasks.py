"""Tasks on the wire (`/v1/tasks`, `/v1/tasks/{id}`, cancel): db.tasks.TaskRow and its GPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from fleet.wire.bounds import Count, DurationS, EpochIntS, Id
from fleet.wire.codec import from_wire, to_wire

if TYPE_CHECKING:
    from fleet.records import TaskRow

TASK_STATES = ("queued", "placing", "starting", "running", "succeeded", "failed", "cancelled",
               "lost")


class TaskGpuWire(Struct, frozen=True):
    """db.tasks.TaskGpu: one GPU a task was allocated."""

    allocation_id: int
    gpu_id: int
    host: str
    idx: int
    uuid: str | None
    active: bool


class TaskWire(Struct, frozen=True):
    """db.tasks.TaskRow: a stored task (times epoch seconds)."""

    id: int
    name: str
    script: str
    args: tuple[str, ...]
    host_id: int | None
    host: str | None
    state: str
    exit_code: int | None
    gpus_requested: int
    constraints: dict[str, Any]
    priority: int
    owner: str
    remote_dir: str | None
    remote_pid: int | None
    submitted_at: int
    started_at: int | None
    ended_at: int | None
    error: str | None
    gpu_seconds: float | None
    peak_memory_bytes: int | None
    gpus: tuple[TaskGpuWire, ...] = ()
    timed_out: bool = False
    group_id: int | None = None
    group_kind: str | None = None
    group_index: int | None = None


class TaskList(Struct, frozen=True):
    """`GET /v1/tasks`."""

    tasks: tuple[TaskWire, ...]


class TaskQuery(Struct, frozen=True, forbid_unknown_fields=True):
    """Query of `GET /v1/tasks`: states (repeatable), the newest `limit`, submitted `since`."""

    states: tuple[str, ...] = ()
    limit: Count | None = None
    since: EpochIntS | None = None
    group: Id | None = None  # only this gang's or array's members (by rank or index)


class CancelRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """Body of `POST /v1/tasks/{id}/cancel` (may be empty: the default grace)."""

    grace_s: DurationS = field(default=10.0)


def task_to_wire(row: TaskRow) -> TaskWire:
    """One stored task as its wire struct."""
    return to_wire(row, TaskWire)


def task_from_wire(wire: TaskWire) -> TaskRow:
    """The wire struct as the TaskRow `Fleet.task()` returns."""
    from fleet.records import TaskRow

    return from_wire(wire, TaskRow)


def tasks_to_wire(rows: list[TaskRow]) -> TaskList:
    """Tasks as the reply."""
    return TaskList(tuple(task_to_wire(row) for row in rows))


def tasks_from_wire(reply: TaskList) -> list[TaskRow]:
    """The reply as TaskRows."""
    return [task_from_wire(task) for task in reply.tasks]


class ReconcileResult(Struct, frozen=True):
    """fleet.dispatch.reconcile.ReconcileReport: (task id, new state) pairs, hosts not reached.

    `ended` is pairs, not a map: JSON keys are strings, and the deterministic encoder sorts
    only string keys.
    """

    ended: tuple[tuple[int, str], ...] = ()
    still_running: list[int] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
