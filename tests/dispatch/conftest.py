"""Fixtures for dispatch tests: a SimSshHost reachable as a TaskHost; tasks killed at teardown."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from fleet.dispatch.remote import TaskHost
from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from fleet.ssh.options import SshOptions
from tests.fixtures.cli import FleetCli
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory

KILL_WAIT_S = 5.0


def kill_task_groups(home: Path) -> list[int]:
    """SIGKILL every task process group recorded under a host home's ~/.fleet; the pgids."""
    killed = []
    for pattern in ("*/.fleet/pid", "*/.fleet/wrapper.pid"):
        for base in (home / ".fleet" / "tasks", home / ".fleet" / "run"):
            for pid_file in base.glob(pattern):
                text = pid_file.read_text().strip()
                if not text.isdigit():
                    continue
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(text), signal.SIGKILL)
                    killed.append(int(text))
    return killed


def group_alive(pgid: int) -> bool:
    """Whether a process group still has a live (non-zombie) member."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def wait_group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(0.05)
    return not group_alive(pgid)


@pytest.fixture
async def task_host(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions
) -> AsyncIterator[tuple[TaskHost, SimHostHandle]]:
    """A TaskHost connected to a fresh SimSshHost; its tasks' groups are killed afterwards."""
    handle = await sim_ssh_host("disp")
    host = await TaskHost.open(handle.spec, replace(sim_ssh_options, accept_new=True))
    try:
        yield host, handle
    finally:
        host.close()
        kill_task_groups(handle.host.home)


# ---- CLI-level fixtures -------------------------------------------------------------------



def write_inventory(fleet_cli: FleetCli,
                    handles: list[SimHostHandle]) -> None:
    lines = ["hosts:"]
    for handle in handles:
        spec = handle.spec
        lines += [f"  {spec.name}:", f"    address: {spec.address}", f"    port: {spec.port}",
                  f"    user: {spec.user}", f"    identity_file: {spec.identity_file}",
                  f"    python: {sys.executable}"]
    (fleet_cli.home / "inventory.yaml").write_text("\n".join(lines) + "\n")


async def start_gpu_host(sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
                         fleet_cli: FleetCli,
                         name: str, gpu_count: int) -> SimHostHandle:
    config = fleet_cli.home / f"{name}.gpus.conf"
    write_config(config, scenarios.idle(gpu_count, host=name))
    return await sim_ssh_host(name, env=sim_tools.env(config))


@dataclass
class DispatchLab:
    """Sim GPU hosts in an inventory, keys pinned and GPUs recorded (`fleet status` ran)."""

    cli: FleetCli
    hosts: list[SimHostHandle]

    def kill_tasks(self) -> None:
        for handle in self.hosts:
            kill_task_groups(handle.host.home)

    async def spawn(self, *args: str, env: dict[str, str] | None = None
                    ) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "fleet.cli.main", *args, cwd=self.cli.home,
            env=self.cli.env(env), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


@pytest.fixture
async def dispatch_lab(fleet_cli: FleetCli,
                       sim_ssh_host: SimSshHostFactory,
                       sim_tools: SimTools) -> AsyncIterator[Callable[..., Awaitable[DispatchLab]]]:
    labs: list[DispatchLab] = []

    async def make(*gpu_counts: int) -> DispatchLab:
        handles = [await start_gpu_host(sim_ssh_host, sim_tools, fleet_cli, f"gpu{i}", count)
                   for i, count in enumerate(gpu_counts, start=1)]
        write_inventory(fleet_cli, handles)
        result = await fleet_cli.run("status", "--accept-new", "--timeout", "30s")
        assert result.returncode == 0, result.stderr
        lab = DispatchLab(fleet_cli, handles)
        labs.append(lab)
        return lab

    try:
        yield make
    finally:
        for lab in labs:
            lab.kill_tasks()
