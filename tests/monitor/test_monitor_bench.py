"""Benchmark (not a timing test): CPU the `fleet monitor` process spends per host-sample.

32 SimSshHosts × 8 GPUs at 1 s; the monitor runs as a subprocess so its CPU (from
/proc/PID/stat) excludes the SSH servers and probes, which run in this test process and its
children. Prints the figure; asserts only that every host was recorded.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from fleet.sim import gpus as sim
from tests.fixtures.cli import FleetCli
from tests.monitor.conftest import GpuHostFactory, wait_until
from tests.monitor.test_monitor_cli import MonitorProcess, write_inventory

HOSTS = 32
GPUS = 8
# A 20 s window when measuring for real (FLEET_LONG_TESTS=1, as `make reliability` sets); 5 s in
# the regular suite, which still proves all 32 hosts are recorded, to keep `make test` short.
MEASURE_S = 20.0 if os.environ.get("FLEET_LONG_TESTS") == "1" else 5.0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
async def test_monitor_cpu_per_host_sample(
    fleet_cli: FleetCli, gpu_hosts: GpuHostFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = [await gpu_hosts(f"b{i:02d}", sim.mixed(GPUS, host=f"b{i:02d}")) for i in range(HOSTS)]
    write_inventory(fleet_cli, hosts)
    inventory = fleet_cli.home / "inventory.yaml"
    text = inventory.read_text().replace("interval: 0.2", "interval: 1.0")
    inventory.write_text(text.replace("flush_interval: 0.2", "flush_interval: 1.0"))
    monitor = await MonitorProcess.start(fleet_cli, "-q")
    pid = monitor.process.pid
    try:
        await wait_until(
            lambda: any(s["hosts_up"] == HOSTS for s in monitor.summaries), 60, "all hosts up"
        )
        await asyncio.sleep(2.0)  # past start-up: handshakes, first facts writes
        start_cpu, start_count = cpu_seconds(pid), len(monitor.summaries)
        start_written = sum(s["samples_written"] for s in monitor.summaries)
        await asyncio.sleep(MEASURE_S)
        used = cpu_seconds(pid) - start_cpu
        written = sum(s["samples_written"] for s in monitor.summaries) - start_written
        intervals = len(monitor.summaries) - start_count
    finally:
        code, stderr = await monitor.finish(signal.SIGTERM, timeout=60)
    assert code == 0, stderr
    host_samples = written / GPUS
    assert host_samples >= HOSTS * (MEASURE_S - 3), (written, intervals)
    with capsys.disabled():
        print(
            f"\nmonitor CPU: {used:.2f} s over {MEASURE_S:g} s for {host_samples:.0f} host-samples "
            f"({HOSTS} hosts x {GPUS} GPUs at 1 s): {1000 * used / host_samples:.2f} ms per "
            f"host-sample, {100 * used / MEASURE_S:.1f}% of one core"
        )
