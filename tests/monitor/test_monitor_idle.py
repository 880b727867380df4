"""Idle holdings through the real monitor: its housekeeping marks a reservation on a simulated
GPU at 0 % and 0 MiB once `idle.after` has passed (one `allocation_idle` event naming the
owner), shows it in snapshots and in the `fleet_allocations_idle` metric, and releases it after
`idle.release_reservations_after`."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from db.engine import Database
from db.models import Event
from fleet.health.metrics import snapshot_metrics
from fleet.inventory import Inventory
from fleet.service import Fleet
from fleet.sim import gpus as sim
from fleet.snapshot import FleetSnapshot
from fleet.ssh.options import SshOptions
from tests.monitor.conftest import GpuHostFactory
from tests.monitor.test_monitor_api import FAST

IDLE = "idle:\n  after: 2s\n  release_reservations_after: 4s\n"


def _kinds(database: Database) -> list[tuple[str, str]]:
    with database.session() as session:
        return [(event.kind, event.message) for event in session.scalars(
            select(Event).where(Event.kind.in_(("allocation_idle", "reservation_released_idle")))
            .order_by(Event.id))]


async def test_an_idle_reservation_is_marked_shown_and_released(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fleet.placement.claim import claim

    config = tmp_path / "config.yaml"
    config.write_text(FAST + IDLE)
    monkeypatch.setenv("FLEET_CONFIG", str(config))
    monkeypatch.setattr("fleet.monitor.monitor.HOUSEKEEPING_INTERVAL_S", 0.2)
    host = await gpu_hosts("quiet", sim.idle(1, host="quiet"))
    service = Fleet(database, Inventory((host.spec,), None, {}, {}, None), sim_ssh_options)
    await service.start_monitor()
    try:
        deadline = time.monotonic() + 20
        while len(await service.latest_gpus()) < 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        held = await asyncio.to_thread(claim, database, "quiet", [0], kind="reservation",
                                       owner="ann")

        async def shown_idle() -> FleetSnapshot:
            async for snapshot in service.watch():
                gpus = snapshot.hosts[0].gpus  # none until the host's first reading
                holder = gpus[0].allocation if gpus else None
                if holder is not None and holder.idle_since is not None:
                    return snapshot
            raise AssertionError("the watch ended")

        snapshot = await asyncio.wait_for(shown_idle(), 30)
        (family,) = [f for f in snapshot_metrics(snapshot) if f.name == "fleet_allocations_idle"]
        assert list(family.samples) == [({"owner": "ann", "kind": "reservation"}, 1.0)]
        deadline = time.monotonic() + 30
        while await service.allocations() != []:  # released once idle 4 s
            assert time.monotonic() < deadline, await service.allocations()
            await asyncio.sleep(0.2)
    finally:
        await service.stop_monitor()
    kinds = _kinds(database)
    assert [kind for kind, _ in kinds] == ["allocation_idle", "reservation_released_idle"]
    assert all("of ann" in message for _, message in kinds)
    (released,) = await service.allocations(active_only=False)
    assert released.id == held.allocation_ids[0] and released.release_reason == "idle"
