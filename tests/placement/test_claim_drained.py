"""A claim re-reads the drain flags in its own transaction: a drain placement has not seen yet
(written by another process since, or not yet in a running monitor's view) keeps work off."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from db.allocation_details import allocation_details
from db.engine import Database, open_database
from db.errors import DatabaseError
from db.sql import SessionReader
from db.tasks import create_task
from fleet.errors import AllocationConflict, GpuDrained, NoPlacement
from fleet.health.drain import set_drain
from fleet.placement.claim import claim, claim_gang, refuse_drained
from fleet.placement.request import PlacementRequest
from fleet.sim.build import SimTools
from fleet.ssh.options import SshOptions
from tests.fixtures.sshserver import SimSshHostFactory
from tests.placement.conftest import Seeded
from tests.services.test_drain_live import monitored_box


def _drain(database: Database, target: str, reason: str | None, drained: bool = True) -> None:
    with database.session() as session:
        set_drain(session, target, drained=drained, reason=reason, by="test", now=1000)


def _active(database: Database) -> list[tuple[str, int]]:
    with database.session() as session:
        return [(row.host, row.gpu_idx) for row in allocation_details(SessionReader(session))]


def test_a_claim_refuses_a_drained_gpu_or_a_gpu_of_a_drained_host(
        database: Database, seeded: Seeded) -> None:
    _drain(database, "alpha:1", "fan")
    _drain(database, "beta", None)
    with pytest.raises(GpuDrained, match=r"^alpha GPU \[1\]: GPU drained: fan$") as caught:
        claim(database, "alpha", [0, 1], kind="task", owner="ann")
    assert isinstance(caught.value, AllocationConflict) and caught.value.exit_code == 6
    with pytest.raises(GpuDrained, match=r"^beta GPU \[0\]: host drained$"):
        claim(database, "beta", [0], kind="reservation", owner="ann")
    assert _active(database) == []  # all or none: alpha:0 was not claimed either

    assert claim(database, "alpha", [0], kind="task", owner="ann").gpu_indices == (0,)
    _drain(database, "alpha:1", None, drained=False)
    _drain(database, "beta", None, drained=False)
    claim(database, "alpha", [1], kind="task", owner="ann")
    claim(database, "beta", [0], kind="task", owner="ann")
    assert sorted(_active(database)) == [("alpha", 0), ("alpha", 1), ("beta", 0)]


def test_a_gang_claim_with_one_drained_node_claims_nothing(
        database: Database, seeded: Seeded) -> None:
    _drain(database, "beta", "rack move")

    def task_ids(session: Session) -> list[int]:  # the gang's member rows, in the claim's
        return [create_task(session, name=f"gang[{rank}]", script="t.py", args=[],
                            gpus_requested=1, owner="ann", now=1000) for rank in range(2)]

    with pytest.raises(GpuDrained, match=r"beta GPU \[0\]: host drained: rack move"):
        claim_gang(database, [("alpha", [0, 1]), ("beta", [0])], owner="ann",
                   task_ids=task_ids)
    assert _active(database) == []
    with database.session() as session:  # the member rows went with the claim
        assert SessionReader(session).first("SELECT count(*) FROM tasks") == (0,)


@pytest.mark.postgresql_only  # SQLite serialises writing transactions (one write lock)
def test_on_postgresql_a_claim_holds_back_a_drain_until_it_commits(
        database: Database, seeded: Seeded, db_url: str) -> None:
    """The claim reads drain flags under the drain lock (shared): a drain waits for the
    claim's transaction (here until its lock timeout), so a drain and a claim are ordered."""
    other = open_database(db_url, migrate=False)
    outcome: list[BaseException | None] = []

    def drain_meanwhile() -> None:
        try:
            with other.session() as session:
                session.execute(text("SET LOCAL lock_timeout = '300ms'"))
                set_drain(session, "alpha", drained=True, reason="x", by="test", now=1000)
            outcome.append(None)
        except DatabaseError as exc:
            outcome.append(exc)

    try:
        with database.session() as session:
            refuse_drained(session, "alpha", [0, 1])
            worker = threading.Thread(target=drain_meanwhile)
            worker.start()
            worker.join(timeout=30)
        assert len(outcome) == 1 and "canceling statement due to lock timeout" in str(outcome[0])
        drain_meanwhile()  # once the claim's transaction ended, the drain goes through
        assert outcome[1] is None
        with pytest.raises(GpuDrained):
            claim(database, "alpha", [0], kind="task", owner="ann")
    finally:
        other.close()


@pytest.mark.postgresql_only  # SQLite serialises writing transactions (one write lock)
def test_on_postgresql_a_claim_does_not_wait_for_a_flush_holding_host_and_gpu_rows(
        database: Database, seeded: Seeded, db_url: str) -> None:
    """The monitor's flush updates hosts and GPU rows in its transaction; the claim's drain
    check takes no row lock, so it neither waits for a flush nor can deadlock with one."""
    flush = open_database(db_url, migrate=False)
    try:
        with flush.session() as flushing:
            flushing.execute(text("UPDATE hosts SET last_seen = 2000 WHERE name = 'alpha'"))
            flushing.execute(text("UPDATE gpus SET last_seen = 2000 WHERE host_id = "
                                  "(SELECT id FROM hosts WHERE name = 'alpha')"))
            with database.session() as session:
                session.execute(text("SET LOCAL lock_timeout = '300ms'"))
                refuse_drained(session, "alpha", [0, 1])  # no lock timeout: nothing waited
    finally:
        flush.close()


async def test_placement_learns_a_drain_its_live_view_missed_from_the_refused_claim(
        tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
        sim_ssh_options: SshOptions) -> None:
    """A running monitor reads drains written by another process at its next flush; a claim in
    between is refused, the live view is refreshed, and placement runs again without the
    host (here: nothing else fits)."""
    fleet = await monitored_box(tmp_path, sim_ssh_host, sim_tools, sim_ssh_options)
    other_process = open_database(f"sqlite:///{tmp_path / 'fleet.db'}", migrate=False)
    try:
        _drain(other_process, "box", "rack move")
        view = fleet.monitor_service.snapshot()
        assert view is not None and not view.hosts[0].drained  # the live view missed it
        with pytest.raises(NoPlacement, match="host drained: rack move"):
            await fleet.place_and_claim(PlacementRequest(gpus=1, max_sample_age_s=3600),
                                        owner="ann")
        view = fleet.monitor_service.snapshot()
        assert view is not None and view.hosts[0].drain_reason == "rack move"
        assert _active(fleet.database) == []
    finally:
        other_process.close()
        await fleet.monitor_service.stop_monitor()
        fleet.close()
