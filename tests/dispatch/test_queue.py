"""The wait queue: 16 concurrent `fleet dispatch --wait` on 8 GPUs never double-book a GPU."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest

from tests.dispatch.conftest import DispatchLab
from tests.dispatch.test_dispatch_cli import _active_allocations, _script, _tasks

LabFactory = Callable[..., Awaitable[DispatchLab]]

RECORDER = """\
import os, sys, time
start = time.time()
time.sleep(float(sys.argv[2]))
line = "%s %f %f\\n" % (os.environ["CUDA_VISIBLE_DEVICES"], start, time.time())
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, line.encode())
os.close(fd)
"""


@pytest.mark.slow
async def test_sixteen_waiting_dispatches_share_eight_gpus(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(4, 4)
    script = _script(lab, "record.py", RECORDER)
    record = lab.cli.home / "intervals.txt"
    processes = [await lab.spawn("dispatch", "--wait", "--queue-timeout", "5m", str(script),
                                 str(record), "1.0") for _ in range(16)]
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(process.communicate() for process in processes)), 300)
    for process, (_, stderr) in zip(processes, outcomes, strict=True):
        assert process.returncode == 0, stderr.decode()

    intervals = [line.split() for line in record.read_text().splitlines()]
    assert len(intervals) == 16
    spans = [(uuid, float(start), float(end)) for uuid, start, end in intervals]
    events = sorted([(start, 1) for _, start, _ in spans] + [(end, -1) for _, _, end in spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak <= 8
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for uuid, start, end in spans:
        assert "," not in uuid
        by_gpu.setdefault(uuid, []).append((start, end))
    for uuid, uses in by_gpu.items():
        uses.sort()
        for (_, first_end), (second_start, _) in itertools.pairwise(uses):
            assert first_end <= second_start, f"{uuid} used by two tasks at once"
    tasks = await _tasks(lab)
    assert len(tasks) == 16 and all(task["state"] == "succeeded" for task in tasks)
    assert await _active_allocations(lab) == []
