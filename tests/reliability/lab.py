"""A fleet controller working a namespace cluster: CLI, `fleet monitor`, tasks, DB invariants.

Used by the fault, concurrency and soak tests. Everything runs the real CLI in subprocesses
(tests.fixtures.cli.FleetCli, tests.monitor.test_monitor_cli.MonitorProcess) against one
SQLite file, and checks what a user would: states, events, task outcomes, allocations, samples.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import func, select

from db.engine import open_database
from db.models import Allocation, GpuSample, Task
from tests.cluster.hosts import NetnsHost
from tests.cluster.netcluster import Cluster
from tests.dispatch.conftest import kill_task_groups
from tests.fixtures.cli import CliResult, FleetCli
from tests.monitor.test_monitor_cli import MonitorProcess

LONG_ENV = "FLEET_LONG_TESTS"
LONG_REASON = f"long reliability scenario: set {LONG_ENV}=1 (make reliability)"
ACTIVE_STATES = ("queued", "placing", "starting", "running")
# Fast enough that a fault shows within a few seconds on 2 shared cores.
FAST_SETTINGS: dict[str, Any] = {
    "monitor": {"interval": 0.5, "flush_interval": 0.5, "reconnect_initial": 0.2,
                "reconnect_max": 1.0, "stop_grace": 2.0},
    "ssh": {"connect_timeout": 2.0, "login_timeout": 3.0, "keepalive_interval": 1.0,
            "command_timeout": 8.0},
    "health": {"host_down_after": 2},
}
# A task that prints, sleeps, then exits with a chosen code: `sleeper.py SECONDS CODE`.
SLEEPER = """\
import sys, time
print("started", flush=True)
time.sleep(float(sys.argv[1]))
print("done", flush=True)
sys.exit(int(sys.argv[2]))
"""


def long_tests_enabled() -> bool:
    return os.environ.get(LONG_ENV, "") not in ("", "0")


def require_long() -> None:
    if not long_tests_enabled():
        pytest.skip(LONG_REASON)


async def wait_for(condition: Callable[[], Any], timeout: float, what: str,
                   step: float = 0.25) -> Any:
    """Polls a sync or async condition until truthy; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(step)


