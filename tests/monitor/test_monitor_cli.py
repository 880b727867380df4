"""`fleet monitor` as a real subprocess: summaries, SIGKILL then restart on the same DB, SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from sqlalchemy import func, select

from db.engine import open_database
from db.models import GpuSample
from fleet.sim import gpus as sim
from tests.fixtures.cli import FleetCli
from tests.fixtures.simgpu import SimHostFactory
from tests.monitor.conftest import GpuHostFactory, MonitoredHost, process_alive, wait_until

FAST_SETTINGS = """\
settings:
  monitor:
    interval: 0.2
    flush_interval: 0.2
    stall_intervals: 10
    reconnect_initial: 0.1
    reconnect_max: 0.5
  ssh:
    connect_timeout: 2s
    login_timeout: 2s
    command_timeout: 5s
"""


def write_inventory(fleet_cli: FleetCli, hosts: list[MonitoredHost]) -> None:
    lines = ["hosts:"]
    for host in hosts:
        spec = host.spec
        lines += [f"  {spec.name}:", f"    address: {spec.address}", f"    port: {spec.port}",
                  f"    user: {spec.user}", f"    identity_file: {spec.identity_file}"]
    (fleet_cli.home / "inventory.yaml").write_text("\n".join(lines) + "\n" + FAST_SETTINGS)


class MonitorProcess:
    """A running `fleet --json monitor`, its summary lines collected as they come."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.summaries: list[dict[str, int]] = []
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(
        cls, fleet_cli: FleetCli, *args: str, env: dict[str, str] | None = None
    ) -> MonitorProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "fleet.cli.main", "--json", "monitor", "--accept-new", *args,
            cwd=fleet_cli.home, env=fleet_cli.env(env), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            self.summaries.append(json.loads(line))

    async def finish(self, signum: int, timeout: float = 20) -> tuple[int, str]:
        self.process.send_signal(signum)
        assert self.process.stderr is not None
        stderr = await asyncio.wait_for(self.process.stderr.read(), timeout)
        code = await asyncio.wait_for(self.process.wait(), timeout)
        await asyncio.wait_for(self._reader, timeout)
        return code, stderr.decode()


def gpu_sample_count(db_path: Path) -> int:
    database = open_database(str(db_path))
    try:
        with database.session() as session:
            return int(session.scalar(select(func.count(GpuSample.id))) or 0)
    finally:
        database.close()


async def test_sigkill_loses_only_the_buffer_and_restart_continues_then_sigterm_is_clean(
    fleet_cli: FleetCli, gpu_hosts: GpuHostFactory
) -> None:
    hosts = [await gpu_hosts(f"m{i}", sim.busy(2, host=f"m{i}")) for i in range(2)]
    write_inventory(fleet_cli, hosts)
    log_file = fleet_cli.home / "logs" / "monitor.log"

    first = await MonitorProcess.start(fleet_cli, "--log-file", str(log_file))
    await wait_until(
        lambda: sum(s["samples_written"] for s in first.summaries) >= 20, 30, "samples written"
    )
    code, _ = await first.finish(signal.SIGKILL)
    assert code == -signal.SIGKILL
    reported = sum(s["samples_written"] for s in first.summaries)
    after_kill = await asyncio.to_thread(gpu_sample_count, fleet_cli.db_path)
    assert after_kill >= reported  # every flush the monitor reported is in the database
    assert os.stat(log_file).st_mode & 0o777 == 0o600

    second = await MonitorProcess.start(fleet_cli, "--log-file", str(log_file))
    await wait_until(
        lambda: sum(s["samples_written"] for s in second.summaries) >= 20, 30, "samples again"
    )
    code, stderr = await second.finish(signal.SIGTERM)
    assert code == 0, stderr
    assert "stopped" in stderr
    final = await asyncio.to_thread(gpu_sample_count, fleet_cli.db_path)
    assert final >= after_kill + sum(s["samples_written"] for s in second.summaries)
    summary = second.summaries[-1]
    assert summary["hosts_up"] == 2 and summary["gpus"] == 4
    # no probe outlives the monitor (SIGKILL dropped the connections; SIGTERM closed stdin)
    pids = [pid for host in hosts for pid in host.host.started_pids]
    await wait_until(lambda: not any(process_alive(pid) for pid in pids), 10, "probes gone")
    assert "connected to" in log_file.read_text()


async def test_config_show_lists_defaults_file_and_inventory_values(fleet_cli: FleetCli) -> None:
    config_dir = fleet_cli.home / ".config" / "fleet"
    config_dir.mkdir(parents=True)
    (config_dir / "config.yaml").write_text(
        "monitor:\n  interval: 5s\n  flush_rows: 100\nhealth:\n  gpu_hot_c: 90\n"
    )
    (fleet_cli.home / "inventory.yaml").write_text(
        "hosts:\n  a:\n    address: 10.0.0.1\nsettings:\n  monitor:\n    flush_rows: 200\n"
    )
    result = await fleet_cli.run("--json", "config", "show")
    assert result.returncode == 0, result.stderr
    data = result.json()
    assert data["settings"]["monitor"]["interval"] == 5.0
    assert data["settings"]["monitor"]["flush_rows"] == 200  # the inventory wins
    assert data["settings"]["health"]["gpu_hot_c"] == 90.0
    assert data["settings"]["ssh"]["connect_timeout"] == 10.0
    assert data["origins"]["monitor.interval"].endswith("config.yaml:2")
    assert data["origins"]["monitor.flush_rows"].endswith("inventory.yaml:6")
    assert data["origins"]["ssh.connect_timeout"] == "default"

    text = await fleet_cli.run("config", "show")
    assert text.returncode == 0
    import yaml

    reparsed = yaml.safe_load(text.stdout)
    assert reparsed == data["settings"]


async def test_bad_settings_exit_2_naming_file_and_line(fleet_cli: FleetCli) -> None:
    config_dir = fleet_cli.home / ".config" / "fleet"
    config_dir.mkdir(parents=True)
    (config_dir / "config.yaml").write_text("monitor:\n  interval: 0.2\n  stall_intervals: one\n")
    result = await fleet_cli.run("config", "show")
    assert result.returncode == 2
    assert "config.yaml:3:" in result.stderr and "stall_intervals" in result.stderr


async def test_local_host_is_read_in_process_every_interval(
    fleet_cli: FleetCli, sim_host: SimHostFactory
) -> None:
    _, env = sim_host(sim.busy(3, host="me"), name="me")
    (fleet_cli.home / "inventory.yaml").write_text(
        "hosts:\n  me:\n    connection: local\n" + FAST_SETTINGS
    )
    monitor = await MonitorProcess.start(fleet_cli, env={
        key: env[key] for key in ("LD_LIBRARY_PATH", "FLEET_SIM_NVML_CONFIG", "PATH")
    })
    await wait_until(
        lambda: sum(s["samples_written"] for s in monitor.summaries) >= 3 * 5, 30, "samples"
    )
    code, stderr = await monitor.finish(signal.SIGTERM)
    assert code == 0, stderr
    assert monitor.summaries[-1]["gpus"] == 3 and monitor.summaries[-1]["hosts_up"] == 1
    assert await asyncio.to_thread(gpu_sample_count, fleet_cli.db_path) >= 15
