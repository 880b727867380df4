"""`fleet dispatch`, `tasks`, `logs`, `cancel` end to end: real CLI processes, SimSshHost hosts."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from fleet.sim import gpus as scenarios
from tests.dispatch.conftest import DispatchLab, group_alive, wait_group_gone

LabFactory = Callable[..., Awaitable[DispatchLab]]

ECHO = """\
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "cuda": os.environ["CUDA_VISIBLE_DEVICES"],
                  "order": os.environ["CUDA_DEVICE_ORDER"], "task": os.environ["FLEET_TASK_ID"]}))
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""

SLEEPER = """\
import os, sys, time
print("pid", os.getpid(), os.getpgrp(), flush=True)
time.sleep(float(sys.argv[1]))
print("done", flush=True)
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
"""
# Like SLEEPER, but runs until the file argv[1] exists (at most 120 s, then exits 99), then exits
# with argv[2]: a test sees the task running for as long as its checks take, then lets it end.
GATED = """\
import os, sys, time
print("pid", os.getpid(), os.getpgrp(), flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]):
    if time.monotonic() > deadline:
        sys.exit(99)
    time.sleep(0.05)
print("done", flush=True)
sys.exit(int(sys.argv[2]))
"""


def _script(lab: DispatchLab, name: str, source: str) -> Path:
    path = lab.cli.home / name
    path.write_text(source)
    return path


async def _tasks(lab: DispatchLab, *args: str) -> list[dict[str, object]]:
    result = await lab.cli.run("--json", "tasks", "--all", *args)
    assert result.returncode == 0, result.stderr
    return list(result.json()["tasks"])


async def _active_allocations(lab: DispatchLab) -> list[dict[str, object]]:
    result = await lab.cli.run("--json", "allocations")
    assert result.returncode == 0, result.stderr
    data = result.json()
    rows = data["allocations"] if isinstance(data, dict) else data
    return [row for row in rows if row.get("released_at") is None]


@pytest.mark.usefixtures("db_url")  # on each backend
async def test_two_gpu_dispatch_gets_uuids_args_and_exit_code(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(2)
    script = _script(lab, "echo.py", ECHO)
    args = ("$(id)", "a;b", "it's", "two\nlines", "ünï", "--flag", "-x", "")

    result = await lab.cli.run("dispatch", "--gpus", "2", "--env", "EXIT_WITH=3",
                               str(script), *args)

    assert result.returncode == 3, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"] == list(args)
    assert report["cuda"] == ",".join(scenarios.gpu_uuid("gpu1", i) for i in range(2))
    assert report["order"] == "PCI_BUS_ID"
    (task,) = await _tasks(lab)
    assert task["id"] == int(report["task"])
    assert task["host"] == "gpu1" and task["gpus"] == [0, 1]
    assert task["state"] == "failed" and task["exit_code"] == 3
    assert task["timed_out"] is False  # failed by its own exit code, not the --timeout
    assert task["started_at"] is not None and task["ended_at"] is not None
    assert task["gpu_seconds"] is not None
    assert await _active_allocations(lab) == []


@pytest.mark.usefixtures("db_url")  # on each backend
async def test_no_placement_exits_7_and_records_nothing_held(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    script = _script(lab, "echo.py", ECHO)
    result = await lab.cli.run("dispatch", "--gpus", "2", "--explain", str(script))
    assert result.returncode == 7, result.stderr
    assert await _active_allocations(lab) == []


@pytest.mark.slow
@pytest.mark.usefixtures("db_url")  # on each backend
async def test_ctrl_c_cancels_remote_group_and_releases(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    script = _script(lab, "sleep.py", SLEEPER)
    process = await lab.spawn("dispatch", "--grace", "2s", str(script), "60")
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    _, pid, pgid = line.decode().split()
    assert pid == pgid  # the task leads its own process group
    process.send_signal(signal.SIGINT)
    await asyncio.wait_for(process.wait(), 15)
    assert process.returncode == 130
    assert await asyncio.to_thread(wait_group_gone, int(pgid), 3.0)
    (task,) = await _tasks(lab)
    assert task["state"] == "cancelled"
    assert await _active_allocations(lab) == []


@pytest.mark.slow
async def test_controller_killed_then_tasks_shows_real_end(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    script = _script(lab, "gated.py", GATED)
    go = lab.cli.home / "go"
    process = await lab.spawn("dispatch", str(script), str(go), "4")
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    pgid = int(line.split()[2])
    process.kill()
    await process.wait()
    running = await _tasks(lab)
    assert running[0]["state"] == "running"
    go.touch()
    assert await asyncio.to_thread(wait_group_gone, pgid, 10.0)

    (task,) = await _tasks(lab)

    assert task["state"] == "failed" and task["exit_code"] == 4
    assert await _active_allocations(lab) == []


@pytest.mark.slow
async def test_detached_task_logs_follow_and_cancel(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(2)
    script = _script(lab, "sleep.py", SLEEPER)
    detached = await lab.cli.run("dispatch", "--detach", str(script), "1", "0")
    assert detached.returncode == 0, detached.stderr
    task_id = detached.stdout.strip()

    followed = await lab.cli.run("logs", "-f", task_id)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines()[-1] == "done"
    (task,) = await _tasks(lab)
    assert task["state"] == "succeeded" and task["exit_code"] == 0

    second = await lab.cli.run("dispatch", "--detach", str(script), "60")
    second_id = second.stdout.strip()
    # Until the task's log on its host holds its first line (bounded), then `fleet logs` once.
    task_logs = [handle.host.home / ".fleet" / "tasks" for handle in lab.hosts]
    deadline = time.monotonic() + 30
    while not any(path.read_text().startswith("pid")
                  for base in task_logs for path in base.glob(f"{second_id}-*/.fleet/log")):
        assert time.monotonic() < deadline, f"task {second_id} printed nothing within 30 s"
        await asyncio.sleep(0.05)
    log = await lab.cli.run("logs", second_id)
    assert log.stdout.startswith("pid"), log.stdout
    pgid = int(log.stdout.split()[2])
    cancelled = await lab.cli.run("cancel", "--grace", "1s", second_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert not group_alive(pgid) or await asyncio.to_thread(wait_group_gone, pgid, 3.0)
    states = {str(t["id"]): t["state"] for t in await _tasks(lab)}
    assert states[second_id] == "cancelled"
    assert await _active_allocations(lab) == []


@pytest.mark.slow
async def test_timeout_kills_detached_task(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    script = _script(lab, "sleep.py", SLEEPER)
    result = await lab.cli.run("dispatch", "--timeout", "1s", "--grace", "1s", str(script), "60")
    assert result.returncode == 124, result.stderr
    (task,) = await _tasks(lab)
    assert task["state"] == "failed" and "timed out" in str(task["error"])
    assert task["timed_out"] is True  # a field, not a message prefix to recognise
    assert await _active_allocations(lab) == []


async def test_unknown_policy_is_bad_input_and_records_no_task(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    script = _script(lab, "echo.py", ECHO)
    for policy, reason in (("nosuch", "unknown policy 'nosuch'"),
                           ("no_such_module:score", "cannot import module no_such_module")):
        result = await lab.cli.run("dispatch", "--policy", policy, str(script))
        assert result.returncode == 2, result.stderr
        assert reason in result.stderr
    assert await _tasks(lab) == []
