"""32 concurrent `fleet dispatch --wait` on 16 GPUs (16 on 8 outside `make reliability`), with
`fleet monitor` writing the same SQLite file: no GPU double-booked, no "database is locked"
reaching a user, every task recorded once.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

from tests.cluster.netcluster import Cluster
from tests.fixtures.cli import FleetCli
from tests.fixtures.cluster import ClusterFactory
from tests.reliability.conftest import idle_specs
from tests.reliability.lab import ReliabilityLab, long_tests_enabled, open_lab, wait_for

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(400)]

# The long variant (FLEET_LONG_TESTS=1, `make reliability`): 32 dispatchers on 16 GPUs; the
# default run keeps the same contention, two tasks per GPU, at half the size.
DISPATCHERS = 32 if long_tests_enabled() else 16
HOSTS = 4 if long_tests_enabled() else 2
GPUS_PER_HOST = 4
TASK_SECONDS = 1.0
# Each task reports where it ran and when, from the host's own clock.
TIMED_TASK = """\
import json, os, sys, time
started = time.time()
time.sleep(float(sys.argv[1]))
print(json.dumps({"n": int(sys.argv[2]), "host": os.uname().nodename,
                  "gpus": os.environ["CUDA_VISIBLE_DEVICES"].split(","),
                  "start": started, "end": time.time()}))
"""


async def _dispatch(lab: ReliabilityLab, script: str, number: int) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet.cli.main", "dispatch", "--wait", "--queue-timeout", "5m",
        "--name", f"c{number}", script, str(TASK_SECONDS), str(number),
        cwd=lab.cli.home, env=lab.cli.env(), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), 300)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_concurrent_waiting_dispatches_with_the_monitor(
    netns_cluster: ClusterFactory, fleet_cli: FleetCli
) -> None:
    cluster = await netns_cluster(idle_specs(HOSTS, GPUS_PER_HOST, prefix="c"))
    assert isinstance(cluster, Cluster)
    lab = await open_lab(cluster, fleet_cli)
    script = fleet_cli.home / "timed.py"
    script.write_text(TIMED_TASK)
    await lab.start_monitor()
    try:
        await wait_for(lambda: lab.monitor is not None and lab.monitor.summaries
                       and lab.last_summary().get("hosts_up") == HOSTS, 30, "monitor up")
        started = time.monotonic()
        results = await asyncio.gather(*(_dispatch(lab, str(script), number)
                                         for number in range(DISPATCHERS)))
        elapsed = time.monotonic() - started
        assert lab.monitor_alive()
        samples_written = lab.samples_reported()
    finally:
        await lab.stop_monitors()

    failures = [(code, err[-500:]) for code, _, err in results if code != 0]
    assert failures == []
    locked = [err for _, out, err in results if "locked" in (out + err).lower()]
    assert locked == []
    reports = [json.loads(out.strip().splitlines()[-1]) for _, out, _ in results]
    assert sorted(report["n"] for report in reports) == list(range(DISPATCHERS))

    # No GPU ran two tasks at once (the tasks' own clocks; all hosts share this machine's).
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for report in reports:
        for gpu in report["gpus"]:
            by_gpu.setdefault(gpu, []).append((report["start"], report["end"]))
    overlaps = [gpu for gpu, spans in by_gpu.items()
                for (_, end), (start, _) in zip(sorted(spans), sorted(spans)[1:], strict=False)
                if start < end]
    assert overlaps == []
    # The run did contend: several tasks ran at the same moment.
    edges = sorted([(report["start"], 1) for report in reports]
                   + [(report["end"], -1) for report in reports])
    running = peak_running = 0
    for _, step in edges:
        running += step
        peak_running = max(peak_running, running)
    assert peak_running >= 2
    assert await asyncio.to_thread(lab.double_bookings) == []
    assert await asyncio.to_thread(lab.orphan_allocations) == []

    tasks = await lab.tasks()
    assert len(tasks) == DISPATCHERS  # each recorded exactly once
    assert sorted(task["name"] for task in tasks.values()) == sorted(
        f"c{number}" for number in range(DISPATCHERS))
    assert {task["state"] for task in tasks.values()} == {"succeeded"}
    print(f"\n{DISPATCHERS} dispatchers on {HOSTS * GPUS_PER_HOST} GPUs: {elapsed:.1f}s, "
          f"{len(by_gpu)} GPUs used, at most {peak_running} tasks at once, "
          f"monitor wrote {samples_written} samples meanwhile")
