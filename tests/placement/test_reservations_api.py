"""The placement API in-process: expiry, release rules, fresh data needs no probe, snapshots."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import fleet.service
from db.tasks import create_task, finish_task, update_task
from fleet.errors import AllocationConflict, ConfigError, DispatchError, NoPlacement
from fleet.model import HostSpec
from fleet.placement.claim import claim
from fleet.placement.request import MemorySize, PlacementRequest
from fleet.placement.reservations import list_allocations, release
from fleet.reports import GpuReport, HostReport, ProbeReport
from fleet.snapshot import FleetSnapshot, GpuSnapshot, HostSnapshot
from tests.placement.fleetdb import GIB, seed_fresh_fleet


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[fleet.service.Fleet]:
    files = seed_fresh_fleet(tmp_path, {"n1": 2, "n2": 2})
    async with fleet.service.open(str(files.db_path), files.inventory_path) as opened:
        yield opened


async def test_reservation_expires_and_frees_its_gpus(service: fleet.service.Fleet) -> None:
    reserved_at = time.time()  # the hold lasts until at least reserved_at + 60
    held = await service.reserve(PlacementRequest(gpus=2, hosts="n1"), duration_s=60,
                                 note="short", owner="ann")
    assert (held.host, held.gpu_indices, held.kind) == ("n1", (0, 1), "reservation")
    assert held.cuda_visible_devices == "GPU-n1-0,GPU-n1-1"
    with pytest.raises(NoPlacement) as caught:
        await service.place_and_claim(PlacementRequest(gpus=2, hosts="n1"))
    assert "n1:0: reserved by ann" in str(caught.value)
    assert caught.value.exit_code == 7 and "Excluded:" in caught.value.explanation

    later = time.time() + 61
    assert [row.id for row in list_allocations(service.database, now=reserved_at + 58)] == list(
        held.allocation_ids)
    assert list_allocations(service.database, now=later) == []
    (expired, _) = list_allocations(service.database, active_only=False)
    assert (expired.release_reason, expired.note, expired.owner) == ("expired", "short", "ann")


async def test_a_reservation_holds_its_whole_duration_however_long_placement_took(
        service: fleet.service.Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    real_place = service.placement_service.place

    async def slow_place(*args: object, **kwargs: object) -> object:
        await asyncio.sleep(1.2)  # placement (a probe of stale hosts) takes its time
        return await real_place(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(service.placement_service, "place", slow_place)
    held = await service.reserve(PlacementRequest(gpus=1), duration_s=60, owner="ann")
    assert held.expires_at is not None and held.expires_at - held.created_at == 60
    picked = await service.reserve_gpus("n2", [1], duration_s=0.5, owner="ann")
    assert picked.expires_at is not None and picked.expires_at - picked.created_at == 1


async def test_claim_releases_expired_holds_in_the_same_transaction(
    service: fleet.service.Fleet,
) -> None:
    now = int(time.time())
    claim(service.database, "n2", [0], kind="reservation", owner="ann", expires_at=now + 10,
          now=now)
    with pytest.raises(AllocationConflict, match=r"n2 GPU \[0\] already allocated"):
        claim(service.database, "n2", [0, 1], kind="task", owner="bob", now=now + 5)
    taken = claim(service.database, "n2", [0, 1], kind="task", owner="bob", now=now + 10)
    assert taken.gpu_uuids == ("GPU-n2-0", "GPU-n2-1")
    with pytest.raises(DispatchError, match=r"n2 has no GPU \[7\]"):
        claim(service.database, "n2", [7], kind="task", owner="bob")


async def test_release_refuses_a_running_tasks_gpus_unless_forced(
    service: fleet.service.Fleet,
) -> None:
    with service.database.session() as session:
        task_id = create_task(session, name="train", script="t.py", args=[], gpus_requested=1,
                              owner="ann", now=int(time.time()))
    held = await service.place_and_claim(PlacementRequest(), task_id=task_id, owner="ann")
    with service.database.session() as session:
        update_task(session, task_id, state="running")
    with pytest.raises(DispatchError, match=f"belongs to task {task_id} \\(running\\)"):
        await service.release(held.allocation_ids)
    assert await service.release(held.allocation_ids, force=True) == list(held.allocation_ids)
    with service.database.session() as session:
        assert finish_task(session, task_id, state="cancelled", now=int(time.time()))
    with pytest.raises(ConfigError, match="no allocation ids"):
        release(service.database, [])


async def test_fresh_database_data_is_used_without_probing(service: fleet.service.Fleet) -> None:
    # The inventory's hosts listen nowhere (127.0.0.N port 1): a probe would mark them down.
    result = await service.place(PlacementRequest(gpus=2, min_free_memory=MemorySize(GIB)))
    assert result.placed and result.source == "database"
    assert (result.host, result.gpu_indices) == ("n1", (0, 1))


async def test_stale_data_is_probed_once_and_down_hosts_explained(tmp_path: Path) -> None:
    files = seed_fresh_fleet(tmp_path, {"n1": 1}, now=time.time() - 3600)
    async with fleet.service.open(str(files.db_path), files.inventory_path) as service:
        started = time.monotonic()
        result = await service.place(PlacementRequest())
        assert time.monotonic() - started < 10
    assert not result.placed and result.source == "probe"
    (exclusion,) = result.exclusions
    assert exclusion.index is None and exclusion.reasons[0].startswith("host is down")
    assert "unreachable" in exclusion.reasons[0]  # the probe's outcome, kept as the reason


async def test_unknown_host_pattern_is_an_error(service: fleet.service.Fleet) -> None:
    with pytest.raises(ConfigError, match="matches no host"):
        await service.place(PlacementRequest(hosts="nope*"))


async def test_monitor_snapshot_is_used_when_given(service: fleet.service.Fleet) -> None:
    now = time.time()
    busy = GpuReport(index=0, uuid="GPU-n1-0", name="Sim H100", memory_total_bytes=80 * GIB,
                     memory_used_bytes=0, utilization_gpu_pct=95.0, temperature_c=40.0)
    idle = GpuReport(index=1, uuid="GPU-n1-1", name="Sim H100", memory_total_bytes=80 * GIB,
                     memory_used_bytes=0, utilization_gpu_pct=0.0, temperature_c=40.0)
    report = ProbeReport(schema=1, timestamp=now, host=HostReport(), gpus=(busy, idle))
    snapshot = FleetSnapshot(taken_at=now, hosts=(HostSnapshot(
        spec=HostSpec("n1", "127.0.0.2", port=1), state="up", report=report, last_seen=now,
        gpus=(GpuSnapshot("n1", 0, busy), GpuSnapshot("n1", 1, idle))),))
    result = await service.place(PlacementRequest(), snapshot=snapshot)
    assert (result.source, result.host, result.gpu_indices) == ("monitor", "n1", (1,))
    held = await service.place_and_claim(PlacementRequest(), snapshot=snapshot)
    assert (held.host, held.gpu_indices) == ("n1", (1,))
    # The database's allocations win over the snapshot's (empty) view of them.
    again = await service.place_and_claim(PlacementRequest(), snapshot=snapshot)
    assert (again.host, again.gpu_indices) == ("n1", (0,))
