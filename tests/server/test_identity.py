"""Identity from the socket: real Unix users through one `fleet serve` (needs root)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dispatch.conftest import group_alive, wait_group_gone
from tests.server.conftest import ServeLab, ServeLabFactory
from tests.server.users import (
    SYSTEM_PYTHON,
    UnixUser,
    python_path_for_others,
    run_as,
    unique_group,
    unix_users,
)

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="creating Unix users (useradd) needs root"),
    pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="needs /usr/bin/python3 for the users"),
]

SLEEPER = "import os, time\nprint(os.getpgrp(), flush=True)\ntime.sleep(120)\n"


@pytest.fixture
def lab_users() -> Iterator[tuple[list[UnixUser], str, str]]:
    """ann and bob in the socket's group; carol also in the admin group."""
    socket_group, admin_group = unique_group("flsock"), unique_group("fladm")
    with unix_users(3, [[socket_group], [socket_group], [socket_group, admin_group]]) as users:
        yield users, socket_group, admin_group


class AsUser:
    """Runs `fleet` as one Unix user against the lab's server, with FLEET_OWNER=mallory."""

    def __init__(self, user: UnixUser, socket_path: Path, python_path: str) -> None:
        self.user = user
        self.env = {"FLEET_SERVER": str(socket_path), "FLEET_OWNER": "mallory",
                    "PYTHONPATH": python_path}

    async def fleet(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(SYSTEM_PYTHON), "-m", "fleet.cli.main", *args]
        return await asyncio.to_thread(run_as, self.user, argv, self.env)


async def _local_json(lab: ServeLab, *args: str) -> dict[str, object]:
    result = await lab.run("--json", *args, env={"FLEET_SERVER": "local"})
    assert result.returncode == 0, result.stderr
    data: dict[str, object] = result.json()
    return data


async def test_owners_and_permissions_come_from_the_socket(
        serve_lab: ServeLabFactory, lab_users: tuple[list[UnixUser], str, str],
        short_dir: Path) -> None:
    """Owners are the callers' Unix users even with FLEET_OWNER=mallory; a user may release
    and cancel only their own work; drain needs the admin group; refusals exit 8, as events."""
    (ann_user, bob_user, carol_user), socket_group, admin_group = lab_users
    lab = await serve_lab(4, settings=f"serve:\n  admins: [{admin_group}]\n")
    server = await lab.serve("--group", socket_group,
                             socket_path=short_dir / "shared" / "fleet.sock")
    python_path = python_path_for_others(short_dir)
    ann, bob, carol = (AsUser(user, server.socket_path, python_path)
                       for user in (ann_user, bob_user, carol_user))

    who = await ann.fleet("--json", "reserve", "--gpus", "1", "--note", "ann's")
    assert who.returncode == 0, who.stderr
    ann_held = json.loads(who.stdout)
    assert ann_held["owner"] == ann_user.name  # not mallory, not root
    bobs = await bob.fleet("--json", "reserve", "--gpus", "1")
    assert bobs.returncode == 0, bobs.stderr
    assert json.loads(bobs.stdout)["owner"] == bob_user.name
    (ann_allocation,) = ann_held["allocation_ids"]

    refused = await bob.fleet("release", str(ann_allocation))
    assert refused.returncode == 8, refused.stderr
    assert "not permitted" in refused.stderr and ann_user.name in refused.stderr
    active = {row["id"]: row["owner"] for row in
              (await _local_json(lab, "allocations"))["allocations"]}  # type: ignore[union-attr]
    assert active[ann_allocation] == ann_user.name
    released = await ann.fleet("release", str(ann_allocation))
    assert released.returncode == 0, released.stderr

    script = lab.cli.home / "sleep.py"
    script.write_text(SLEEPER)
    script.chmod(0o644)
    started = await lab.run("--json", "dispatch", "--detach", str(script),
                            env={"FLEET_SERVER": "local", "FLEET_OWNER": ann_user.name})
    assert started.returncode == 0, started.stderr
    task_id = int(json.loads(started.stdout)["task_id"])
    pgid = await _running_pgid(lab, task_id)
    cancel = await bob.fleet("cancel", "--grace", "1s", str(task_id))
    assert cancel.returncode == 8, cancel.stderr
    assert group_alive(pgid)  # the task runs on
    own = await ann.fleet("cancel", "--grace", "1s", str(task_id))
    assert own.returncode == 0, own.stderr
    assert await asyncio.to_thread(wait_group_gone, pgid, 10.0)

    drained = await bob.fleet("drain", "gpu1", "--reason", "mine now")
    assert drained.returncode == 8, drained.stderr
    admin = await carol.fleet("--json", "drain", "gpu1", "--reason", "fan")
    assert admin.returncode == 0, admin.stderr
    assert json.loads(admin.stdout)["changed"] is True

    events = (await _local_json(lab, "events", "--kind", "permission_denied"))["events"]
    refusals = [event["data"]["user"] for event in events]  # type: ignore[union-attr,index]
    assert refusals == [bob_user.name, bob_user.name, bob_user.name]
    drains = (await _local_json(lab, "events", "--kind", "host_drained"))["events"]
    assert [event["data"]["by"] for event in drains] == [carol_user.name]  # type: ignore


async def _running_pgid(lab: ServeLab, task_id: int) -> int:
    for _ in range(200):
        row = next(task for task in await lab.cli.recorded_tasks() if task.id == task_id)
        if row.state == "running" and row.remote_pid:
            return row.remote_pid
        await asyncio.sleep(0.1)
    raise AssertionError(f"task {task_id} did not start: {row}")
