"""Stops that come from elsewhere: a `fleet dispatch --wait` whose queued task is cancelled
stops waiting; Ctrl-C on `fleet logs -f` detaches (130) and leaves the task running."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable

from tests.dispatch.conftest import DispatchLab
from tests.dispatch.test_dispatch_cli import _script, _tasks

LabFactory = Callable[..., Awaitable[DispatchLab]]


async def test_a_waiter_whose_task_is_cancelled_exits_130(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)  # one host, one GPU
    hold = _script(lab, "hold.py", "import time\ntime.sleep(120)\n")
    first = await lab.cli.run("--json", "dispatch", "--detach", str(hold))
    assert first.returncode == 0, first.stderr
    waiter = await lab.spawn("dispatch", "--wait", "--queue-timeout", "5m", str(hold))
    try:
        queued: list[dict[str, object]] = []
        for _ in range(100):  # until the waiter's task is recorded as queued (≤ 20 s)
            queued = [task for task in await _tasks(lab) if task["state"] == "queued"]
            if queued:
                break
            await asyncio.sleep(0.2)
        assert len(queued) == 1, await _tasks(lab)
        cancelled = await lab.cli.run("cancel", str(queued[0]["id"]))
        assert cancelled.returncode == 0, cancelled.stderr
        _, stderr = await asyncio.wait_for(waiter.communicate(), 60)
        assert waiter.returncode == 130, stderr.decode()
        assert b"left the queue while it waited: cancelled" in stderr
    finally:
        if waiter.returncode is None:
            waiter.kill()
            await waiter.wait()
        lab.kill_tasks()


async def test_ctrl_c_on_logs_f_detaches_with_130(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    hold = _script(lab, "talk.py", "import time\nprint('up', flush=True)\ntime.sleep(120)\n")
    started = await lab.cli.run("--json", "dispatch", "--detach", str(hold))
    assert started.returncode == 0, started.stderr
    task_id = str((await _tasks(lab))[0]["id"])
    follower = await lab.spawn("logs", "-f", task_id)
    try:
        assert follower.stdout is not None
        line = await asyncio.wait_for(follower.stdout.readline(), 30)
        assert b"up" in line
        follower.send_signal(signal.SIGINT)
        await asyncio.wait_for(follower.wait(), 30)
        assert follower.returncode == 130
        assert (await _tasks(lab))[0]["state"] == "running"  # detached, not cancelled
    finally:
        if follower.returncode is None:
            follower.kill()
            await follower.wait()
        lab.kill_tasks()


async def test_wait_detach_in_local_mode_says_it_waits_here(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    held = await lab.cli.run("--json", "reserve", "--gpus", "1")
    assert held.returncode == 0, held.stderr
    (allocation,) = held.json()["allocation_ids"]
    quick = _script(lab, "quick.py", "print('ok')\n")
    waiter = await lab.spawn("dispatch", "--wait", "--detach", str(quick))
    try:
        assert waiter.stderr is not None
        first = await asyncio.wait_for(waiter.stderr.readline(), 30)
        assert first.startswith(b"fleet: no fleet serve here: this waits for the GPUs"), first
        released = await lab.cli.run("release", str(allocation))
        assert released.returncode == 0, released.stderr
        stdout, stderr = await asyncio.wait_for(waiter.communicate(), 60)
        assert waiter.returncode == 0, stderr.decode()
        assert stdout.decode().strip().isdigit()  # the task id, once it runs
    finally:
        if waiter.returncode is None:
            waiter.kill()
            await waiter.wait()
        lab.kill_tasks()
