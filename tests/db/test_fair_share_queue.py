"""The queue's order as a waiter sees it in the database, with a deterministic clock, on both
backends: fair share among equal priorities, priority first, FIFO when fair share is off."""

from __future__ import annotations

import pytest

from db.engine import Database
from db.models import Allocation
from db.tasks import create_task, update_task
from fleet.context import FleetContext
from fleet.dispatch.fair_share import QueueSettings
from fleet.dispatch.queue import _place_in_queue
from fleet.placement.request import PlacementRequest
from fleet.ssh.options import SshOptions
from tests.db.conftest import SeededFleet

NOW = 1_800_000_000.0
DAY = 86400


def _queued(session: object, owner: str, submitted: int, priority: int = 0) -> int:
    return create_task(session, name="t", script="t.py", args=[], gpus_requested=1,  # type: ignore[arg-type]
                       owner=owner, now=submitted, priority=priority,
                       constraints={"placement": PlacementRequest(gpus=1).to_dict()})


def _context(database: Database) -> FleetContext:
    return FleetContext(database, lambda: pytest.fail("inventory read"), SshOptions(),
                        clock=lambda: NOW)


async def test_the_owner_with_fewer_recent_gpu_hours_goes_first(database: Database,
                                                                seeded: SeededFleet) -> None:
    gpu = seeded.gpu_ids[("alpha", 0)]
    with database.session() as session:
        # ann held 10 GPU-hours this week (two GPUs, 5 h, two days ago); bob nothing
        for gpu_id in (gpu, seeded.gpu_ids[("alpha", 1)]):
            session.add(Allocation(gpu_id=gpu_id, kind="task", owner="ann",
                                   created_at=int(NOW) - 2 * DAY - 5 * 3600,
                                   released_at=int(NOW) - 2 * DAY))
        ann_first = _queued(session, "ann", int(NOW) - 60)
        ann_second = _queued(session, "ann", int(NOW) - 50)
        bob = _queued(session, "bob", int(NOW) - 10)
        urgent = _queued(session, "ann", int(NOW) - 5, priority=5)
    context = _context(database)
    fair = QueueSettings()
    ahead = {task: len(_place_in_queue(context, task, fair).ahead)
             for task in (urgent, bob, ann_first, ann_second)}
    assert ahead == {urgent: 0, bob: 1, ann_first: 2, ann_second: 3}
    why = _place_in_queue(context, ann_first, fair).why
    assert why.startswith("position 3 of 4; fair share (recent GPU-h):")
    assert "bob 0.0" in why and "ann 8." in why  # 10 h two days ago, decayed
    fifo = QueueSettings(fair_share=False)
    assert len(_place_in_queue(context, bob, fifo).ahead) == 3  # after urgent, ann, ann


async def test_a_task_ahead_that_is_claiming_stays_ahead(database: Database) -> None:
    # While the first task is between `queued → placing` and its claim's commit, the second
    # must still see it ahead: read as free GPUs and nobody ahead, it could claim them first.
    with database.session() as session:
        first = _queued(session, "ann", int(NOW) - 20)
        second = _queued(session, "bob", int(NOW) - 10)
        ran = _queued(session, "cy", int(NOW) - 30)
        update_task(session, first, state="placing")
        update_task(session, ran, state="running")
    fifo = QueueSettings(fair_share=False)
    assert len(_place_in_queue(_context(database), second, fifo).ahead) == 1
    assert len(_place_in_queue(_context(database), first, fifo).ahead) == 0
