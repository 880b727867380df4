"""Allocations with their GPU, host and task read in plain SQL, and whether one is due to expire."""

from __future__ import annotations

from db.allocation_details import allocation_details, gpu_ids_by_index, reservations_due
from db.allocations import claim_gpus, release_allocations
from db.engine import Database
from db.sql import IN_LIST_CHUNK, SessionReader
from db.tasks import create_task
from tests.db.conftest import SeededFleet


def _holdings(database: Database, seeded: SeededFleet) -> tuple[int, int, int, int]:
    """A task's GPU (alpha 0), ann's expiring reservation (alpha 1), bob's open-ended one
    (beta 0) and a released one of bob's: their allocation ids."""
    with database.session() as session:
        task = create_task(session, name="train", script="train.py", args=[],
                           gpus_requested=1, owner="ann", now=10, state="running")
        (task_gpu,) = claim_gpus(session, [seeded.gpu_ids[("alpha", 0)]], kind="task",
                                 owner="ann", now=10, task_id=task)
        (released,) = claim_gpus(session, [seeded.gpu_ids[("alpha", 1)]], kind="reservation",
                                 owner="bob", now=11, expires_at=15)
        release_allocations(session, now=12, reason="released by operator",
                            allocation_ids=[released])
        (expiring,) = claim_gpus(session, [seeded.gpu_ids[("alpha", 1)]], kind="reservation",
                                 owner="ann", now=13, note="debugging", expires_at=100)
        (open_ended,) = claim_gpus(session, [seeded.gpu_ids[("beta", 0)]], kind="reservation",
                                   owner="bob", now=14)
    return task_gpu, expiring, open_ended, released


def test_details_filter_and_join_their_gpu_host_and_task(database: Database,
                                                          seeded: SeededFleet) -> None:
    task_gpu, expiring, open_ended, released = _holdings(database, seeded)
    with database.reader() as reader:
        active = allocation_details(reader)
        every = allocation_details(reader, active_only=False)
        assert [row.id for row in allocation_details(reader, owner="bob")] == [open_ended]
        assert [row.id for row in allocation_details(reader, active_only=False, owner="bob",
                                                     kind="reservation")] == [released, open_ended]
        # ids in any order, repeated, unknown, over more than one IN list: by id
        asked = [open_ended, *range(10_000, 10_000 + IN_LIST_CHUNK), task_gpu, released, task_gpu]
        assert [row.id for row in allocation_details(reader, active_only=False,
                                                     allocation_ids=asked)] == \
            sorted([task_gpu, released, open_ended])
        assert allocation_details(reader, allocation_ids=[]) == []
    assert [row.id for row in active] == [task_gpu, expiring, open_ended]
    assert [row.id for row in every] == sorted([task_gpu, expiring, open_ended, released])
    task_row = active[0]
    assert (task_row.host, task_row.gpu_idx, task_row.uuid, task_row.kind, task_row.task_name,
            task_row.task_state) == ("alpha", 0, "GPU-alpha-0", "task", "train", "running")
    reservation = active[1]
    assert (reservation.task_id, reservation.task_name, reservation.note,
            reservation.expires_at, reservation.active) == (None, None, "debugging", 100, True)
    gone = next(row for row in every if row.id == released)
    assert (gone.released_at, gone.release_reason, gone.active) == (12, "released by operator",
                                                                    False)
    with database.session() as session:  # a write transaction reads the same
        assert allocation_details(SessionReader(session), active_only=False) == every


def test_gpu_ids_by_index_knows_only_stored_gpus(database: Database,
                                                 seeded: SeededFleet) -> None:
    with database.reader() as reader:
        assert gpu_ids_by_index(reader, "alpha", [1, 0, 7, 1]) == {
            0: seeded.gpu_ids[("alpha", 0)], 1: seeded.gpu_ids[("alpha", 1)]}
        assert gpu_ids_by_index(reader, "beta", [1]) == {}
        assert gpu_ids_by_index(reader, "nosuch", [0]) == {}
        assert gpu_ids_by_index(reader, "alpha", []) == {}


def test_a_reservation_is_due_once_its_expiry_has_come(database: Database,
                                                       seeded: SeededFleet) -> None:
    _holdings(database, seeded)  # the released one expired at 15: it no longer counts
    with database.reader() as reader:
        assert not reservations_due(reader, 99)
        assert reservations_due(reader, 100)
    with database.session() as session:
        release_allocations(session, now=50, reason="released by operator",
                            allocation_ids=[row.id for row in allocation_details(
                                SessionReader(session), owner="ann", kind="reservation")])
    with database.reader() as reader:
        assert not reservations_due(reader, 10**9)  # open-ended and task holdings never are
