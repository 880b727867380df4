"""`fleet cancel` that lands while a dispatch places or starts its task: the task ends
cancelled, its GPUs are free, and its script never runs on them (it used to run on GPUs the
cancel had released, a double booking)."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from fleet.dispatch.remote import TaskHost
from fleet.dispatch.request import DispatchRequest
from fleet.errors import TaskCancelled
from fleet.inventory import Inventory
from fleet.placement.request import PlacementRequest
from fleet.service import Fleet, open_database
from fleet.services.placement import PlacementService
from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from fleet.ssh.options import SshOptions
from tests.dispatch.conftest import kill_task_groups
from tests.fixtures.sshserver import SimSshHostFactory

# Where the cancel lands: the async step of the start it runs just before.
STEPS = {
    "placing (the claim)": (PlacementService, "place_and_claim"),
    "starting, no task directory yet": (TaskHost, "make_dir"),
    "task directory recorded, upload": (TaskHost, "upload"),
    "after the last check, launch": (TaskHost, "launch"),
}


@pytest.fixture
async def one_gpu_fleet(tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
                        sim_ssh_options: SshOptions) -> AsyncIterator[Fleet]:
    config = tmp_path / "gpus.conf"
    write_config(config, scenarios.idle(1, host="gpu1"))
    handle = await sim_ssh_host("gpu1", env=sim_tools.env(config))
    spec = dataclasses.replace(handle.spec, python=sys.executable)
    inventory = Inventory(hosts=(spec,), path=None, groups={}, settings={}, settings_line=None)
    fleet = Fleet(open_database(str(tmp_path / "fleet.db")), inventory,
                  dataclasses.replace(sim_ssh_options, accept_new=True))
    try:
        statuses = await fleet.status()
        assert [status.state for status in statuses] == ["up"], statuses
        yield fleet
    finally:
        fleet.close()
        kill_task_groups(handle.host.home)


def cancel_first(monkeypatch: pytest.MonkeyPatch, fleet: Fleet, owner: type,
                 name: str) -> list[str]:
    """Make the first call of owner.name run `fleet cancel` on the one task to its end first;
    returns where the state of each cancel is put."""
    real: Callable[..., Awaitable[Any]] = getattr(owner, name)
    outcomes: list[str] = []

    async def cancelled_then_real(*args: Any, **kwargs: Any) -> Any:
        if not outcomes:
            [task] = await fleet.tasks()
            outcomes.append((await fleet.cancel(task.id, grace_s=1.0)).state)
        return await real(*args, **kwargs)

    monkeypatch.setattr(owner, name, cancelled_then_real)
    return outcomes


@pytest.mark.parametrize("step", list(STEPS))
async def test_a_cancel_during_the_start_runs_nothing_and_frees_the_gpus(
        one_gpu_fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        step: str) -> None:
    fleet = one_gpu_fleet
    ran = tmp_path / "ran"
    script = tmp_path / "job.py"
    script.write_text(f"open({str(ran)!r}, 'w').close()\nimport time\ntime.sleep(30)\n")
    owner, name = STEPS[step]
    outcomes = cancel_first(monkeypatch, fleet, owner, name)

    with pytest.raises(TaskCancelled, match="cancelled before it"):
        await asyncio.wait_for(fleet.submit(DispatchRequest(script, PlacementRequest(gpus=1))),
                               60)

    assert outcomes == ["cancelled"]
    [task] = await fleet.tasks()
    assert task.state == "cancelled", task
    assert await fleet.allocations() == []  # the GPU is free, and nothing holds it
    await asyncio.sleep(1.5)  # a script that started would have written its file by now
    assert not ran.exists(), f"the cancelled task's script ran ({step})"
    # The GPU can be claimed again, and that task does run.
    monkeypatch.undo()
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    started = await fleet.submit(DispatchRequest(script, PlacementRequest(gpus=1)))
    assert started.task_id != task.id
