"""`limits.max_gpus_per_user: 2` in a lab: two real Unix users dispatch through one
`fleet serve`; ann's third GPU waits, naming the limit, bob's tasks start meanwhile, and ann's
third starts once one of her first two ends; only an admin may --override-limits (needs
root)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.server.conftest import ServeLab, ServeLabFactory, ServerProcess
from tests.server.test_cross_user_dispatch import STAMP
from tests.server.test_identity import AsUser
from tests.server.users import (
    SYSTEM_PYTHON,
    UnixUser,
    python_path_for_others,
    unique_group,
    unix_users,
)

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="creating Unix users (useradd) needs root"),
    pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="needs /usr/bin/python3 for the users"),
]


@pytest.fixture
def two_users() -> Iterator[tuple[list[UnixUser], str]]:
    group = unique_group("fllim")
    with unix_users(2, [[group], [group]]) as users:
        yield users, group


def _script_for(user: UnixUser) -> Path:
    path = user.home / "stamp.py"
    path.write_text(STAMP)
    os.chown(path, user.uid, -1)
    return path


async def test_a_users_third_gpu_waits_for_their_limit_while_others_start(
        serve_lab: ServeLabFactory, two_users: tuple[list[UnixUser], str],
        short_dir: Path) -> None:
    (ann_user, bob_user), group = two_users
    # FIFO (no fair share): ann's waiting third task is ahead of bob's, and must not hold
    # them back, since only her own limit holds it
    lab = await serve_lab(4, settings="limits:\n  max_gpus_per_user: 2\n"
                                      "queue:\n  fair_share: false\n")
    server = await lab.serve("--group", group, socket_path=short_dir / "shared" / "fleet.sock")
    python_path = python_path_for_others(short_dir)
    ann, bob = (AsUser(user, server.socket_path, python_path) for user in (ann_user, bob_user))

    def dispatch(who: AsUser, seconds: str) -> asyncio.Task[object]:
        return asyncio.create_task(who.fleet("dispatch", "--wait", "--queue-timeout", "2m",
                                             str(_script_for(who.user)), seconds))

    ann_first = [dispatch(ann, "8") for _ in range(2)]
    await _until(lab, server, "running", lambda task: task["state"] == "running", 2)
    ann_third = dispatch(ann, "0.2")
    await _until(lab, server, "queued", lambda task: task["state"] == "queued", 1)
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


async def _tasks(lab: ServeLab, server: ServerProcess) -> list[dict[str, object]]:
    result = await lab.run("--json", "tasks", "--all",
                           env={"FLEET_SERVER": str(server.socket_path)})
    assert result.returncode == 0, result.stderr
    return list(result.json()["tasks"])


async def _until(lab: ServeLab, server: ServerProcess, what: str,
                 counted: Callable[[dict[str, object]], bool], count: int) -> None:
    deadline = time.monotonic() + 60
    while sum(map(counted, tasks := await _tasks(lab, server))) < count:
        assert time.monotonic() < deadline, f"not {count} tasks {what} after 60 s: {tasks}"
        await asyncio.sleep(0.1)
