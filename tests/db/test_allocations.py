"""Allocations: the database itself refuses a second active claim on a GPU, across processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from db.allocations import (
    active_gpu_ids,
    claim_gpus,
    expire_reservations,
    list_allocations,
    release_allocations,
)
from db.engine import Database
from db.errors import AllocationConflict
from db.models import Allocation
from tests.db.conftest import SeededFleet, race


def _raw_claim(database: Database, gpu_id: int, owner: str) -> None:
    with database.sessionmaker() as session:
        session.execute(
            insert(Allocation).values(gpu_id=gpu_id, kind="reservation", owner=owner, created_at=1)
        )
        session.commit()


def test_partial_unique_index_refuses_second_active_allocation(
    database: Database, seeded: SeededFleet
) -> None:
    gpu = seeded.gpu_ids[("alpha", 0)]
    _raw_claim(database, gpu, "ann")
    with pytest.raises(IntegrityError):
        _raw_claim(database, gpu, "bob")
    _raw_claim(database, seeded.gpu_ids[("alpha", 1)], "bob")  # another GPU is free
    with database.session() as session:
        (held,) = [row for row in list_allocations(session) if row.gpu_id == gpu]
        assert release_allocations(session, now=2, reason="done", allocation_ids=[held.id]) == 1
    _raw_claim(database, gpu, "bob")  # allowed again once released
    with database.session() as session:
        owners = {row.gpu_id: row.owner for row in list_allocations(session)}
    assert owners == {gpu: "bob", seeded.gpu_ids[("alpha", 1)]: "bob"}


def test_claim_is_all_or_nothing(database: Database, seeded: SeededFleet) -> None:
    a0, a1 = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("alpha", 1)]
    with database.session() as session:
        claim_gpus(session, [a1], kind="reservation", owner="ann", now=10)
    with pytest.raises(AllocationConflict) as caught, database.session() as session:
        claim_gpus(session, [a0, a1], kind="task", owner="bob", now=11)
    assert caught.value.gpu_ids == (a1,)
    with database.session() as session:
        assert active_gpu_ids(session) == {a1}


def test_release_by_task_and_expiry(database: Database, seeded: SeededFleet) -> None:
    a0, a1 = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("alpha", 1)]
    b0 = seeded.gpu_ids[("beta", 0)]
    with database.session() as session:
        claim_gpus(session, [a0], kind="reservation", owner="ann", now=10, expires_at=100)
        claim_gpus(session, [a1], kind="reservation", owner="ann", now=10, expires_at=500)
        claim_gpus(session, [b0], kind="reservation", owner="ann", now=10)
    with database.session() as session:
        assert expire_reservations(session, now=100) == 1
        assert active_gpu_ids(session) == {a1, b0}
        assert release_allocations(session, now=101, reason="x", allocation_ids=[]) == 0
        with pytest.raises(ValueError, match="needs allocation_ids or task_id"):
            release_allocations(session, now=101, reason="x")


CLAIM_ON_GO = """
from db.engine import open_database
from db.allocations import claim_gpus
from db.errors import AllocationConflict
path, gpu_id, owner = sys.argv[2], int(sys.argv[3]), sys.argv[4]
database = open_database(path)
ready_then_wait_for_go(sys.argv[1])
try:
    with database.session() as session:
        claim_gpus(session, [gpu_id], kind="task", owner=owner, now=int(time.time()))
        time.sleep(0.2)  # hold the transaction open so the others really overlap it
    print("won")
except AllocationConflict:
    print("lost")
database.close()
"""


def test_concurrent_processes_claiming_one_gpu_exactly_one_wins(
    database: Database, seeded: SeededFleet, db_url: str, tmp_path: Path
) -> None:
    gpu = seeded.gpu_ids[("beta", 0)]
    arguments = [[db_url, str(gpu), f"racer{i}"] for i in range(4)]
    verdicts = race(CLAIM_ON_GO, tmp_path / "go", arguments)
    assert sorted(verdicts) == ["lost", "lost", "lost", "won"]
    with database.session() as session:
        (allocation,) = list_allocations(session)
    assert allocation.gpu_id == gpu
    assert allocation.owner == f"racer{verdicts.index('won')}"
