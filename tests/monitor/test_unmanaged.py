"""Unmanaged use: which processes are fleet's (its task's session, its reservation owner's), one
event per new pid, and through the real monitor: a process of another Unix user on a free GPU
gives one info event naming that user, one on someone's reservation a conflict warning (the
probe reads owners from /proc; running as another user needs root)."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from db.engine import Database
from db.models import Event
from fleet.cli.reserve_cmd import _render_unmanaged
from fleet.health.unmanaged import UnmanagedWatch, unmanaged_event, unmanaged_processes
from fleet.inventory import Inventory
from fleet.model import HostSpec
from fleet.reports import GpuReport, ProcessInfo
from fleet.service import Fleet
from fleet.sim import gpus as sim
from fleet.snapshot import AllocationInfo, FleetSnapshot, GpuSnapshot, HostSnapshot
from fleet.ssh.options import SshOptions
from tests.monitor.conftest import GpuHostFactory
from tests.monitor.test_monitor_api import FAST

NOBODY = "nobody"


def _gpu(index: int, processes: tuple[ProcessInfo, ...],
         holder: AllocationInfo | None = None) -> GpuSnapshot:
    return GpuSnapshot("h", index, GpuReport(index=index, processes=processes),
                       allocation=holder)


def _snapshot(*gpus: GpuSnapshot) -> FleetSnapshot:
    return FleetSnapshot(0.0, (HostSnapshot(HostSpec("h", "10.0.0.1"), "up", gpus=gpus),),
                         frozenset())


def test_fleets_own_processes_are_its_tasks_session_and_its_reservation_owners() -> None:
    task = AllocationInfo(1, "task", "ann", task_id=7)
    held = AllocationInfo(2, "reservation", "bob")
    mine = ProcessInfo(100, 1, "python", uid=1000, user="svc", session=4242)
    stray = ProcessInfo(101, 1, "python", uid=1001, user="cy", session=99)
    hidden = ProcessInfo(102, 1, None)  # another pid namespace: nothing readable
    assert unmanaged_processes(_gpu(0, (mine, stray, hidden), task), {7: 4242}) == (stray,)
    bobs = ProcessInfo(103, 1, "jupyter", uid=1002, user="bob", session=5)
    assert unmanaged_processes(_gpu(1, (bobs, stray, hidden), held), {}) == (stray,)
    assert unmanaged_processes(_gpu(2, (mine, hidden)), {}) == (mine, hidden)  # nobody holds it


def test_each_unmanaged_pid_is_reported_once_and_again_after_it_left() -> None:
    watch = UnmanagedWatch()
    stray = ProcessInfo(101, 1, "python", uid=1001, user="cy", session=99)
    other = ProcessInfo(102, 1, None, uid=1002)
    first = watch.check(_snapshot(_gpu(0, (stray,))), {})
    assert [use.processes for use in first] == [(stray,)]
    assert watch.check(_snapshot(_gpu(0, (stray, other))), {})[0].processes == (other,)
    assert watch.check(_snapshot(_gpu(0, (stray, other))), {}) == []
    assert watch.counts() == {("h", 0): 2}
    assert watch.check(_snapshot(_gpu(0, ())), {}) == [] and watch.counts() == {}
    assert len(watch.check(_snapshot(_gpu(0, (stray,))), {})) == 1  # back: reported again
    free = unmanaged_event(watch.check(_snapshot(_gpu(0, (stray, other))), {})[0], now=1.0)
    assert (free.kind, free.severity) == ("gpu_unmanaged_use", "info")
    assert free.message == "h GPU 0: process(es) fleet did not start: pid 102 (uid 1002)"
    reserved = AllocationInfo(3, "reservation", "bob")
    (conflict,) = watch.check(_snapshot(_gpu(0, (stray, other), reserved)), {})
    assert conflict.processes == (stray,)  # a new holder: reported again, as a conflict
    event = unmanaged_event(conflict, now=2.0)
    assert event.severity == "warning" and event.message == (
        "h GPU 0: process(es) fleet did not start on bob's reservation: pid 101 (cy, python)")
    assert event.data["conflict"] is True and event.data["users"] == ["cy"]


@pytest.fixture
def nobodys_sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """`sleep` running as the user nobody (recorded pid, killed after)."""
    if os.geteuid() != 0:
        pytest.skip("running a process as another Unix user needs root")
    try:
        account = pwd.getpwnam(NOBODY)
    except KeyError:
        pytest.skip(f"no user {NOBODY!r} on this machine")
    process = subprocess.Popen(["sleep", "60"], user=account.pw_uid, group=account.pw_gid)
    yield process
    process.kill()
    process.wait(timeout=10)


def _events(database: Database) -> list[Event]:
    with database.session() as session:
        return list(session.scalars(select(Event).where(Event.kind == "gpu_unmanaged_use")
                                    .order_by(Event.id)))


async def test_another_users_process_is_reported_once_and_a_conflict_on_a_reservation(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    nobodys_sleeper: subprocess.Popen[bytes],
) -> None:
    from fleet.placement.claim import claim

    config = tmp_path / "config.yaml"
    config.write_text(FAST)
    monkeypatch.setenv("FLEET_CONFIG", str(config))
    monkeypatch.setattr("fleet.monitor.monitor.HOUSEKEEPING_INTERVAL_S", 0.2)
    scenario = sim.idle(2, host="shared")
    for gpu in scenario.gpus:
        gpu.processes = [(nobodys_sleeper.pid, 1 << 30)]
    host = await gpu_hosts("shared", scenario)
    service = Fleet(database, Inventory((host.spec,), None, {}, {}, None), sim_ssh_options)
    await service.start_monitor()
    try:
        deadline = time.monotonic() + 20
        while len(await service.latest_gpus()) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        await asyncio.to_thread(claim, database, "shared", [1], kind="reservation", owner="ann")
        deadline = time.monotonic() + 30
        while len(_events(database)) < 2:
            assert time.monotonic() < deadline, [e.message for e in _events(database)]
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # several more housekeeping passes: still one event per GPU
        shown = service.snapshot()
        assert shown is not None
        assert [[p.user for p in gpu.unmanaged] for gpu in shown.hosts[0].gpus] == \
            [[NOBODY], [NOBODY]]  # on the live snapshot (the overview marks them)
        deadline = time.monotonic() + 10
        while len(stored := await service.unmanaged_use()) < 2:  # what `fleet allocations` lists
            assert time.monotonic() < deadline, stored
            await asyncio.sleep(0.2)
        assert [(gpu.host, gpu.gpu_idx, [p["user"] for p in gpu.processes]) for gpu in stored] \
            == [("shared", 0, [NOBODY]), ("shared", 1, [NOBODY])]
        listing = _render_unmanaged(stored)
        assert f"shared    0  {nobodys_sleeper.pid}  {NOBODY}" in listing
    finally:
        await service.stop_monitor()
    events = {event.message.split(":")[0]: event for event in _events(database)}
    assert sorted(events) == ["shared GPU 0", "shared GPU 1"]
    free, reserved = events["shared GPU 0"], events["shared GPU 1"]
    assert free.severity == "info" and f"pid {nobodys_sleeper.pid} ({NOBODY}, sleep)" in \
        free.message
    assert reserved.severity == "warning" and "on ann's reservation" in reserved.message
    assert json.loads(reserved.data_json)["users"] == [NOBODY]
