"""Hostile probe output, a probe stalled at shutdown, a host without python, health wiring."""

from __future__ import annotations

import os
import signal
import stat
import sys
from dataclasses import replace
from pathlib import Path

from sqlalchemy import select

from db.engine import Database
from db.models import Event, Gpu
from fleet.monitor.config import Settings
from fleet.monitor.monitor import Monitor
from fleet.sim import gpus as sim
from fleet.sim.gpus import write_config
from fleet.ssh.options import SshOptions
from tests.monitor.conftest import GpuHostFactory, process_alive, wait_until

# Prints garbage, a line far over the 4 MiB limit, a truncated JSON line, then runs the probe.
NOISY_PYTHON = """#!/bin/sh
printf 'not json at all\\n{"schema": 999}\\n\\033[31mescape\\n'
head -c 6000000 /dev/zero | tr '\\0' x; echo
printf '{"schema": 1, "ts": 1'; echo
exec python3 "$@"
"""


def _script(home: Path, name: str, text: str) -> str:
    path = home / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


async def test_garbage_and_overlong_lines_are_skipped_and_host_stays_monitored(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    fast_settings: Settings, monitors: list[Monitor],
) -> None:
    host = await gpu_hosts("noisy", sim.idle(2, host="noisy"))
    python = _script(host.host.home, "noisy-python", NOISY_PYTHON)
    monitor = Monitor([replace(host.spec, python=python)], database, sim_ssh_options,
                      fast_settings)
    monitors.append(monitor)
    await monitor.start()
    stats = monitor.stream_stats()["noisy"]
    await wait_until(lambda: stats.reports >= 3, 20, "readings after the garbage")
    assert stats.garbage_lines == 5  # 3 bad lines, 1 overlong, 1 truncated JSON
    assert stats.probes_started == 1 and stats.stalls == 0
    snapshot = monitor.snapshot()
    assert snapshot is not None and snapshot.hosts[0].state == "up"


async def test_stop_kills_a_stalled_probe_on_the_host(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    fast_settings: Settings, monitors: list[Monitor],
) -> None:
    host = await gpu_hosts("frozen", sim.idle(1, host="frozen"))
    settings = fast_settings.with_values("monitor", stall_intervals=50, stop_grace=0.5)
    monitor = Monitor([host.spec], database, sim_ssh_options, settings)
    monitors.append(monitor)
    await monitor.start()
    await wait_until(lambda: monitor.stream_stats()["frozen"].reports >= 1, 15, "a reading")
    probe = host.host.started_pids[0]
    os.kill(probe, signal.SIGSTOP)
    await monitor.stop()
    await wait_until(lambda: not process_alive(probe), 5, "the frozen probe killed")


async def test_host_without_python_is_read_with_one_shot_nvidia_smi(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    fast_settings: Settings, monitors: list[Monitor],
) -> None:
    host = await gpu_hosts("nopy", sim.idle(3, host="nopy"))
    spec = replace(host.spec, python="/nonexistent/python3")
    monitor = Monitor([spec], database, sim_ssh_options, fast_settings)
    monitors.append(monitor)
    await monitor.start()
    await wait_until(lambda: monitor.stream_stats()["nopy"].reports >= 2, 20, "smi readings")
    snapshot = monitor.snapshot()
    assert snapshot is not None
    report = snapshot.hosts[0].report
    assert report is not None and report.method == "nvidia-smi" and len(report.gpus) == 3


async def test_hot_gpu_and_gpu_count_change_become_states_events_and_hooks(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    fast_settings: Settings, monitors: list[Monitor], tmp_path: Path,
) -> None:
    from fleet.health.hooks import HookCommand, HookSettings

    host = await gpu_hosts("warm", sim.idle(2, host="warm"))
    hook_log = tmp_path / "hook-events.jsonl"
    hooks = HookSettings(commands=(HookCommand(
        (sys.executable, "-c",
         f"import sys; open({str(hook_log)!r}, 'a').write(sys.stdin.read())"),
        kinds=("gpu_hot", "gpu_count_changed"),
    ),))
    settings = replace(fast_settings, sections={**fast_settings.sections, "hooks": hooks})
    monitor = Monitor([host.spec], database, sim_ssh_options, settings)
    monitors.append(monitor)
    await monitor.start()

    def gpu_states() -> list[str]:
        snapshot = monitor.snapshot()
        return [gpu.state for gpu in snapshot.hosts[0].gpus] if snapshot else []

    await wait_until(lambda: gpu_states() == ["ok", "ok"], 15, "two ok GPUs")
    hot = sim.idle(2, host="warm")
    hot.gpus[1].temperature_c = 95
    write_config(host.config_path, hot)
    await wait_until(lambda: gpu_states() == ["ok", "hot"], 10, "GPU 1 hot")
    write_config(host.config_path, sim.idle(3, host="warm"))
    await wait_until(lambda: gpu_states() == ["ok", "ok", "ok"], 10, "three GPUs, cooled")
    await wait_until(lambda: hook_log.exists() and hook_log.read_text().count("\n") >= 2, 10,
                     "both hook runs")
    await monitor.stop()
    with database.session() as session:
        kinds = [event.kind for event in session.scalars(select(Event).order_by(Event.id))]
        states = [gpu.state for gpu in session.scalars(select(Gpu).order_by(Gpu.idx))]
    assert kinds.count("gpu_hot") == 1 and kinds.count("gpu_cooled") == 1, kinds
    assert kinds.count("gpu_count_changed") == 1, kinds
    assert states == ["ok", "ok", "ok"]
    assert '"kind": "gpu_hot"' in hook_log.read_text()
