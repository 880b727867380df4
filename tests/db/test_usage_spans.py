"""How long an allocation counts as held, read the same way by `fleet usage`, the view
usage_daily and fair share (the view allocation_spans, migration 0015), on both backends:
never after now (a window ending in the future, or lying in it), only until its expiry for a
reservation nothing released in time, only until its task's end for a task's allocation
released when that end was noticed. Expiry itself releases at the expiry."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from db.allocations import claim_gpus, expire_reservations, list_allocations
from db.engine import Database
from db.task_runs import held_since
from db.tasks import create_task, finish_task, update_task
from fleet.context import FleetContext
from fleet.services.usage import UsageRow, UsageService
from fleet.ssh.options import SshOptions
from tests.db.conftest import SeededFleet

T = 1_700_000_040  # a whole minute, epoch seconds ("now" of the services below)
HOUR = 3600.0


def _service(database: Database, now: float = T) -> UsageService:
    return UsageService(FleetContext(database, lambda: pytest.fail("inventory read"),
                                     SshOptions(), clock=lambda: now))


async def _usage(database: Database, since: float, until: float | None = None,
                 now: float = T) -> dict[str, UsageRow]:
    report = await _service(database, now).usage(since=since, until=until)
    return {row.key: row for row in report.rows}


def _daily(database: Database) -> dict[tuple[str, str], tuple[int, int, float]]:
    """(owner, kind) → (allocations, active, gpu_seconds) of the view usage_daily."""
    with database.engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT owner, kind, allocations, active, gpu_seconds FROM usage_daily")).all()
    return {(owner, kind): (int(count), int(active), float(seconds))
            for owner, kind, count, active, seconds in rows}


async def test_a_window_ending_in_the_future_counts_what_is_held_until_now(
        database: Database, seeded: SeededFleet) -> None:
    with database.session() as session:  # bob has held one GPU for an hour, still does
        claim_gpus(session, [seeded.gpu_ids[("alpha", 0)]], kind="reservation", owner="bob",
                   now=T - 3600)
    until_now = (await _usage(database, since=T - 7200))["bob"]
    assert until_now.reserved_gpu_hours == pytest.approx(1.0)
    in_a_month = (await _usage(database, since=T - 7200, until=T + 30 * 86400))["bob"]
    assert in_a_month.reserved_gpu_hours == pytest.approx(1.0)
    assert in_a_month.reservations == 1
    # A window wholly in the future: nothing was held in it (yet).
    assert await _usage(database, since=T + 86400, until=T + 31 * 86400) == {}


async def test_an_expired_reservation_counts_until_its_expiry_and_is_released_then(
        database: Database, seeded: SeededFleet) -> None:
    with database.session() as session:  # `reserve --for 1m` an hour ago; nothing ran since
        claim_gpus(session, [seeded.gpu_ids[("alpha", 0)]], kind="reservation", owner="dora",
                   now=T - 3600, expires_at=T - 3540)
    assert (await _usage(database, since=T - 7200))["dora"].reserved_gpu_hours == \
        pytest.approx(60 / HOUR)
    assert _daily(database)[("dora", "reservation")] == (1, 0, 60)
    with database.session() as session:
        assert expire_reservations(session, now=T) == 1
    with database.session() as session:
        (expired,) = list_allocations(session, active_only=False)
    assert (expired.released_at, expired.release_reason) == (T - 3540, "expired")
    assert (await _usage(database, since=T - 7200))["dora"].reserved_gpu_hours == \
        pytest.approx(60 / HOUR)
    assert _daily(database)[("dora", "reservation")] == (1, 0, 60)


def test_expiry_keeps_a_gpus_allocations_apart(database: Database,
                                               seeded: SeededFleet) -> None:
    a0, a1 = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("alpha", 1)]
    with database.session() as session:
        claim_gpus(session, [a0], kind="reservation", owner="ann", now=1000, expires_at=1060)
        # An expiry before the claim (written by hand): released when it was made.
        claim_gpus(session, [a1], kind="reservation", owner="ann", now=1000, expires_at=900)
    with database.session() as session:  # what a claim does: expire first, then claim
        assert expire_reservations(session, now=5000) == 2
        claim_gpus(session, [a0], kind="task", owner="bob", now=5000)
    with database.session() as session:
        first, odd, second = list_allocations(session, active_only=False)
    assert (first.released_at, odd.released_at) == (1060, 1000)
    assert first.created_at <= 1060 <= second.created_at


async def test_a_task_allocation_counts_until_the_task_ended_not_until_its_release(
        database: Database, seeded: SeededFleet) -> None:
    gpu_id = seeded.gpu_ids[("alpha", 0)]
    start = T - 3600
    with database.session() as session:  # a 5-second task, its end noticed an hour later
        task_id = create_task(session, name="t5", script="t5.py", args=[], gpus_requested=1,
                              owner="eve", now=start)
        claim_gpus(session, [gpu_id], kind="task", owner="eve", now=start, task_id=task_id)
        update_task(session, task_id, state="running", started_at=start)
    with database.session() as session:
        assert finish_task(session, task_id, state="succeeded", now=start + 5, exit_code=0,
                           gpu_seconds=5.0, released_at=T)
    with database.session() as session:
        (allocation,) = list_allocations(session, active_only=False)
    assert allocation.released_at == T  # released late: the claim ordering needs that
    assert (await _usage(database, since=T - 7200))["eve"].task_gpu_hours == \
        pytest.approx(5 / HOUR)
    assert _daily(database)[("eve", "task")] == (1, 0, 5)
    with database.engine.connect() as connection:
        assert connection.scalar(text("SELECT gpu_seconds FROM task_history")) == 5


async def test_a_running_task_and_a_reservation_not_expired_yet_count_until_now(
        database: Database, seeded: SeededFleet) -> None:
    a0, a1 = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("alpha", 1)]
    with database.session() as session:
        task_id = create_task(session, name="t", script="t.py", args=[], gpus_requested=1,
                              owner="eve", now=T - 600)
        claim_gpus(session, [a0], kind="task", owner="eve", now=T - 600, task_id=task_id)
        update_task(session, task_id, state="running", started_at=T - 600)
        claim_gpus(session, [a1], kind="reservation", owner="eve", now=T - 600,
                   expires_at=T + 600)
    eve = (await _usage(database, since=T - 7200, until=T + 7200))["eve"]
    assert [eve.task_gpu_hours, eve.reserved_gpu_hours] == pytest.approx([600 / HOUR] * 2)


def test_fair_share_reads_the_same_spans(database: Database, seeded: SeededFleet) -> None:
    a0, a1 = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("alpha", 1)]
    b0 = seeded.gpu_ids[("beta", 0)]
    with database.session() as session:
        task_id = create_task(session, name="t", script="t.py", args=[], gpus_requested=1,
                              owner="eve", now=1000)
        claim_gpus(session, [a0], kind="task", owner="eve", now=1000, task_id=task_id)
        update_task(session, task_id, state="running", started_at=1000)
        claim_gpus(session, [a1], kind="reservation", owner="eve", now=1000, expires_at=1060)
        claim_gpus(session, [b0], kind="reservation", owner="eve", now=1000)
    with database.session() as session:
        finish_task(session, task_id, state="succeeded", now=1005, exit_code=0,
                    released_at=4000)
    with database.session() as session:
        assert sorted(held_since(session, ["eve"], 0), key=str) == sorted(
            [("eve", 1000, 1005), ("eve", 1000, 1060), ("eve", 1000, None)], key=str)
        assert held_since(session, ["eve"], 1060) == [("eve", 1000, None)]
