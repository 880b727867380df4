"""`fleet usage` figures against sums worked out by hand over one fixture history, on both
backends: holdings cut to the window, busy time from rollups (raw samples only after the rollup
watermark, partial minutes pro rata), reservations counted once, failures and median waits."""

from __future__ import annotations

import json
import time

import pytest

from db.engine import Database
from db.models import Allocation, GpuSample, GpuSampleMinute, Task
from fleet.context import FleetContext
from fleet.errors import ConfigError
from fleet.services.usage import NO_GROUP, UsageReport, UsageRow, UsageService
from fleet.ssh.options import SshOptions
from tests.db.conftest import SeededFleet
from tests.fixtures.cli import FleetCli

T = 1_700_000_040  # a whole minute, epoch seconds
SINCE, UNTIL = T - 3600, T + 7200
HOUR = 3600.0


def _task(session: object, task_id: int, owner: str, host_id: int, state: str,
          submitted: int, started: int, ended: int) -> None:
    session.add(Task(id=task_id, name=f"t{task_id}", script="x.py", args_json="[]",  # type: ignore[attr-defined]
                     host_id=host_id, state=state, gpus_requested=1, constraints_json="{}",
                     priority=0, owner=owner, submitted_at=submitted, started_at=started,
                     ended_at=ended))


@pytest.fixture
def history(database: Database, seeded: SeededFleet) -> SeededFleet:
    """ann: task 1 on alpha:0 [T, T+1h), busy 100 % for 30 rolled-up minutes then 50 % in raw
    samples; task 3 on alpha:1 [T-2h, T-50min), cut to 600 s. bob: failed task 2 on beta:0
    [T-3500, T-1700) at 80 % (rollups, partial first and last minutes); two reservations
    (alpha:1, beta:0) from T+600, still active."""
    alpha, beta = seeded.host_ids["alpha"], seeded.host_ids["beta"]
    a0, a1, b0 = (seeded.gpu_ids[key] for key in (("alpha", 0), ("alpha", 1), ("beta", 0)))
    with database.session() as session:
        _task(session, 1, "ann", alpha, "succeeded", T - 120, T, T + 3600)
        _task(session, 2, "bob", beta, "failed", T - 3550, T - 3500, T - 1700)
        _task(session, 3, "ann", alpha, "succeeded", T - 7300, T - 7200, T - 3000)
        session.flush()
        session.add_all([
            Allocation(gpu_id=a0, task_id=1, kind="task", owner="ann", created_at=T,
                       released_at=T + 3600),
            Allocation(gpu_id=b0, task_id=2, kind="task", owner="bob", created_at=T - 3500,
                       released_at=T - 1700),
            Allocation(gpu_id=a1, task_id=3, kind="task", owner="ann", created_at=T - 7200,
                       released_at=T - 3000),
            Allocation(gpu_id=a1, kind="reservation", owner="bob", created_at=T + 600),
            Allocation(gpu_id=b0, kind="reservation", owner="bob", created_at=T + 600),
        ])
        session.add_all(GpuSampleMinute(gpu_id=a0, bucket_ts=(T + 60 * m) * 1000, samples=1,
                                        util_avg=100.0) for m in range(30))
        session.add_all(GpuSampleMinute(gpu_id=b0, bucket_ts=(T - 3540 + 60 * m) * 1000,
                                        samples=1, util_avg=80.0) for m in range(31))
        # Before the watermark (T+30 min) the rollups count, not this raw sample.
        session.add(GpuSample(gpu_id=a0, ts=(T + 10) * 1000, utilization_gpu_pct=0.0, lost=False))
        session.add_all(GpuSample(gpu_id=a0, ts=(T + 1800 + 60 * m + 5) * 1000,
                                  utilization_gpu_pct=50.0, lost=False) for m in range(30))
    return seeded


def _service(database: Database) -> UsageService:
    return UsageService(FleetContext(database, lambda: pytest.fail("inventory read"),
                                     SshOptions()))


def _rows(report: UsageReport) -> dict[str, UsageRow]:
    return {row.key: row for row in report.rows}


