"""`fleet run` folding and exit codes; a task whose host goes away becomes lost (SimSshHost)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from fleet.dispatch.fanout_run import HostRunResult, fold, render_folded
from tests.dispatch.conftest import DispatchLab
from tests.dispatch.test_dispatch_cli import SLEEPER, _active_allocations, _script, _tasks

LabFactory = Callable[..., Awaitable[DispatchLab]]


def test_fold_groups_identical_results_in_host_order() -> None:
    results = [HostRunResult("a", 0, b"same\n"), HostRunResult("b", 1, b"oops\n"),
               HostRunResult("c", 0, b"same\n"), HostRunResult("d", None, error="refused",
                                                               state="unreachable"),
               HostRunResult("e", 0, b"x\ny\n")]
    assert [group.hosts for group in fold(results)] == [("a", "c"), ("b",), ("d",), ("e",)]
    assert render_folded(results).splitlines() == [
        "a,c: same", "b [exit 1]: oops", "d [unreachable: refused]:",
        "---------------- e (1)", "x", "y"]


@pytest.mark.slow
async def test_fleet_run_command_and_script(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1, 1, 1)
    same = await lab.cli.run("run", "--", "echo", "hello")
    assert same.returncode == 0, same.stderr
    assert same.stdout.strip() == "gpu1,gpu2,gpu3: hello"

    differ = await lab.cli.run("--json", "run", "--", 'test "$(basename $HOME)" = home '
                               '&& echo $FLEET_SIM_NVML_CONFIG | grep -q gpu2 && exit 9; echo ok')
    assert differ.returncode == 1
    data = differ.json()
    assert {row["host"]: row["exit_status"] for row in data["hosts"]} == \
        {"gpu1": 0, "gpu2": 9, "gpu3": 0}
    assert [group["hosts"] for group in data["folded"]] == [["gpu1", "gpu3"], ["gpu2"]]

    script = _script(lab, "args.py", "import sys, os\nprint(sys.argv[1:], os.getcwd()"
                     ".split('/')[-3:-1])\n")
    uploaded = await lab.cli.run("run", "--hosts", "gpu1,gpu2", str(script), "$(x)", "a b")
    assert uploaded.returncode == 0, uploaded.stderr
    assert uploaded.stdout.strip() == "gpu1,gpu2: ['$(x)', 'a b'] ['.fleet', 'run']"
    for handle in lab.hosts:
        run_dir = handle.host.home / ".fleet" / "run"
        assert not run_dir.exists() or list(run_dir.iterdir()) == []

    await lab.hosts[2].host.stop()
    down = await lab.cli.run("run", "--timeout", "5s", "--", "true")
    assert down.returncode == 3
    assert "gpu3 [unreachable" in down.stdout


@pytest.mark.slow
async def test_host_down_mid_task_becomes_lost(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    script = _script(lab, "sleep.py", SLEEPER)
    detached = await lab.cli.run("dispatch", "--detach", str(script), "60")
    assert detached.returncode == 0, detached.stderr
    await lab.hosts[0].host.stop()  # the host's SSH server is gone; the task's process too
    lab.kill_tasks()

    early = await _tasks(lab, "--lost-after", "30s")
    assert early[0]["state"] == "running"  # unreachable, but not for long enough yet
    # Contact times are whole seconds: 3.2 s after the start are at least 3 s > the 2 s bound.
    await asyncio.sleep(3.2)
    (task,) = await _tasks(lab, "--lost-after", "2s")

    assert task["state"] == "lost"
    assert "unreachable" in str(task["error"])
    assert await _active_allocations(lab) == []
