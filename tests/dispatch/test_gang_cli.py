"""Gangs on loopback SSH hosts: a gang ends with rank 0 (an MPI-style launcher whose other
nodes only hold their GPUs), --same on a label, and the dry run's per-node explanation."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest

from tests.dispatch.conftest import DispatchLab
from tests.dispatch.test_dispatch_cli import _active_allocations, _script, _tasks

LabFactory = Callable[..., Awaitable[DispatchLab]]

LAUNCHER = """\
import os, sys, time
if os.environ["NODE_RANK"] == "0":
    print(open(os.environ["FLEET_HOSTFILE"]).read(), end="")
    sys.exit(0)
time.sleep(120)
"""


@pytest.mark.slow
async def test_a_gang_ends_with_rank_0_and_its_holders_are_cancelled(
        dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(2, 2)
    script = _script(lab, "launcher.py", LAUNCHER)
    started = time.monotonic()
    # --workdir elsewhere: FLEET_HOSTFILE is absolute (it was relative to the task directory)
    result = await lab.cli.run("dispatch", "--nodes", "2", "--gpus-per-node", "2",
                               "--grace", "1s", "--hostfile", "conf/hosts",
                               "--workdir", str(lab.cli.home), str(script), timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert time.monotonic() - started < 60  # rank 1 sleeps 120 s: it was ended with rank 0
    hostfile = [line.split("] ", 1)[1] for line in result.stdout.splitlines() if "slots=" in line]
    assert hostfile == ["127.0.0.1 slots=2", "127.0.0.1 slots=2"]
    expanded = await _tasks(lab, "--expand")
    assert [(task["group_index"], task["state"]) for task in expanded] == [
        (0, "succeeded"), (1, "cancelled")]
    (folded,) = await _tasks(lab)
    assert folded["state"] == "succeeded" and folded["group"]["nodes"] == 2
    assert await _active_allocations(lab) == []


@pytest.mark.slow
async def test_dry_run_explains_every_node(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(2, 2, 1)
    script = _script(lab, "ok.py", "print('ok')\n")
    result = await lab.cli.run("--json", "dispatch", "--dry-run", "--nodes", "2",
                               "--gpus-per-node", "2", str(script))
    assert result.returncode == 0, result.stderr
    data = result.json()
    assert [node["host"] for node in data["nodes"]] == ["gpu1", "gpu2"]
    assert any(exclusion["host"] == "gpu3" for exclusion in data["exclusions"])
    text = await lab.cli.run("dispatch", "--dry-run", "--explain", "--nodes", "3",
                             "--gpus-per-node", "2", str(script))
    assert text.returncode == 7
    assert "no 3 hosts have 2 free GPUs each" in text.stdout + text.stderr
