"""Folding a gang's or array's members into the one row `fleet tasks` shows (pure)."""

from __future__ import annotations

from dataclasses import replace

from db.rows import TaskRow
from fleet.render.task_groups import fold_group, fold_rows, group_json


def _row(task_id: int, index: int, state: str, *, kind: str = "gang", exit_code: int | None = None,
         ended_at: int | None = None, gpu_seconds: float | None = None,
         host: str | None = None) -> TaskRow:
    return TaskRow(id=task_id, name="train.sh", script="train.sh", args=(), host_id=None,
                   host=host, state=state, exit_code=exit_code, gpus_requested=2,
                   constraints={}, priority=0, owner="ann", remote_dir=None, remote_pid=None,
                   submitted_at=100, started_at=110, ended_at=ended_at, error=f"e{task_id}",
                   gpu_seconds=gpu_seconds, peak_memory_bytes=None, group_id=10,
                   group_kind=kind, group_index=index)


def test_a_failed_gang_shows_the_failing_node_not_its_cancelled_sibling() -> None:
    members = [_row(10, 0, "cancelled", ended_at=205, gpu_seconds=20.0, host="a"),
               _row(11, 1, "failed", exit_code=3, ended_at=200, gpu_seconds=10.0, host="b")]
    folded = fold_group(members)
    assert (folded.id, folded.state, folded.exit_code, folded.error) == (10, "failed", 3, "e11")
    assert folded.name == "train.sh [gang 2×2]" and folded.host == "a,b"
    assert folded.gpu_seconds == 30.0 and folded.gpus_requested == 4 and folded.ended_at == 205


def test_a_gang_ended_with_its_rank_0_succeeded() -> None:
    members = [_row(10, 0, "succeeded", exit_code=0, ended_at=200),
               _row(11, 1, "cancelled", ended_at=212)]
    assert fold_group(members).state == "succeeded"
    running = [_row(10, 0, "running"), _row(11, 1, "starting")]
    assert (fold_group(running).state, fold_group(running).ended_at) == ("running", None)


def test_an_array_counts_states_and_takes_its_lowest_failed_index() -> None:
    outcomes = [("succeeded", 0), ("failed", 4), ("failed", 2), ("queued", None)]
    members = [_row(20 + i, i, state, kind="array", exit_code=code, ended_at=300 - i)
               for i, (state, code) in enumerate(outcomes)]
    folded = fold_group(members)
    assert folded.state == "queued" and folded.exit_code is None
    assert folded.error == "2 failed, 1 queued, 1 succeeded"
    done = [m for m in members if m.state != "queued"]
    assert fold_group(done).exit_code == 4  # index 1's, though index 2 ended first
    assert group_json(done)["indices"] == [0, 1, 2]


def test_fold_rows_keeps_lone_tasks_and_puts_a_group_at_its_first_member() -> None:
    lone = replace(_row(5, 0, "succeeded"), group_id=None, group_kind=None, group_index=None)
    members = [_row(10, 0, "succeeded"), _row(11, 1, "succeeded")]
    rows = fold_rows([lone, *members, replace(lone, id=12)], {10: members})
    assert [(row.id, row.name) for row in rows] == [
        (5, "train.sh"), (10, "train.sh [gang 2×2]"), (12, "train.sh")]
