"""Fair share: among equal priorities the owner with the fewest recent GPU-hours claims first,
FIFO within an owner: the decay, the order, and real waiting dispatches (the queue's view of the
database, with a deterministic clock: tests/db/test_fair_share_queue.py)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

import pytest
from sqlalchemy import select

from db.engine import open_database
from db.models import Allocation, Gpu
from fleet.dispatch.fair_share import decayed_gpu_hours, queue_order
from tests.dispatch.conftest import DispatchLab
from tests.dispatch.test_dispatch_cli import _script, _tasks

NOW = 1_800_000_000.0
DAY = 86400
WEEK = 7 * DAY
LabFactory = Callable[..., Awaitable[DispatchLab]]


def test_decay_halves_a_gpu_hour_per_half_life() -> None:
    recent = decayed_gpu_hours([("ann", int(NOW) - 3600, int(NOW))], NOW, WEEK)
    assert recent["ann"] == pytest.approx(1.0, rel=5e-3)
    old = decayed_gpu_hours([("ann", int(NOW) - WEEK - 3600, int(NOW) - WEEK)], NOW, WEEK)
    assert old["ann"] == pytest.approx(0.5, rel=5e-3)
    running = decayed_gpu_hours([("bob", int(NOW) - 7200, None)], NOW, WEEK)  # still held
    assert running["bob"] == pytest.approx(2.0, rel=5e-3)
    assert decayed_gpu_hours([("cy", int(NOW), int(NOW) - 5)], NOW, WEEK) == {}
    assert math.isclose(sum(decayed_gpu_hours([], NOW, WEEK).values()), 0)


def test_fifo_within_one_owner_and_priority_before_fairness() -> None:
    from db.task_runs import QueuedTask

    tasks = [QueuedTask(1, "ann", 0, 100, None), QueuedTask(2, "bob", 0, 101, None),
             QueuedTask(3, "ann", 0, 102, None), QueuedTask(4, "ann", 1, 103, None)]
    ordered = [task.id for task in queue_order(tasks, {"ann": 3.0, "bob": 1.0})]
    assert ordered == [4, 2, 1, 3]
    assert [task.id for task in queue_order(tasks, None)] == [4, 1, 2, 3]


@pytest.mark.slow
async def test_waiting_dispatches_start_in_fair_share_order(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    runs = lab.cli.home / "runs.txt"  # one line per task as it starts: the start order
    script = _script(lab, "quick.py", "import os, sys, time\n"
                     "with open(sys.argv[1], 'a') as runs:\n"
                     "    runs.write(os.environ['FLEET_TASK_ID'] + '\\n')\n"
                     "time.sleep(0.3)\n")
    held = await lab.cli.run("--json", "reserve", "--gpus", "1", env={"FLEET_OWNER": "carol"})
    assert held.returncode == 0, held.stderr
    # ann already used the GPU for 10 h yesterday
    database = open_database(lab.cli.db_url or str(lab.cli.db_path))
    try:
        with database.session() as session:
            gpu_id = session.scalars(select(Gpu.id)).one()
            session.add(Allocation(gpu_id=gpu_id, kind="task", owner="ann",
                                   created_at=int(time.time()) - DAY - 10 * 3600,
                                   released_at=int(time.time()) - DAY))
    finally:
        database.close()
    ann = await lab.spawn("dispatch", "--wait", "--queue-timeout", "2m", str(script),
                          str(runs), env={"FLEET_OWNER": "ann"})
    await _until_queued(lab, 1)
    bob = await lab.spawn("dispatch", "--wait", "--queue-timeout", "2m", str(script),
                          str(runs), env={"FLEET_OWNER": "bob"})
    await _until_queued(lab, 2)
    released = await lab.cli.run("release", "--all-mine", env={"FLEET_OWNER": "carol"})
    assert released.returncode == 0, released.stderr
    for process in (ann, bob):
        _, stderr = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0, stderr.decode()
    owners = {str(task["id"]): task["owner"] for task in await _tasks(lab)}
    order = [owners[line] for line in runs.read_text().split()]
    assert order == ["bob", "ann"]  # ann came first, bob had used nothing


async def _until_queued(lab: DispatchLab, count: int) -> None:
    deadline = time.monotonic() + 60
    while sum(task.state == "queued" for task in await lab.cli.recorded_tasks()) < count:
        assert time.monotonic() < deadline, f"{count} tasks not queued within 60 s"
        await asyncio.sleep(0.2)