@pytest.mark.usefixtures("history")
async def test_usage_per_user_equals_the_hand_computed_sums(database: Database) -> None:
    report = await _service(database).usage(since=SINCE, until=UNTIL)
    ann, bob = _rows(report)["ann"], _rows(report)["bob"]
    assert ann.task_gpu_hours == pytest.approx(1 + 600 / HOUR)
    assert ann.busy_gpu_hours == pytest.approx((1800 * 1.0 + 1800 * 0.5) / HOUR)
    assert ann.efficiency == pytest.approx(0.75 / (1 + 600 / HOUR))
    assert (ann.tasks, ann.failures, ann.median_wait_s, ann.reservations) == (1, 0, 120, 0)
    assert ann.reservation_use is None
    assert bob.task_gpu_hours == pytest.approx(1800 / HOUR)
    assert bob.reserved_gpu_hours == pytest.approx(2 * (UNTIL - T - 600) / HOUR)
    assert bob.busy_gpu_hours == pytest.approx(1800 * 0.8 / HOUR)
    # two reservations: one claim holds GPUs of one host only (alpha:1 and beta:0 are two)
    assert (bob.tasks, bob.failures, bob.median_wait_s, bob.reservations) == (1, 1, 50, 2)
    assert bob.reservation_use == 0
    assert [row.key for row in report.rows] == ["bob", "ann"]  # most GPU-hours first


@pytest.mark.usefixtures("history")
async def test_usage_by_host_model_and_group(database: Database) -> None:
    service = _service(database)
    hosts = _rows(await service.usage(since=SINCE, until=UNTIL, by="host"))
    assert hosts["alpha"].gpu_hours == pytest.approx((3600 + 600 + UNTIL - T - 600) / HOUR)
    assert hosts["beta"].gpu_hours == pytest.approx((1800 + UNTIL - T - 600) / HOUR)
    assert (hosts["alpha"].tasks, hosts["beta"].failures) == (1, 1)
    models = _rows(await service.usage(since=SINCE, until=UNTIL, by="gpu-model"))
    assert list(models) == ["Sim H100"]
    assert models["Sim H100"].gpu_hours == pytest.approx(
        hosts["alpha"].gpu_hours + hosts["beta"].gpu_hours)
    groups = _rows(await service.usage(since=SINCE, until=UNTIL, by="group"))
    assert list(groups) == [NO_GROUP]  # ann and bob are no Unix users here


@pytest.mark.usefixtures("history")
async def test_a_window_before_everything_is_empty_and_bad_windows_are_refused(
        database: Database) -> None:
    service = _service(database)
    assert (await service.usage(since=T - 90_000, until=T - 80_000)).rows == ()
    with pytest.raises(ConfigError, match="empty"):
        await service.usage(since=T, until=T)
    with pytest.raises(ConfigError, match="--by"):
        await service.usage(since=T, by="rack")


@pytest.mark.usefixtures("history")
async def test_cli_gives_the_same_figures_as_json_and_csv(fleet_cli: FleetCli,
                                                         database: Database) -> None:
    window = ("--since", str(SINCE), "--until", str(UNTIL))
    result = await fleet_cli.run("usage", *window, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["by"] == "user" and [row["key"] for row in document["usage"]] == ["bob", "ann"]
    assert document["usage"][1]["busy_gpu_hours"] == pytest.approx(0.75)
    csv = await fleet_cli.run("usage", *window, "--format", "csv")
    header, *lines = csv.stdout.splitlines()
    assert header.startswith("key,gpu_hours,") and lines[1].startswith("ann,1.167,")
    table = await fleet_cli.run("usage", *window, "--by", "host")
    assert table.returncode == 0 and table.stdout.splitlines()[0].startswith("HOST")
    bad = await fleet_cli.run("usage", "--since", "1h", "--until", "2h")
    assert bad.returncode == 2 and "not after --since" in bad.stderr


@pytest.mark.usefixtures("history")
def test_usage_daily_view_sums_the_day_by_owner_and_kind(database: Database) -> None:
    from sqlalchemy import text

    with database.engine.connect() as connection:
        rows = {(row.owner, row.kind): row for row in connection.execute(text(
            "SELECT day_s, owner, kind, allocations, active, gpu_seconds, busy_gpu_seconds "
            "FROM usage_daily"))}
    day = T // 86400 * 86400
    assert {row.day_s for row in rows.values()} == {day}
    ann, bob = rows[("ann", "task")], rows[("bob", "task")]
    assert (ann.allocations, ann.active, ann.gpu_seconds) == (2, 0, 3600 + 4200)
    assert float(ann.busy_gpu_seconds) == pytest.approx(30 * 60 * 1.0)  # rollups, not raw
    assert (bob.allocations, bob.gpu_seconds) == (1, 1800)
    assert float(bob.busy_gpu_seconds) == pytest.approx(30 * 60 * 0.8)
    held = rows[("bob", "reservation")]
    assert (held.allocations, held.active) == (2, 2)
    assert float(held.gpu_seconds) == pytest.approx(2 * (time.time() - T - 600), abs=30)
    assert float(held.busy_gpu_seconds) == 0
