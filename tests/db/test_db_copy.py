"""`fleet db copy`: a whole history SQLite → PostgreSQL and back, verified, all-or-nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from db.allocations import claim_gpus
from db.candidates import CandidateIn, upsert_candidate
from db.copy import copy_database, tables
from db.engine import Database, open_database
from db.errors import DatabaseError
from db.events import add_event
from db.retention import rollup_gpu_minutes
from db.samples import record_samples
from db.tasks import create_task
from db.types import GpuSampleIn, HostSampleIn
from fleet.cli.main import main
from tests.db.conftest import SeededFleet
from tests.fixtures.database import PgServer

BASE_MS = 1_700_000_040_000


def _fill(database: Database, seeded: SeededFleet) -> None:
    """A little of everything: samples across minutes (+ rollups), a task holding a GPU, a
    reservation, events, a discovery candidate."""
    a0, b0 = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("beta", 0)]
    with database.sessionmaker() as session:
        record_samples(
            session,
            [HostSampleIn(seeded.host_ids["alpha"], BASE_MS + i * 10_000, load_1m=0.5 * i,
                          net_rx_bytes=2**40 + i) for i in range(30)],
            [GpuSampleIn(gpu, BASE_MS + i * 10_000, utilization_gpu_pct=float(i),
                         memory_used_bytes=i << 30, temperature_c=40.0 + i, lost=i == 7,
                         clock_sm_mhz=1500) for i in range(30) for gpu in (a0, b0)]
            # A sample of a missing GPU (no foreign key refuses it): copied like any other.
            + [GpuSampleIn(424242, BASE_MS)])
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=BASE_MS + 300_000)
        task = create_task(session, name="train", script="train.py", args=["--lr", "0.1"],
                           gpus_requested=1, owner="ada", now=1000, state="running")
        claim_gpus(session, [a0], kind="task", owner="ada", now=1000, task_id=task)
        claim_gpus(session, [b0], kind="reservation", owner="bob", now=1001, note="demo",
                   expires_at=9999)
        add_event(session, ts=1002, kind="gpu_hot", severity="warning", message="hot",
                  host_id=seeded.host_ids["alpha"], gpu_id=a0, data={"temperature_c": 91})
        upsert_candidate(session, CandidateIn("cand", "10.0.0.9", 22, "_ssh._tcp", None, 22),
                         now=1003)


def _dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, ordered by primary key."""
    database = open_database(url, migrate=False)
    try:
        with database.engine.connect() as connection:
            return {table.name: [tuple(row) for row in connection.execute(
                select(table).order_by(*table.primary_key.columns))] for table in tables()}
    finally:
        database.close()


@pytest.fixture
def pg_target(pg_server: PgServer) -> Iterator[str]:
    name = pg_server.create_empty_database("copy")
    yield pg_server.cluster.url(name)
    pg_server.drop_database(name)


@pytest.mark.sqlite_only
def test_sqlite_to_postgresql_and_back_keeps_every_row(
    database: Database, seeded: SeededFleet, pg_target: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _fill(database, seeded)
    original = _dump(database.url)
    assert all(original[name] for name in ("gpu_samples", "gpu_samples_1m", "allocations",
                                           "tasks", "events", "candidates"))
    code = main(["db", "copy", database.url, pg_target])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "row counts verified per table" in captured.out
    assert "gpu_samples: 61 rows" in captured.err and "61/61" in captured.err
    assert _dump(pg_target) == original

    # The copy is a working fleet database: views answer, new ids follow the copied ones.
    copied = open_database(pg_target)
    try:
        with copied.session() as session:
            new_task = create_task(session, name="next", script="x.py", args=[],
                                   gpus_requested=0, owner="ada", now=2000)
        assert new_task > max(row[0] for row in original["tasks"])
        with copied.engine.connect() as connection:
            assert connection.execute(text(
                "SELECT count(*) FROM active_allocations")).scalar() == 2
    finally:
        copied.close()

    back = tmp_path / "back.db"
    code = main(["--json", "db", "copy", pg_target, str(back)])
    out = capsys.readouterr().out
    assert code == 0
    round_trip = _dump(f"sqlite:///{back}")
    assert round_trip["gpu_samples"] == original["gpu_samples"]
    assert len(round_trip["tasks"]) == len(original["tasks"]) + 1
    assert '"verified": true' in out


@pytest.mark.sqlite_only
def test_a_target_holding_data_is_refused_unless_force(
    database: Database, seeded: SeededFleet, pg_target: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _fill(database, seeded)
    assert main(["db", "copy", database.url, pg_target]) == 0
    capsys.readouterr()
    with database.session() as session:
        add_event(session, ts=5000, kind="later", severity="info", message="after the copy")
    code = main(["db", "copy", database.url, pg_target.replace("postgres@", "postgres:pw@")])
    err = capsys.readouterr().err
    assert code == 4 and "already holds fleet data" in err and "--force" in err
    assert "postgres:***@" in err and ":pw@" not in err
    assert len(_dump(pg_target)["events"]) == 1
    assert main(["db", "copy", database.url, pg_target, "--force"]) == 0
    assert _dump(pg_target) == _dump(database.url)


@pytest.mark.sqlite_only
def test_a_copy_that_fails_midway_leaves_the_target_unchanged(
    database: Database, seeded: SeededFleet, pg_target: str
) -> None:
    _fill(database, seeded)
    copy_database(database.url, pg_target)
    before = _dump(pg_target)
    with database.session() as session:
        add_event(session, ts=5000, kind="later", severity="info", message="after the copy")

    def interrupt(table: str, done: int, total: int) -> None:
        if table == "gpu_samples" and done >= 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        copy_database(database.url, pg_target, force=True, batch_rows=10, progress=interrupt)
    assert _dump(pg_target) == before
    with pytest.raises(DatabaseError, match="does not exist"):
        copy_database(str(Path(database.url.removeprefix("sqlite:///")).with_name("none.db")),
                      pg_target)