@dataclass
class ReliabilityLab:
    """One controller (its home, DB and `fleet monitor`) over a namespace cluster."""

    cluster: Cluster
    cli: FleetCli
    monitor: MonitorProcess | None = None
    monitors: list[MonitorProcess] = field(default_factory=list)
    sleeper: Path = Path()

    @property
    def hosts(self) -> list[NetnsHost]:
        return self.cluster.hosts

    async def run(self, *args: str, timeout: float = 90.0,
                  env: dict[str, str] | None = None) -> CliResult:
        return await self.cli.run(*args, timeout=timeout, env=env)

    async def json(self, *args: str, timeout: float = 90.0) -> Any:
        result = await self.run("--json", *args, timeout=timeout)
        assert result.returncode == 0, f"fleet {' '.join(args)}: {result.stderr}"
        return result.json()

    # ---- monitor -------------------------------------------------------------------------

    async def start_monitor(self, *args: str) -> MonitorProcess:
        monitor = await MonitorProcess.start(self.cli, *args)
        self.monitor = monitor
        self.monitors.append(monitor)
        return monitor

    def samples_reported(self, monitor: MonitorProcess | None = None) -> int:
        chosen = monitor or self.monitor
        assert chosen is not None
        return sum(int(summary.get("samples_written", 0)) for summary in chosen.summaries)

    def last_summary(self) -> dict[str, Any]:
        assert self.monitor is not None and self.monitor.summaries
        return dict(self.monitor.summaries[-1])

    def monitor_alive(self) -> bool:
        return self.monitor is not None and self.monitor.process.returncode is None

    async def stop_monitors(self) -> None:
        for monitor in self.monitors:
            if monitor.process.returncode is None:
                with contextlib.suppress(ProcessLookupError, TimeoutError):
                    await monitor.finish(signal.SIGTERM, timeout=20)
            if monitor.process.returncode is None:
                monitor.process.kill()
                await monitor.process.wait()

    # ---- tasks -----------------------------------------------------------------------------

    async def dispatch_sleeper(self, host: str, seconds: float, code: int, *,
                               gpus: int = 1) -> int:
        result = await self.run("--json", "dispatch", "--detach", "--host", host, "--gpus",
                                str(gpus), "--name", f"sleep{code}", str(self.sleeper),
                                str(seconds), str(code))
        assert result.returncode == 0, f"dispatch on {host}: {result.stderr}"
        return int(result.json()["task_id"])

    async def tasks(self, lost_after: str = "5m") -> dict[int, dict[str, Any]]:
        data = await self.json("tasks", "--all", "--lost-after", lost_after)
        return {int(task["id"]): task for task in data["tasks"]}

    async def wait_tasks_final(self, task_ids: Sequence[int], timeout: float,
                               lost_after: str = "5m") -> dict[int, dict[str, Any]]:
        async def all_final() -> dict[int, dict[str, Any]] | None:
            tasks = await self.tasks(lost_after)
            if all(tasks[task_id]["state"] not in ACTIVE_STATES for task_id in task_ids):
                return tasks
            return None

        result: dict[int, dict[str, Any]] = await wait_for(
            all_final, timeout, f"tasks {list(task_ids)} to end", step=1.0)
        return result

    def kill_tasks(self) -> None:
        for host in self.hosts:
            kill_task_groups(host.home_dir)

    # ---- hosts and events ------------------------------------------------------------------

    async def host_states(self) -> dict[str, str]:
        data = await self.json("hosts")
        return {host["name"]: host["state"] for host in data["hosts"]}

    async def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        args = ["events", "--since", "1h", "--limit", "10000"]
        if kind:
            args += ["--kind", kind]
        data = await self.json(*args)
        return list(data["events"])

    # ---- database invariants ---------------------------------------------------------------

    def db_query(self, work: Callable[[Any], Any]) -> Any:
        database = open_database(str(self.cli.db_path))
        try:
            with database.session() as session:
                return work(session)
        finally:
            database.close()

    def gpu_sample_count(self) -> int:
        return int(self.db_query(lambda s: s.scalar(select(func.count(GpuSample.id)))) or 0)

    def orphan_allocations(self) -> list[str]:
        """Active allocations held neither by an active task nor by a live reservation."""
        now = int(time.time())

        def find(session: Any) -> list[str]:
            rows = session.execute(
                select(Allocation.id, Allocation.kind, Allocation.task_id, Task.state,
                       Allocation.expires_at)
                .outerjoin(Task, Task.id == Allocation.task_id)
                .where(Allocation.released_at.is_(None))
            ).all()
            orphans = []
            for alloc_id, kind, task_id, state, expires_at in rows:
                if task_id is not None and state in ACTIVE_STATES:
                    continue
                if task_id is None and kind != "task" and (expires_at is None or expires_at > now):
                    continue
                orphans.append(f"allocation {alloc_id} ({kind}, task {task_id} {state})")
            return orphans

        result: list[str] = self.db_query(find)
        return result

    def double_bookings(self) -> list[str]:
        """Pairs of allocations whose [created, released) intervals overlap on one GPU."""

        def find(session: Any) -> list[str]:
            rows = session.execute(
                select(Allocation.id, Allocation.gpu_id, Allocation.created_at,
                       Allocation.released_at).order_by(Allocation.gpu_id, Allocation.created_at,
                                                        Allocation.id)
            ).all()
            found = []
            by_gpu: dict[int, list[tuple[int, int, int]]] = {}
            for alloc_id, gpu_id, created, released in rows:
                end = released if released is not None else 2**62
                by_gpu.setdefault(gpu_id, []).append((created, end, alloc_id))
            for gpu_id, intervals in by_gpu.items():
                for (_, end, first), (start, _, second) in itertools.pairwise(intervals):
                    if start < end:
                        found.append(f"GPU {gpu_id}: allocations {first} and {second} overlap")
            return found

        result: list[str] = self.db_query(find)
        return result

    # ---- host processes --------------------------------------------------------------------

    def probe_processes(self, host: NetnsHost) -> list[int]:
        """PIDs of fleet probe programs (the bootstrap run with `-c`) on a host."""
        found = []
        for pid in host.processes():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and b"python" in cmdline and b"-c\x00" in cmdline:
                found.append(pid)
        return found

    def task_processes(self, host: NetnsHost) -> list[int]:
        """PIDs of live processes running a fleet task wrapper or script on a host."""
        found = []
        for pid in host.processes():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and b".fleet/tasks/" in cmdline:
                found.append(pid)
        return found


def sshd_pids(host: NetnsHost) -> list[int]:
    """Every sshd process of a host: the listener and the per-connection session processes."""
    found = []
    for pid in host.processes():
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm == "sshd":
            found.append(pid)
    return found


def signal_all_sshd(host: NetnsHost, signum: int) -> list[int]:
    """Sends `signum` to the listener and every session sshd of a host; the pids signalled."""
    pids = sshd_pids(host)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    return pids


def write_controller_files(cluster: Cluster, cli: FleetCli,
                           extra_settings: dict[str, Any] | None = None) -> None:
    """The cluster's known_hosts as the controller's, and its inventory with fast settings."""
    ssh_dir = cli.home / ".ssh"
    ssh_dir.mkdir(exist_ok=True)
    shutil.copy(cluster.known_hosts_file, ssh_dir / "known_hosts")
    inventory = yaml.safe_load(cluster.inventory_file.read_text())
    settings = {section: dict(values) for section, values in FAST_SETTINGS.items()}
    for section, values in (extra_settings or {}).items():
        settings.setdefault(section, {}).update(values)
    inventory["settings"] = settings
    (cli.home / "inventory.yaml").write_text(yaml.safe_dump(inventory, sort_keys=False))


async def open_lab(cluster: Cluster, cli: FleetCli,
                   extra_settings: dict[str, Any] | None = None) -> ReliabilityLab:
    """Controller files written, every host probed once (`fleet status`), the sleeper script."""
    write_controller_files(cluster, cli, extra_settings)
    status = await cli.run("status", "--timeout", "30s", timeout=120)
    assert status.returncode == 0, status.stdout + status.stderr
    sleeper = cli.home / "sleeper.py"
    sleeper.write_text(SLEEPER)
    return ReliabilityLab(cluster, cli, sleeper=sleeper)
