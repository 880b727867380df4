"""A claim for a task that has ended makes nothing, and an end that races a claim releases
what the claim made: `fleet cancel` while a task is placed leaves no GPU held."""

from __future__ import annotations

import threading
import time

import pytest

from db.allocations import active_gpu_ids, claim_gpus
from db.engine import Database
from db.errors import TaskNotActive
from db.tasks import create_task, finish_task
from tests.db.conftest import SeededFleet


def _task(database: Database, state: str = "placing") -> int:
    with database.session() as session:
        return create_task(session, name="t", script="t.py", args=(), gpus_requested=1,
                           owner="ann", now=1, state=state)  # type: ignore[arg-type]


def test_a_claim_for_an_ended_task_is_refused_and_makes_nothing(
        database: Database, seeded: SeededFleet) -> None:
    gpu = seeded.gpu_ids[("alpha", 0)]
    task_id = _task(database)
    with database.session() as session:
        assert finish_task(session, task_id, state="cancelled", now=2)
    with pytest.raises(TaskNotActive, match=f"task {task_id} has already ended"), \
            database.session() as session:
        claim_gpus(session, [gpu], kind="task", owner="ann", now=3, task_id=task_id)
    with database.session() as session:
        assert active_gpu_ids(session) == set()
        claim_gpus(session, [gpu], kind="task", owner="ann", now=4, task_id=_task(database))
        assert active_gpu_ids(session) == {gpu}


def test_an_end_during_the_claim_waits_for_it_and_releases_its_gpus(
        database: Database, seeded: SeededFleet) -> None:
    gpu = seeded.gpu_ids[("alpha", 0)]
    task_id = _task(database)
    claimed = threading.Event()
    ended: list[bool] = []

    def end() -> None:
        assert claimed.wait(10)
        with database.session() as session:
            ended.append(finish_task(session, task_id, state="cancelled", now=5))

    ender = threading.Thread(target=end)
    ender.start()
    try:
        with database.session() as session:
            claim_gpus(session, [gpu], kind="task", owner="ann", now=4, task_id=task_id)
            claimed.set()
            time.sleep(0.5)  # the end runs now, against this open claim
    finally:
        claimed.set()
        ender.join(30)
    assert ended == [True]
    with database.session() as session:
        assert active_gpu_ids(session) == set()  # the end released the claim's GPU
