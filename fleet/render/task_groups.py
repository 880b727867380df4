"""Gangs and arrays as `fleet tasks` shows them: one row per group, folded from its members.

A gang's state is its members' while they are alike; once any ended badly it is the first
such member's (a cancelled sibling is the consequence, not the cause), and a gang whose rank 0
succeeded and whose other nodes were only cancelled after it succeeded. An array's state is the
most advanced of its members' (running, then starting, placing, queued), and when all ended,
`succeeded` only if every member did; the row's error column counts members per state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleet.records import TaskRow

# The active states, most advanced first (db.tasks.ACTIVE_TASK_STATES, without loading db).
_ACTIVE_ORDER = ("running", "starting", "placing", "queued")


def state_counts(members: Sequence[TaskRow]) -> dict[str, int]:
    """How many members are in each state."""
    counts: dict[str, int] = {}
    for member in members:
        counts[member.state] = counts.get(member.state, 0) + 1
    return counts


def _counts_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{count} {state}" for state, count in sorted(counts.items()))


def _first_failure(members: Sequence[TaskRow]) -> TaskRow | None:
    bad = [m for m in members if m.is_final and m.state != "succeeded"]
    causes = [m for m in bad if m.state != "cancelled"]
    if not causes and members[0].group_kind == "gang" and members[0].state == "succeeded":
        return None  # the others were ended with rank 0
    causes = causes or bad
    if members[0].group_kind == "array":  # as `fleet dispatch --array` exits: lowest index
        return min(causes, key=lambda m: m.group_index or 0, default=None)
    return min(causes, key=lambda m: (m.ended_at or 0, m.group_index or 0), default=None)


def fold_group(members: Sequence[TaskRow]) -> TaskRow:
    """One row for a gang or array (its members by rank or index; the first is the group)."""
    head = members[0]
    active = [m.state for m in members if m.state in _ACTIVE_ORDER]
    failure = _first_failure(members)
    counts = state_counts(members)
    state: str
    if active:
        state = next(s for s in _ACTIVE_ORDER if s in active)
    elif failure is not None:
        state = failure.state
    else:
        state = "succeeded"
    seconds = [m.gpu_seconds for m in members if m.gpu_seconds is not None]
    started = [m.started_at for m in members if m.started_at is not None]
    hosts = list(dict.fromkeys(m.host for m in members if m.host))
    error = failure.error if failure is not None and head.group_kind == "gang" else None
    if head.group_kind == "array":
        error = _counts_text(counts)
    shape = (f"gang {len(members)}×{head.gpus_requested}" if head.group_kind == "gang"
             else f"array {len(members)}")
    return replace(
        head, name=f"{head.name} [{shape}]", state=state, host=",".join(hosts) or None,
        gpus=tuple(gpu for m in members for gpu in m.gpus),
        gpus_requested=sum(m.gpus_requested for m in members),
        exit_code=None if active else (failure.exit_code if failure is not None else 0),
        started_at=min(started) if started else None,
        ended_at=None if active else max((m.ended_at or 0) for m in members),
        gpu_seconds=sum(seconds) if seconds else None,
        peak_memory_bytes=max((m.peak_memory_bytes or 0 for m in members), default=None),
        error=error, timed_out=any(m.timed_out for m in members))


def fold_rows(rows: Sequence[TaskRow], members: Mapping[int, Sequence[TaskRow]]
              ) -> list[TaskRow]:
    """`rows` with each group's members replaced by its folded row (at its first member's
    place); `members` maps a group id to all its members."""
    folded: list[TaskRow] = []
    seen: set[int] = set()
    for row in rows:
        if row.group_id is None or row.group_id not in members:
            folded.append(row)
        elif row.group_id not in seen:
            seen.add(row.group_id)
            folded.append(fold_group(members[row.group_id]))
    return folded


def group_json(members: Sequence[TaskRow]) -> dict[str, Any]:
    """What `fleet tasks --json` adds to a folded row: kind, size, states, member ids."""
    head = members[0]
    data: dict[str, Any] = {"kind": head.group_kind, "size": len(members),
                            "states": state_counts(members),
                            "members": [m.id for m in members]}
    if head.group_kind == "array":
        data["indices"] = [m.group_index for m in members]
    else:
        data["nodes"] = len(members)
    return data
