"""Two real Unix users dispatch through one `fleet serve`: no GPU is ever double-booked, and a
reservation by one is never placed on by the other (needs root)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tests.server.conftest import ServeLabFactory
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

TASKS_PER_USER = 8
# Records when it ran on which GPU; long enough that two tasks on one GPU would overlap.
STAMP = """\
import json, os, sys, time
start = time.time()
time.sleep(float(sys.argv[1]))
print(json.dumps({"gpu": os.environ["CUDA_VISIBLE_DEVICES"], "start": start,
                  "end": time.time(), "task": int(os.environ["FLEET_TASK_ID"])}))
"""


def _script_for(user: UnixUser) -> Path:
    path = user.home / "stamp.py"
    path.write_text(STAMP)
    os.chown(path, user.uid, -1)
    return path


async def test_sixteen_waiting_dispatches_from_two_users_never_overlap(
        serve_lab: ServeLabFactory, two_users: tuple[list[UnixUser], str],
        short_dir: Path) -> None:
    (ann_user, bob_user), group = two_users
    lab = await serve_lab(4, 4)
    server = await lab.serve("--group", group, socket_path=short_dir / "shared" / "fleet.sock")
    python_path = python_path_for_others(short_dir)
    ann, bob = (AsUser(user, server.socket_path, python_path) for user in (ann_user, bob_user))

    held = await ann.fleet("--json", "reserve", "--gpus", "2", "--note", "ann's debugging")
    assert held.returncode == 0, held.stderr
    reserved = set(json.loads(held.stdout)["uuids"])
    assert len(reserved) == 2

    runs = [(who, who.fleet("dispatch", "--wait", "--queue-timeout", "2m",
                            str(_script_for(who.user)), "0.8"))
            for who in (ann, bob) for _ in range(TASKS_PER_USER)]
    results = await asyncio.gather(*(run for _, run in runs))
    stamps = []
    for (who, _), result in zip(runs, results, strict=True):
        assert result.returncode == 0, (who.user.name, result.stderr)
        stamps.append((who.user.name, json.loads(result.stdout.splitlines()[-1])))

    by_gpu: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for _, stamp in stamps:
        (gpu,) = stamp["gpu"].split(",")
        assert gpu not in reserved, stamp  # ann's reservation held against everyone's tasks
        by_gpu[gpu].append((stamp["start"], stamp["end"]))
    for gpu, spans in by_gpu.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, f"two tasks overlapped on {gpu}: {spans}"
    assert len(by_gpu) > 1  # the work was spread, not serialised on one GPU

    tasks = (await lab.run("--json", "tasks", "--all")).json()["tasks"]
    owners = Counter(task["owner"] for task in tasks)
    assert owners == {ann_user.name: TASKS_PER_USER, bob_user.name: TASKS_PER_USER}
    assert {task["id"]: task["owner"] for task in tasks} == \
        {stamp["task"]: name for name, stamp in stamps}
    assert all(task["state"] == "succeeded" for task in tasks)

    anns = next(task["id"] for task in tasks if task["owner"] == ann_user.name)
    peek = await bob.fleet("logs", str(anns))
    assert peek.returncode == 8 and "not permitted" in peek.stderr, peek.stderr
    own = await ann.fleet("logs", str(anns))
    assert own.returncode == 0 and json.loads(own.stdout)["task"] == anns, own.stderr
    policy = await bob.fleet("dispatch", "--policy", "os:getcwd", str(_script_for(bob_user)),
                             "0")
    assert policy.returncode == 8, policy.stderr  # a module policy runs code in the server
