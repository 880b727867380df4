"""Soak: `fleet monitor` on 16 namespace hosts plus repeated dispatches for 10 minutes; the
monitor's memory and open file descriptors stay flat, and nothing is orphaned on the hosts.

Long only (FLEET_LONG_TESTS=1); FLEET_SOAK_SECONDS shortens it (e.g. 60 for a quick look).
Writes its figures to docs/reliability/soak.json for docs/reliability/latest.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from pathlib import Path

import pytest

from tests.cluster.netcluster import Cluster
from tests.fixtures.cli import FleetCli
from tests.fixtures.cluster import ClusterFactory
from tests.reliability.conftest import idle_specs
from tests.reliability.lab import open_lab, require_long, wait_for

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(1200)]

HOSTS = 16
SAMPLE_EVERY_S = 10.0
FLAT_MARGIN = 0.10  # the last third's mean within 10% of the second third's
FD_MARGIN = 2  # ...or, for descriptors, within this many
FIGURES = Path(__file__).resolve().parents[2] / "docs" / "reliability" / "soak.json"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def thirds(values: list[float]) -> tuple[float, float]:
    size = len(values) // 3
    return statistics.mean(values[size: 2 * size]), statistics.mean(values[2 * size:])


async def test_soak_monitor_and_dispatches(netns_cluster: ClusterFactory,
                                           fleet_cli: FleetCli) -> None:
    require_long()
    duration = float(os.environ.get("FLEET_SOAK_SECONDS", "600"))
    cluster = await netns_cluster(idle_specs(HOSTS, 2, prefix="s"))
    assert isinstance(cluster, Cluster)
    lab = await open_lab(cluster, fleet_cli)
    monitor = await lab.start_monitor("-q")
    pid = monitor.process.pid
    dispatched: list[int] = []
    samples: list[tuple[float, int, int]] = []
    try:
        await asyncio.sleep(5)  # connections and probes settle
        started = time.monotonic()
        next_sample = started
        round_number = 0
        while time.monotonic() - started < duration:
            if time.monotonic() >= next_sample:
                samples.append((time.monotonic() - started, rss_kib(pid), open_fds(pid)))
                next_sample += SAMPLE_EVERY_S
            host = cluster.hosts[round_number % HOSTS].name
            dispatched.append(await lab.dispatch_sleeper(host, 1, round_number % 3))
            round_number += 1
            await asyncio.sleep(1.0)
        samples.append((time.monotonic() - started, rss_kib(pid), open_fds(pid)))
        assert lab.monitor_alive()
        await lab.wait_tasks_final(dispatched, timeout=120)
    finally:
        await lab.stop_monitors()

    rss_mid, rss_last = thirds([float(rss) for _, rss, _ in samples])
    fd_mid, fd_last = thirds([float(fds) for _, _, fds in samples])
    tasks = await lab.tasks()
    outcomes = {task_id: (tasks[task_id]["state"], tasks[task_id]["exit_code"])
                for task_id in dispatched}
    wrong = {task_id: seen for task_id, seen in outcomes.items()
             if seen != (("succeeded", 0) if dispatched.index(task_id) % 3 == 0
                         else ("failed", dispatched.index(task_id) % 3))}
    await wait_for(lambda: all(lab.probe_processes(host) == [] and lab.task_processes(host) == []
                               for host in cluster.hosts), 30, "no probe or task left on hosts")
    figures = {"hosts": HOSTS, "duration_s": round(duration), "tasks": len(dispatched),
               "samples": [{"t_s": round(t, 1), "rss_kib": rss, "fds": fds}
                           for t, rss, fds in samples],
               "rss_mid_kib": round(rss_mid), "rss_last_kib": round(rss_last),
               "fd_mid": round(fd_mid, 1), "fd_last": round(fd_last, 1),
               "gpu_samples": await asyncio.to_thread(lab.gpu_sample_count)}
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    FIGURES.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"\nsoak {duration:g}s, {HOSTS} hosts, {len(dispatched)} tasks: RSS {rss_mid:.0f} → "
          f"{rss_last:.0f} KiB, fds {fd_mid:.1f} → {fd_last:.1f}")
    assert wrong == {}
    assert await asyncio.to_thread(lab.orphan_allocations) == []
    assert rss_last <= rss_mid * (1 + FLAT_MARGIN)
    assert fd_last <= fd_mid + FD_MARGIN
