"""A finished task's GPUs are released at the controller's release time, not the host's end time."""

from __future__ import annotations

from db.allocations import claim_gpus, list_allocations
from db.engine import Database
from db.tasks import create_task, finish_task, update_task
from tests.db.conftest import SeededFleet


def test_release_time_is_the_given_controller_time(database: Database,
                                                   seeded: SeededFleet) -> None:
    gpu_id = seeded.gpu_ids[("alpha", 0)]
    with database.session() as session:
        task_id = create_task(session, name="t", script="t.py", args=[], gpus_requested=1,
                              owner="me", now=1000)
        claim_gpus(session, [gpu_id], kind="task", owner="me", now=1000, task_id=task_id)
        update_task(session, task_id, state="running", started_at=1000)
    with database.session() as session:
        # The host says the task ended at 1012 (its clock, rounded); the controller released at
        # 1011, and the next claim (at 1011) must not start before this release.
        assert finish_task(session, task_id, state="succeeded", now=1012, exit_code=0,
                           released_at=1011)
        claim_gpus(session, [gpu_id], kind="reservation", owner="next", now=1011)
    with database.session() as session:
        first, second = sorted(list_allocations(session, active_only=False), key=lambda a: a.id)
    assert first.released_at == 1011
    assert second.created_at >= first.released_at
