"""Task rows: creating tasks and moving them between states (compare-and-set).

Times are integer epoch seconds. `finish_task` ends a task and releases its allocations in the
same transaction, so a final task never holds a GPU. Reading tasks back is db.task_reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db.allocations import release_allocations
from db.models import Task
from db.task_reads import check_state
from db.types import ACTIVE_TASK_STATES, FINAL_TASK_STATES, TaskState

GroupKind = Literal["gang", "array"]
GROUP_KINDS: tuple[GroupKind, ...] = ("gang", "array")


# Columns update_task may change; identity and submission facts are fixed at creation.
UPDATABLE_TASK_FIELDS = frozenset({
    "state", "host_id", "exit_code", "remote_dir", "remote_pid", "started_at", "ended_at",
    "error", "gpu_seconds", "peak_memory_bytes", "priority", "constraints", "timed_out",
})


def create_task(
    session: Session,
    *,
    name: str,
    script: str,
    args: Sequence[str],
    gpus_requested: int,
    owner: str,
    now: int,
    constraints: Mapping[str, Any] | None = None,
    priority: int = 0,
    state: TaskState = "queued",
    group_kind: GroupKind | None = None,
    group_index: int | None = None,
    group_id: int | None = None,
) -> int:
    """Store a new task and return its id.

    `constraints` is any JSON-serialisable mapping (the placement request and run options).
    A member of a gang or array names its `group_kind` and `group_index`; the group's first
    member leaves `group_id` None and becomes the group (its own id), the others pass it.
    Raises ValueError for an unknown state or group kind, or a negative GPU count.
    """
    check_state(state)
    if gpus_requested < 0:
        raise ValueError(f"a task cannot request {gpus_requested} GPUs")
    if group_kind is not None and group_kind not in GROUP_KINDS:
        raise ValueError(f"unknown task group kind {group_kind!r}; expected one of {GROUP_KINDS}")
    task = Task(
        name=name,
        script=script,
        args_json=json.dumps(list(args)),
        host_id=None,
        state=state,
        exit_code=None,
        gpus_requested=gpus_requested,
        constraints_json=json.dumps(dict(constraints or {}), sort_keys=True),
        priority=priority,
        owner=owner,
        submitted_at=now,
        group_kind=group_kind,
        group_index=group_index,
        group_id=group_id,
    )
    session.add(task)
    session.flush()
    if group_kind is not None and group_id is None:
        task.group_id = task.id
        session.flush()
    return task.id


def set_group_checked(session: Session, group_id: int, checked_at: int) -> None:
    """Set checked_at of every queued member of a group (0: no waiter has it yet)."""
    session.execute(update(Task).where(Task.group_id == group_id, Task.state == "queued")
                    .values(checked_at=checked_at))


def update_task(
    session: Session,
    task_id: int,
    *,
    from_states: Sequence[str] | None = None,
    unlaunched_only: bool = False,
    **changes: Any,
) -> bool:
    """Set the given columns of one task; returns False when `from_states` did not match.

    With `from_states`, the update is a single conditional UPDATE (compare-and-set): it applies
    only while the task is in one of those states, so two processes racing to move a task
    (a dispatcher finishing it, the reconciler marking it lost) cannot both win. With
    `unlaunched_only` it also applies only while the task has no task directory on its host
    (its dispatcher has not yet reached the host, so nothing there needs stopping).
    Accepted columns: UPDATABLE_TASK_FIELDS (`constraints` takes a mapping).
    Raises LookupError for an unknown task id, ValueError for an unknown column or state.
    """
    unknown = set(changes) - UPDATABLE_TASK_FIELDS
    if unknown:
        raise ValueError(f"update_task cannot set {sorted(unknown)}")
    values = dict(changes)
    if "state" in values:
        check_state(values["state"])
    if "constraints" in values:
        values["constraints_json"] = json.dumps(dict(values.pop("constraints")), sort_keys=True)
    for state in from_states or ():
        check_state(state)
    if not values:
        current = _state(session, task_id)
        if current is None:
            raise LookupError(f"no task with id {task_id}")
        return from_states is None or current in from_states
    statement = update(Task).where(Task.id == task_id)
    if from_states is not None:
        statement = statement.where(Task.state.in_(list(from_states)))
    if unlaunched_only:
        statement = statement.where(Task.remote_dir.is_(None))
    result = session.execute(statement.values(**values))
    matched = int(result.rowcount) > 0  # type: ignore[attr-defined]
    if not matched and _state(session, task_id) is None:
        raise LookupError(f"no task with id {task_id}")
    return matched


def finish_task(
    session: Session,
    task_id: int,
    *,
    state: TaskState,
    now: int,
    exit_code: int | None = None,
    error: str | None = None,
    gpu_seconds: float | None = None,
    peak_memory_bytes: int | None = None,
    from_states: Sequence[str] = ACTIVE_TASK_STATES,
    released_at: int | None = None,
    timed_out: bool = False,
    unlaunched_only: bool = False,
) -> bool:
    """End a task (a final state, ended_at, exit code) and release its active allocations.

    `now` is the task's end (it may come from the host's clock); `released_at`, default `now`,
    is when its GPUs are given back — callers pass the controller's clock at release, so the
    allocation never appears to end after the next holder's claim began.

    Compare-and-set on `from_states`: returns False, changing nothing, when the task has
    already left them (e.g. it was finished by another process), or with `unlaunched_only` when
    its dispatcher has recorded a task directory on the host. The allocations are released
    with the final state as the reason. Raises ValueError when `state` is not final.
    """
    if state not in FINAL_TASK_STATES:
        raise ValueError(f"{state!r} is not a final task state {FINAL_TASK_STATES}")
    changes: dict[str, Any] = {"state": state, "ended_at": now, "exit_code": exit_code,
                               "timed_out": timed_out}
    if error is not None:
        changes["error"] = error
    if gpu_seconds is not None:
        changes["gpu_seconds"] = gpu_seconds
    if peak_memory_bytes is not None:
        changes["peak_memory_bytes"] = peak_memory_bytes
    if not update_task(session, task_id, from_states=from_states,
                       unlaunched_only=unlaunched_only, **changes):
        return False
    release_allocations(session, now=now if released_at is None else released_at,
                        reason=f"task {state}", task_id=task_id)
    return True


def _state(session: Session, task_id: int) -> str | None:
    return session.scalar(select(Task.state).where(Task.id == task_id))
