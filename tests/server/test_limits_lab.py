"""`limits.max_gpus_per_user: 2` in a lab: two real Unix users dispatch through one
`fleet serve` over a namespace host (real sshd, simulated GPUs): ann's third GPU waits, naming
the limit, bob's tasks start meanwhile, and ann's third starts once one of her first two ends;
only an admin may --override-limits (needs root)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fleet.client.remote import open_remote
from fleet.sim import gpus as sim
from tests.cluster.hosts import ClusterHostSpec
from tests.fixtures.cli import FleetCli
from tests.fixtures.cluster import ClusterFactory
from tests.server.conftest import ServerProcess, wait_ready
from tests.server.test_cross_user_dispatch import _script_for
from tests.server.test_identity import AsUser
from tests.server.users import (
    SYSTEM_PYTHON,
    UnixUser,
    python_path_for_others,
)

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="creating Unix users (useradd) needs root"),
    pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="needs /usr/bin/python3 for the users"),
]


async def test_a_users_third_gpu_waits_for_their_limit_while_others_start(
        fleet_cli: FleetCli, cluster: ClusterFactory, two_users: tuple[list[UnixUser], str],
        short_dir: Path) -> None:
    (ann_user, bob_user), group = two_users
    lab = await cluster([ClusterHostSpec("gpu-lim", sim.idle(4, host="gpu-lim"))])
    ssh_dir = fleet_cli.home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    shutil.copy(lab.known_hosts_file, ssh_dir / "known_hosts")
    config = fleet_cli.home / ".config" / "fleet" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    # FIFO (no fair share): ann's waiting third task is ahead of bob's, and must not hold
    # them back, since only her own limit holds it
    config.write_text("monitor:\n  interval: 0.25\nlimits:\n  max_gpus_per_user: 2\n"
                      "queue:\n  fair_share: false\n")
    socket_path = short_dir / "shared" / "fleet.sock"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet.cli.main", "--inventory", str(lab.inventory_file),
        "serve", "--group", group, "--socket", str(socket_path), cwd=fleet_cli.home,
        env=fleet_cli.env(), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    server = ServerProcess(process, socket_path)
    try:
        await wait_ready(server)
        await _until_gpus_recorded(fleet_cli, 4)  # the monitor writes them a flush later
        await _lab_dispatches(server, ann_user, bob_user, python_path_for_others(short_dir))
    finally:
        await server.stop()


async def _lab_dispatches(server: ServerProcess, ann_user: UnixUser, bob_user: UnixUser,
                          python_path: str) -> None:
    ann, bob = (AsUser(user, server.socket_path, python_path) for user in (ann_user, bob_user))

    def dispatch(who: AsUser, seconds: str) -> asyncio.Task[object]:
        return asyncio.create_task(who.fleet("dispatch", "--wait", "--queue-timeout", "2m",
                                             str(_script_for(who.user)), seconds))

    ann_first = [dispatch(ann, "8") for _ in range(2)]
    await _until(server, "running", lambda task: task["state"] == "running", 2)
    ann_third = dispatch(ann, "0.2")
    await _until(server, "queued", lambda task: task["state"] == "queued", 1)
    bob_runs = [dispatch(bob, "0.2") for _ in range(2)]
    results = await asyncio.gather(*ann_first, ann_third, *bob_runs)
    stamps = []
    for result in results:
        assert result.returncode == 0, result.stderr  # type: ignore[attr-defined]
        stamps.append(json.loads(result.stdout.splitlines()[-1]))  # type: ignore[attr-defined]
    first, second, third, *bobs = stamps
    assert "waits for a limit: limits.max_gpus_per_user = 2: " \
           f"{ann_user.name} holds 2 GPU(s)" in results[2].stderr  # type: ignore[attr-defined]
    ann_busy_until = min(first["end"], second["end"])
    assert all(stamp["start"] < third["start"] for stamp in bobs), (  # bob went meanwhile
        stamps, [result.stderr for result in results])  # type: ignore[attr-defined]
    assert third["start"] >= ann_busy_until  # ann's third after one of her first two
    denied = await bob.fleet("dispatch", "--override-limits", str(_script_for(bob_user)), "0")
    assert denied.returncode == 8 and "override limits" in denied.stderr, denied.stderr


async def _until_gpus_recorded(fleet_cli: FleetCli, count: int) -> None:
    from sqlalchemy import func, select

    from db.engine import open_database
    from db.models import Gpu

    database = open_database(fleet_cli.db_url or str(fleet_cli.db_path))
    try:
        deadline = time.monotonic() + 30
        while True:
            with database.session() as session:
                if (session.scalar(select(func.count()).select_from(Gpu)) or 0) >= count:
                    return
            assert time.monotonic() < deadline, f"{count} GPUs not recorded after 30 s"
            await asyncio.sleep(0.1)
    finally:
        database.close()


async def _tasks(server: ServerProcess) -> list[dict[str, object]]:
    async with open_remote(server.socket_path) as remote:
        rows = await remote.tasks()
    return [{"state": row.state, "owner": row.owner, "error": row.error} for row in rows]


async def _until(server: ServerProcess, what: str,
                 counted: Callable[[dict[str, object]], bool], count: int) -> None:
    deadline = time.monotonic() + 60
    while sum(map(counted, tasks := await _tasks(server))) < count:
        assert time.monotonic() < deadline, f"not {count} tasks {what} after 60 s: {tasks}"
        await asyncio.sleep(0.1)
