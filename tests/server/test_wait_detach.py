"""`fleet dispatch --wait --detach` through a server returns once the task is queued (or runs),
and the server starts it when its GPUs free up; in local mode it says that it waits here."""

from __future__ import annotations

import asyncio
import time

from tests.dispatch.test_dispatch_cli import SLEEPER
from tests.server.conftest import ServeLabFactory
from tests.server.test_dispatch_server import _script, _tasks, _wait_state


async def test_wait_detach_returns_once_queued_and_the_server_starts_it(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    await lab.serve()
    held = await lab.run("--json", "reserve", "--gpus", "1")
    assert held.returncode == 0, held.stderr
    (allocation,) = held.json()["allocation_ids"]
    script = _script(lab, "sleep.py", SLEEPER)

    began = time.monotonic()
    queued = await lab.run("--json", "dispatch", "--wait", "--detach", str(script), "0.2", "5")
    assert queued.returncode == 0, queued.stderr
    assert time.monotonic() - began < 30  # it used to wait here until the GPU was released
    answer = queued.json()
    assert (answer["state"], answer["host"]) == ("queued", None), answer
    assert f"task {answer['task_id']} is queued" in queued.stderr
    assert f"task {answer['task_id']} queued (position 1 of 1)" in queued.stderr
    (row,) = await _tasks(lab)
    assert (row["id"], row["state"]) == (answer["task_id"], "queued")

    released = await lab.run("release", str(allocation))
    assert released.returncode == 0, released.stderr
    ended = await _wait_state(lab, answer["task_id"], {"succeeded", "failed", "cancelled"}, 30)
    assert (ended["state"], ended["exit_code"]) == ("failed", 5), ended

    # When the GPUs are free it starts at once, and says where (once the server's live view
    # has seen the last task's GPU free: a dry run places it).
    deadline = time.monotonic() + 30
    while not (await lab.run("--json", "dispatch", "--dry-run", str(script))).json()["placed"]:
        assert time.monotonic() < deadline, "the server never saw the GPU free"
        await asyncio.sleep(0.2)
    started = await lab.run("--json", "dispatch", "--wait", "--detach", str(script), "0", "0")
    assert started.returncode == 0, started.stderr
    assert (started.json()["state"], started.json()["host"]) == ("running", "gpu1")
    assert "started on gpu1" in started.stderr


async def test_a_task_queued_by_wait_detach_is_cancelled_in_the_server_queue(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    await lab.serve()
    held = await lab.run("--json", "reserve", "--gpus", "1")
    assert held.returncode == 0, held.stderr
    script = _script(lab, "sleep.py", SLEEPER)
    queued = await lab.run("--json", "dispatch", "--wait", "--detach", str(script), "0")
    assert queued.returncode == 0, queued.stderr
    task_id = queued.json()["task_id"]
    cancelled = await lab.run("cancel", str(task_id))
    assert cancelled.returncode == 0, cancelled.stderr
    row = await _wait_state(lab, task_id, {"cancelled"})
    assert row["state"] == "cancelled", row
    allocations = (await lab.run("--json", "allocations")).json()["allocations"]
    assert [allocation["kind"] for allocation in allocations] == ["reservation"]


async def test_a_task_that_can_never_fit_is_refused_not_queued_for_a_day(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    await lab.serve()
    script = _script(lab, "sleep.py", SLEEPER)
    for mode in ({}, {"FLEET_SERVER": "local"}):
        refused = await lab.run("dispatch", "--wait", "--detach", "--gpus", "2", str(script),
                                "0", env=mode)
        assert refused.returncode == 7, (mode, refused.stdout + refused.stderr)
        assert "can never start on these hosts, even with every GPU free" in refused.stderr
    assert [(t["state"], "can never start" in t["error"]) for t in await _tasks(lab)] == \
        [("failed", True), ("failed", True)]
