"""Read commands on a local SQLite file load no SQLAlchemy, and answer exactly as through it.

`fleet tasks`, `fleet events`, `fleet allocations`, `fleet history hosts` and
`fleet history gpus` (raw, and bucketed from the rollups and raw samples) read through the
stdlib sqlite3 driver when the database is a plain SQLite file at this code's schema
(db.engine, db.sql). The same database named with a URL option (`?timeout=`) is read through
SQLAlchemy's engine instead: both must print the same bytes. A command that has to write (a
reconcile ending a task, a reservation to expire) loads SQLAlchemy then, and only then.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from db.allocations import claim_gpus, release_allocations
from db.engine import open_database
from db.events import add_event
from db.gpus import upsert_gpus
from db.hosts import sync_hosts
from db.retention import prune_samples_and_rollups, rollup_gpu_five_minutes, rollup_gpu_minutes
from db.samples import record_samples
from db.tasks import create_task, finish_task, update_task
from db.types import GpuFacts, GpuSampleIn, HostFacts, HostSampleIn
from db.unmanaged import store_unmanaged
from tests.fixtures.module_report import REPORT_MODULES, packages, split_report

ROOT = Path(__file__).resolve().parents[2]
# When lab_db's events and host samples were recorded (2026-01-01 00:00 UTC), and the range the
# commands read them in: fixed, so that both processes of a comparison print the same range.
RECORDED_AT = 1_767_225_600
SINCE, UNTIL = str(RECORDED_AT), str(RECORDED_AT + 3600)
# A window around everything lab_db holds (tasks a few minutes old, reservations still held).
# It ends a second before the test runs (USAGE_UNTIL is filled in then): an active holding
# counts until min(until, now), and both processes of a comparison must see the same end.
USAGE_SINCE, USAGE_UNTIL = str(int(time.time()) - 86_400), "<a second ago>"


def _fleet(home: Path, db: str, *args: str) -> tuple[int, str, str, set[str]]:
    """Exit code, stdout, stderr and the top-level packages loaded by one `fleet` process."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("FLEET_", "XDG_"))}
    env.update({"HOME": str(home), "XDG_RUNTIME_DIR": str(home / ".run"), "TZ": "UTC",
                "PYTHONPATH": str(ROOT)})
    done = subprocess.run([sys.executable, "-c", REPORT_MODULES, "--db", db, *args],
                          cwd=home, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    stderr, loaded = split_report(done.stderr)
    return done.returncode, done.stdout, stderr, packages(loaded)


@pytest.fixture
def lab_db(tmp_path: Path) -> Path:
    """An SQLite file with two hosts, finished tasks (one with GPUs), a gang and an array, and
    (_record_health_and_holdings) events, host samples, reservations and unmanaged use."""
    path = tmp_path / "lab.db"
    (tmp_path / ".run").mkdir(mode=0o700)
    now = int(time.time())
    with open_database(str(path)) as database, database.session() as session:
        hosts = sync_hosts(session, [HostFacts("gpu01", "10.0.0.1"),
                                     HostFacts("gpu02", "10.0.0.2", port=2222)], now=now)
        gpus = upsert_gpus(session, hosts["gpu01"],
                           [GpuFacts(i, f"GPU-01-{i}", "Sim H100") for i in range(2)], now=now)
        solo = create_task(session, name="train", script="train.py", args=["--lr", "0.1"],
                           gpus_requested=2, owner="ann", now=now - 600,
                           constraints={"placement": {"gpus": 2}})
        claim_gpus(session, [gpus.ids[1], gpus.ids[0]], kind="task", owner="ann",
                   now=now - 590, task_id=solo)
        update_task(session, solo, state="running", host_id=hosts["gpu01"], started_at=now - 590,
                    remote_dir="/tmp/fleet/1", remote_pid=4242)
        finish_task(session, solo, state="succeeded", now=now - 300, exit_code=0,
                    gpu_seconds=580.0, peak_memory_bytes=3 << 30)
        failed = create_task(session, name="eval", script="eval.py", args=[], gpus_requested=1,
                             owner="bob", now=now - 500, priority=3)
        finish_task(session, failed, state="failed", now=now - 400, exit_code=3,
                    error="exit code 3", timed_out=True)
        for kind, size in (("gang", 2), ("array", 3)):
            first = None
            for index in range(size):
                member = create_task(session, name=f"{kind}[{index}]", script=f"{kind}.py",
                                     args=[str(index)], gpus_requested=1, owner="cy",
                                     now=now - 200, group_kind=kind, group_index=index,
                                     group_id=first)
                first = first or member
                finish_task(session, member, state="cancelled" if index else "succeeded",
                            now=now - 100, exit_code=None if index else 0)
    _record_health_and_holdings(path, now)
    return path


def _record_health_and_holdings(path: Path, now: int) -> None:
    """Events about hosts, GPUs and a task (an hour from RECORDED_AT), host samples with gaps
    (NULL readings) over that hour, reservations on gpu01 and gpu02 (one expiring tomorrow,
    one released) and a process fleet did not start on gpu02."""
    with open_database(str(path)) as database:
        with database.session() as session:
            hosts = sync_hosts(session, [HostFacts("gpu01", "10.0.0.1"),
                                         HostFacts("gpu02", "10.0.0.2", port=2222)], now=now)
            gpu01 = upsert_gpus(session, hosts["gpu01"],
                                [GpuFacts(i, f"GPU-01-{i}", "Sim H100") for i in range(2)],
                                now=now).ids
            gpu02 = upsert_gpus(session, hosts["gpu02"],
                                [GpuFacts(i, f"GPU-02-{i}", "Sim A100") for i in range(2)],
                                now=now).ids
            for minute, (kind, severity, host, gpu, data) in enumerate([
                    ("host_down", "error", "gpu02", None, {"after_s": 90}),
                    ("gpu_hot", "warning", "gpu01", gpu01[1], {"temperature_c": 91.5}),
                    ("host_up", "info", "gpu02", None, None),
                    ("gpu_cooled", "info", "gpu01", gpu01[1], None),
                    ("task_ended", "warning", "gpu01", None, {"state": "failed"}),
                    ("hook_failed", "critical", None, None, {"hook": "page"})] * 3):
                add_event(session, ts=RECORDED_AT + 60 * minute, kind=kind, severity=severity,
                          message=f"{kind} #{minute}",
                          host_id=None if host is None else hosts[host], gpu_id=gpu,
                          task_id=2 if kind == "task_ended" else None, data=data)
            claim_gpus(session, [gpu01[0]], kind="reservation", owner="dee", now=now - 50,
                       note="debugging NCCL", expires_at=now + 86400)
            claim_gpus(session, [gpu02[1]], kind="reservation", owner="eve", now=now - 40)
            (released,) = claim_gpus(session, [gpu02[0]], kind="reservation", owner="eve",
                                     now=now - 30)
            release_allocations(session, now=now - 20, reason="released by operator",
                                allocation_ids=[released])
            store_unmanaged(session, {("gpu02", 0): [{"pid": 4711, "name": "python",
                                                      "uid": 1003, "user": "fay"}]})
        with database.session() as session:
            record_samples(session, [
                HostSampleIn(hosts[name], (RECORDED_AT + 15 * step) * 1000 + offset,
                             load_1m=None if step % 9 == 4 else step / 8,
                             cpu_busy_pct=None if step % 9 == 4 else float(step * 7 % 100),
                             memory_available_bytes=(64 << 30) - step * (1 << 26),
                             net_rx_bytes=None if step % 13 == 5 else step * 1_250_000,
                             net_tx_bytes=step * 310_000)
                for step in range(240) for name, offset in (("gpu01", 0), ("gpu02", 250))], [])


READS = [
    ("tasks",),
    ("--json", "tasks", "--all"),
    ("--json", "tasks", "--all", "--expand"),
    ("tasks", "--state", "failed", "--state", "cancelled"),
    ("--json", "tasks", "1"),
    ("tasks", "3"),
    ("--json", "tasks", "5:2"),
    ("events", "--since", SINCE, "--until", UNTIL),
    ("--json", "events", "--since", SINCE, "--until", UNTIL),
    ("events", "--since", SINCE, "--until", UNTIL, "--severity", "warning", "--limit", "4"),
    ("--json", "events", "--since", SINCE, "--until", UNTIL, "--hosts", "gpu01",
     "--kind", "GPU_*"),
    ("allocations",),
    ("--json", "allocations"),
    ("allocations", "--all"),
    ("--json", "allocations", "--all"),
    ("history", "hosts", "--since", SINCE, "--until", UNTIL),
    ("--json", "history", "hosts", "--since", SINCE, "--until", UNTIL),
    ("history", "hosts", "--since", SINCE, "--until", UNTIL, "--bucket", "1m"),
    ("--json", "history", "hosts", "--since", SINCE, "--until", UNTIL, "--bucket", "1m"),
    ("history", "hosts", "--since", SINCE, "--until", UNTIL, "--bucket", "7m", "--hosts",
     "gpu02", "--format", "csv"),
    ("hosts",),
    ("--json", "hosts"),
    ("usage", "--since", USAGE_SINCE, "--until", USAGE_UNTIL),
    ("--json", "usage", "--since", USAGE_SINCE, "--until", USAGE_UNTIL, "--by", "host"),
    ("usage", "--since", USAGE_SINCE, "--until", USAGE_UNTIL, "--by", "gpu-model",
     "--format", "csv"),
]


def _test_id(args: tuple[str, ...]) -> str:
    """A test id without the epoch times some arguments hold: each xdist worker computes the
    time-based ones itself, and the ids must be the same in every worker."""
    return " ".join("TIME" if arg.isdigit() and len(arg) >= 9 else arg for arg in args)


@pytest.mark.parametrize("args", READS, ids=[_test_id(args) for args in READS])
def test_read_commands_load_no_sqlalchemy_and_match_the_engine(
        lab_db: Path, args: tuple[str, ...]) -> None:
    home = lab_db.parent
    until = str(int(time.time()) - 1)
    args = tuple(until if arg == USAGE_UNTIL else arg for arg in args)
    code, out, err, loaded = _fleet(home, str(lab_db), *args)
    assert code == 0, err
    assert out.strip() and not out.startswith("no ")  # "no tasks", "no events in ..."
    assert "sqlalchemy" not in loaded, args
    through_engine = _fleet(home, f"sqlite:///{lab_db}?timeout=30", *args)
    assert through_engine[:3] == (0, out, err)
    assert "sqlalchemy" in through_engine[3]  # the comparison did use the other path


def test_a_mistake_is_reported_the_same_way_without_sqlalchemy(lab_db: Path) -> None:
    code, out, err, loaded = _fleet(lab_db.parent, str(lab_db), "tasks", "99")
    assert (code, out) == (2, "")
    assert "no task with id 99" in err and "sqlalchemy" not in loaded
    code, _, err, loaded = _fleet(lab_db.parent, str(lab_db), "tasks", "5:7")
    assert code == 2 and "array 5 has no index 7" in err and "sqlalchemy" not in loaded
    code, _, err, loaded = _fleet(lab_db.parent, str(lab_db), "logs", "99:1")
    assert code == 2 and "no task with id 99" in err and "sqlalchemy" not in loaded
    code, out, err, _ = _fleet(lab_db.parent, str(lab_db), "logs", "2")  # failed, never ran
    assert (code, out) == (0, "")
    assert "task 2 has no output: it never started (failed: exit code 3)" in err
    for command in (("events",), ("history", "hosts")):
        code, out, err, loaded = _fleet(lab_db.parent, str(lab_db), *command, "--hosts", "gpu9")
        assert (code, out) == (2, ""), command
        assert "unknown host 'gpu9'; known hosts: gpu01, gpu02" in err
        assert "sqlalchemy" not in loaded


def test_a_reconcile_that_must_write_loads_sqlalchemy_and_writes(lab_db: Path) -> None:
    with open_database(str(lab_db)) as database, database.session() as session:
        stale = create_task(session, name="left", script="left.py", args=[], gpus_requested=1,
                            owner="dee", now=int(time.time()) - 3600)  # its waiter is long gone
    code, out, err, loaded = _fleet(lab_db.parent, str(lab_db), "--json", "tasks", str(stale))
    assert code == 0, err
    shown = json.loads(out)["tasks"][0]
    assert shown["state"] == "cancelled" and "waiting dispatcher went away" in shown["error"]
    assert "sqlalchemy" in loaded


def test_allocations_expire_a_reservation_that_is_due_and_only_then_load_sqlalchemy(
        lab_db: Path) -> None:
    with open_database(str(lab_db)) as database, database.session() as session:
        (gpu_id,) = session.connection().exec_driver_sql(
            "SELECT gpus.id FROM gpus JOIN hosts ON hosts.id = gpus.host_id "
            "WHERE hosts.name = 'gpu01' AND gpus.idx = 1").scalars()
        (due,) = claim_gpus(session, [gpu_id], kind="reservation", owner="gus",
                            now=int(time.time()) - 120, expires_at=int(time.time()) - 60)
    code, out, err, loaded = _fleet(lab_db.parent, str(lab_db), "--json", "allocations", "--all")
    assert code == 0, err
    (expired,) = [row for row in json.loads(out)["allocations"] if row["id"] == due]
    assert expired["released_at"] is not None and expired["release_reason"] == "expired"
    assert "sqlalchemy" in loaded
    code, out, err, loaded = _fleet(lab_db.parent, str(lab_db), "--json", "allocations")
    assert code == 0, err
    assert due not in [row["id"] for row in json.loads(out)["allocations"]]
    assert "sqlalchemy" not in loaded  # nothing left to expire: a read again


def test_a_new_or_older_database_is_created_or_migrated_as_before(tmp_path: Path) -> None:
    (tmp_path / ".run").mkdir(mode=0o700)
    fresh = tmp_path / "sub" / "fresh.db"
    code, out, err, loaded = _fleet(tmp_path, str(fresh), "tasks")
    assert (code, out.strip()) == (0, "no tasks"), err
    assert fresh.is_file() and "sqlalchemy" in loaded  # created and migrated by the engine
    code, out, err, loaded = _fleet(tmp_path, str(fresh), "tasks")
    assert (code, out.strip()) == (0, "no tasks") and "sqlalchemy" not in loaded


# The end of the history fixture's samples (epoch s): commands name absolute times, so that
# two processes asked the same question a moment apart get the same answer.
HISTORY_END_S = (int(time.time()) // 3600) * 3600


@pytest.fixture
def history_db(tmp_path: Path) -> Path:
    """Two hours of samples of two GPUs every 10 s (some readings missing), the older hour
    rolled up into minutes and 5-minute periods and its raw samples pruned."""
    path = tmp_path / "history.db"
    (tmp_path / ".run").mkdir(mode=0o700)
    end_ms = HISTORY_END_S * 1000
    start_ms = end_ms - 2 * 3600_000
    with open_database(str(path)) as database:
        with database.session() as session:
            host = sync_hosts(session, [HostFacts("gpu01", "10.0.0.1")], now=start_ms // 1000)
            gpus = upsert_gpus(session, host["gpu01"],
                               [GpuFacts(i, f"GPU-01-{i}", "Sim H100") for i in range(2)],
                               now=start_ms // 1000)
            samples = [GpuSampleIn(gpu_id, ts, utilization_gpu_pct=float((ts // 10_000) % 101),
                                   memory_used_bytes=(ts // 1000 % 977) << 20,
                                   temperature_c=None if ts % 70_000 == 0 else 40.0 + idx,
                                   power_draw_w=123.25 + idx)
                       for ts in range(start_ms, end_ms, 10_000)
                       for idx, gpu_id in sorted(gpus.ids.items())]
            record_samples(session, [], samples)
        with database.session() as session:
            rollup_gpu_minutes(session, until_ms=end_ms - 3600_000)
            rollup_gpu_five_minutes(session)
            prune_samples_and_rollups(session, raw_before_ms=end_ms - 3600_000 - 120_000,
                                      rollup_before_ms=None)
    return path


def _ago(minutes: int) -> str:
    return str(HISTORY_END_S - 60 * minutes)


HISTORY_READS = [
    ("--json", "history", "gpus", "--since", _ago(30), "--until", _ago(0)),
    ("history", "gpus", "--since", _ago(120), "--until", _ago(0), "--bucket", "5m"),
    ("history", "gpus", "--since", _ago(117), "--until", _ago(3), "--bucket", "1m",
     "--format", "csv"),
    ("--json", "history", "gpus", "--since", _ago(180), "--until", _ago(0), "--bucket", "15m",
     "--gpu", "gpu01:1"),
    ("history", "gpus", "--since", _ago(90), "--until", _ago(50), "--bucket", "7s",
     "--hosts", "gpu01", "--limit", "40"),
]


@pytest.mark.parametrize("args", HISTORY_READS, ids=[_test_id(args) for args in HISTORY_READS])
def test_history_loads_no_sqlalchemy_and_matches_the_engine(
        history_db: Path, args: tuple[str, ...]) -> None:
    home = history_db.parent
    code, out, err, loaded = _fleet(home, str(history_db), *args)
    assert code == 0, err
    assert len(out.splitlines()) > 3
    assert "sqlalchemy" not in loaded, args
    through_engine = _fleet(home, f"sqlite:///{history_db}?timeout=30", *args)
    assert through_engine[:3] == (0, out, err)
    assert "sqlalchemy" in through_engine[3]


def test_history_of_an_unknown_gpu_is_an_error_without_sqlalchemy(history_db: Path) -> None:
    code, out, err, loaded = _fleet(history_db.parent, str(history_db), "history", "gpus",
                                    "--gpu", "gpu01:7")
    assert (code, out) == (2, "")
    assert "host 'gpu01' has no GPU 7 (known: 0, 1)" in err and "sqlalchemy" not in loaded


def test_hosts_shows_a_drain_and_its_reason(lab_db: Path) -> None:
    home = lab_db.parent
    (home / "inventory.yaml").write_text(
        "hosts:\n  gpu01: {address: 10.0.0.1}\n  gpu02: {address: 10.0.0.2, port: 2222}\n")
    code, _, err, _ = _fleet(home, str(lab_db), "drain", "gpu01", "--reason", "fan swap")
    assert code == 0, err
    code, out, err, _ = _fleet(home, str(lab_db), "hosts")
    assert code == 0 and "drained: fan swap" in out, (out, err)
    code, out, _, _ = _fleet(home, str(lab_db), "--json", "hosts")
    shown = {host["name"]: (host["drained"], host["drain_reason"])
             for host in json.loads(out)["hosts"]}
    assert shown == {"gpu01": (True, "fan swap"), "gpu02": (False, None)}
