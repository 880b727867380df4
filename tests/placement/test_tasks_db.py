"""Task rows: creation, compare-and-set state changes, finishing releases GPUs, listing order.

Reads go through `Database.reader()` (the stdlib driver on SQLite, an engine connection on
PostgreSQL) and, inside a write transaction, through the session (`SessionReader`).
"""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from db.allocations import active_gpu_ids, claim_gpus
from db.engine import Database
from db.sql import SessionReader
from db.task_reads import get_task, group_members, list_tasks
from db.tasks import create_task, finish_task, update_task
from tests.placement.conftest import Seeded


def _task(database: Database, name: str = "train", *, now: int = 100, priority: int = 0) -> int:
    with database.session() as session:
        return create_task(session, name=name, script="/home/ann/train.py",
                           args=["--lr", "0.1", "a b;$(x)"], gpus_requested=2, owner="ann",
                           now=now, constraints={"min_free_mem": 1 << 30}, priority=priority)


def test_create_and_read_back(database: Database) -> None:
    task_id = _task(database)
    with database.reader() as reader:
        task = get_task(reader, task_id)
        assert get_task(reader, task_id + 100) is None
    assert task is not None
    assert (task.name, task.state, task.owner, task.gpus_requested) == ("train", "queued", "ann", 2)
    assert task.args == ("--lr", "0.1", "a b;$(x)")
    assert task.constraints == {"min_free_mem": 1 << 30}
    assert task.host is None and task.gpus == () and not task.is_final


def test_compare_and_set_lets_one_writer_win(database: Database, seeded: Seeded) -> None:
    task_id = _task(database)
    with database.session() as session:
        assert update_task(session, task_id, from_states=["queued"], state="running",
                           host_id=seeded.host_ids["alpha"], remote_pid=4242, started_at=110)
        # A second process that still believes the task is queued loses.
        assert not update_task(session, task_id, from_states=["queued"], state="cancelled")
        task = get_task(SessionReader(session), task_id)  # the session's own, uncommitted
    assert task is not None
    assert (task.state, task.host, task.remote_pid, task.started_at) == (
        "running", "alpha", 4242, 110)


def test_update_rejects_unknown_columns_states_and_ids(database: Database) -> None:
    task_id = _task(database)
    with database.session() as session:
        with pytest.raises(ValueError, match="cannot set"):
            update_task(session, task_id, owner="mallory")
        with pytest.raises(ValueError, match="unknown task state"):
            update_task(session, task_id, state="exploded")
        with pytest.raises(LookupError, match="no task with id 999"):
            update_task(session, 999, state="running")
        with pytest.raises(ValueError, match="not a final"):
            finish_task(session, task_id, state="running", now=1)


def test_finish_releases_the_tasks_gpus_once(database: Database, seeded: Seeded) -> None:
    task_id = _task(database)
    a0, a1 = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("alpha", 1)]
    with database.session() as session:
        claim_gpus(session, [a1, a0], kind="task", owner="ann", now=105, task_id=task_id)
        update_task(session, task_id, state="running", host_id=seeded.host_ids["alpha"])
    with database.session() as session:
        assert finish_task(session, task_id, state="succeeded", now=200, exit_code=0,
                           gpu_seconds=190.0, peak_memory_bytes=5 << 30)
        assert not finish_task(session, task_id, state="lost", now=300)
    with database.session() as session:
        assert active_gpu_ids(session) == set()
    with database.reader() as reader:
        task = get_task(reader, task_id)
    assert task is not None
    assert (task.state, task.exit_code, task.ended_at, task.gpu_seconds) == (
        "succeeded", 0, 200, 190.0)
    assert [(gpu.host, gpu.idx, gpu.uuid, gpu.active) for gpu in task.gpus] == [
        ("alpha", 0, "GPU-alpha-0", False), ("alpha", 1, "GPU-alpha-1", False)]


def test_listing_filters(database: Database, seeded: Seeded) -> None:
    first = _task(database, "first", now=10)
    urgent = _task(database, "urgent", now=20, priority=5)
    third = _task(database, "third", now=30)
    done = _task(database, "done", now=40)
    with database.session() as session:
        update_task(session, urgent, host_id=seeded.host_ids["beta"])
        finish_task(session, done, state="failed", now=50, exit_code=3)
    with database.reader() as reader:
        assert [t.id for t in list_tasks(reader)] == [first, urgent, third, done]
        assert [t.id for t in list_tasks(reader, limit=2)] == [third, done]
        assert [t.id for t in list_tasks(reader, states=["failed"])] == [done]
        assert [t.id for t in list_tasks(reader, states=["queued", "failed"], limit=3)] == [
            urgent, third, done]
        assert list_tasks(reader, states=[]) == []
        assert [t.id for t in list_tasks(reader, since=25)] == [third, done]
        assert [t.id for t in list_tasks(reader, host="beta")] == [urgent]
        assert [t.id for t in list_tasks(reader, owner="ann", since=15, limit=1)] == [done]
        assert list_tasks(reader, owner="bob") == []
        with pytest.raises(ValueError, match="unknown task state"):
            list_tasks(reader, states=["bogus"])


def test_group_members_by_index_with_their_gpus(database: Database, seeded: Seeded) -> None:
    def member(session: Session, index: int, group_id: int | None) -> int:
        return create_task(session, name=f"sweep[{index}]", script="sweep.py", args=[str(index)],
                           gpus_requested=1, owner="ann", now=100, group_kind="array",
                           group_index=index, group_id=group_id)

    with database.session() as session:
        first = member(session, 0, None)
        third, second = member(session, 2, first), member(session, 1, first)
        claim_gpus(session, [seeded.gpu_ids[("beta", 0)]], kind="task", owner="ann", now=101,
                   task_id=second)
    with database.reader() as reader:
        members = group_members(reader, first)
        assert group_members(reader, first + 100) == []
    assert [(m.id, m.group_index, m.group_id) for m in members] == [
        (first, 0, first), (second, 1, first), (third, 2, first)]
    assert [[(gpu.host, gpu.idx, gpu.active) for gpu in m.gpus] for m in members] == [
        [], [("beta", 0, True)], []]
