"""`fleet usage` counts one reservation per claim (one `fleet reserve`, however many GPUs), not
per owner and second, on both backends: a claim's rows are one INSERT on one host, with one
owner, time, expiry and note, and consecutive ids."""

from __future__ import annotations

import pytest

from db.allocations import claim_gpus, release_allocations
from db.engine import Database
from db.gpus import upsert_gpus
from db.types import GpuFacts
from db.usage import holdings
from fleet.context import FleetContext
from fleet.services.usage import UsageService
from fleet.ssh.options import SshOptions
from tests.db.conftest import SeededFleet

T = 1_700_000_040


async def _reservations(database: Database, since: float = T - 3600) -> int:
    service = UsageService(FleetContext(database, lambda: pytest.fail("inventory read"),
                                        SshOptions(), clock=lambda: T))
    rows = {row.key: row for row in (await service.usage(since=since)).rows}
    return rows["fay"].reservations


def _reserve(database: Database, gpu_ids: list[int], *, owner: str = "fay",
             note: str | None = None, expires_at: int | None = None,
             now: int = T - 600) -> list[int]:
    with database.session() as session:  # one `fleet reserve`: one transaction, one INSERT
        return claim_gpus(session, gpu_ids, kind="reservation", owner=owner, now=now,
                          note=note, expires_at=expires_at)


async def test_two_reserves_in_one_second_on_two_hosts_are_two(
        database: Database, seeded: SeededFleet) -> None:
    _reserve(database, [seeded.gpu_ids[("alpha", 0)]])
    _reserve(database, [seeded.gpu_ids[("beta", 0)]])
    assert await _reservations(database) == 2


async def test_two_reserves_in_one_second_with_other_notes_are_two(
        database: Database, seeded: SeededFleet) -> None:
    _reserve(database, [seeded.gpu_ids[("alpha", 0)]], note="run 1")
    _reserve(database, [seeded.gpu_ids[("alpha", 1)]], note="run 2")
    assert await _reservations(database) == 2


async def test_two_reserves_alike_with_another_claim_between_are_two(
        database: Database, seeded: SeededFleet) -> None:
    _reserve(database, [seeded.gpu_ids[("alpha", 0)]], expires_at=T)
    _reserve(database, [seeded.gpu_ids[("beta", 0)]], owner="gus")
    _reserve(database, [seeded.gpu_ids[("alpha", 1)]], expires_at=T)
    assert await _reservations(database) == 2  # fay's two (gus has his own row)


async def test_a_reserve_of_several_gpus_is_one_even_when_part_was_released_before(
        database: Database, seeded: SeededFleet) -> None:
    with database.session() as session:  # alpha gets four GPUs
        ids = upsert_gpus(session, seeded.host_ids["alpha"], [
            GpuFacts(i, f"GPU-alpha-{i}", "Sim H100", memory_total_bytes=80 << 30)
            for i in range(4)], now=1000).ids
    _reserve(database, [ids[0]], owner="gus", now=T - 7200)
    first, middle, last = _reserve(database, [ids[1], ids[2], ids[3]], now=T - 7200)
    with database.session() as session:  # `fleet release` of one of its GPUs, long ago
        release_allocations(session, now=T - 5000, reason="released", allocation_ids=[middle])
    with database.reader() as reader:
        held = [h for h in holdings(reader, T - 3600, T, T) if h.owner == "fay"]
    assert [(h.allocation_id, h.claim_id) for h in held] == [(first, first), (last, first)]
    assert await _reservations(database) == 1


async def test_one_reserve_of_several_gpus_is_one_and_tasks_are_none(
        database: Database, seeded: SeededFleet) -> None:
    _reserve(database, [seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("alpha", 1)]])
    with database.session() as session:
        claim_gpus(session, [seeded.gpu_ids[("beta", 0)]], kind="task", owner="fay",
                   now=T - 600)
    assert await _reservations(database) == 1
