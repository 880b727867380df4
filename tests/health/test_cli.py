"""drain/undrain, events, history hosts and db backup/check/retention through the real CLI.

drain/undrain run as real `fleet` subprocesses; the other commands run the same CLI entry point
in-process (`fleet.cli.main.main`), which is many times faster than a subprocess per call.
"""

from __future__ import annotations

import sqlite3
import stat
import time
from pathlib import Path

import pytest

from db.engine import open_database
from db.events import add_event
from db.samples import record_samples
from db.types import HostSampleIn
from fleet.cli.main import main
from tests.cli.conftest import CliResult, FleetCli
from tests.health.conftest import Seeded, seed_fleet


@pytest.fixture
def cli(tmp_path: Path) -> FleetCli:
    home = tmp_path / "home"
    home.mkdir()
    return FleetCli(home=home, db_path=tmp_path / "fleet.db")


def run_cli(capsys: pytest.CaptureFixture[str], db_path: Path, *args: str) -> CliResult:
    """Run `fleet --db DB_PATH ARGS...` in this process (global options may precede --db)."""
    globals_ = [arg for arg in args[:1] if arg == "--json"]
    rest = list(args[len(globals_):])
    db_args = [] if "--db" in rest[:2] else ["--db", str(db_path)]
    code = main([*globals_, *db_args, *rest])
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


@pytest.fixture
def known(cli: FleetCli) -> Seeded:
    database = open_database(str(cli.db_path))
    try:
        return seed_fleet(database)
    finally:
        database.close()


async def test_drain_and_undrain_gpu_and_host(cli: FleetCli, known: Seeded) -> None:
    drained = await cli.run("--json", "drain", "alpha:1", "--reason", "ECC errors")
    assert drained.returncode == 0, drained.stderr
    assert drained.json()["changed"] is True and drained.json()["target"] == "alpha:1"
    again = await cli.run("drain", "alpha:1", "--reason", "ECC errors")
    assert again.returncode == 0 and "already drained" in again.stdout
    host = await cli.run("drain", "beta", "--reason", "maintenance")
    assert host.returncode == 0 and "drained beta (maintenance)" in host.stdout
    by_uuid = await cli.run("undrain", "GPU-alpha-1")
    assert by_uuid.returncode == 0 and "undrained alpha:1" in by_uuid.stdout
    connection = sqlite3.connect(cli.db_path)
    rows = connection.execute("SELECT h.name, g.idx, g.drained, g.drain_reason FROM gpus g "
                              "JOIN hosts h ON h.id = g.host_id ORDER BY h.name, g.idx").fetchall()
    hosts = connection.execute("SELECT name, drained, drain_reason FROM hosts ORDER BY name"
                               ).fetchall()
    connection.close()
    assert rows == [("alpha", 0, 0, None), ("alpha", 1, 0, None), ("beta", 0, 0, None)]
    assert hosts == [("alpha", 0, None), ("beta", 1, "maintenance")]
    events = await cli.run("--json", "events", "--kind", "*drained")
    assert events.returncode == 0, events.stderr
    assert [(e["kind"], e["host"], e["gpu"]) for e in events.json()["events"]] == [
        ("gpu_drained", "alpha", 1), ("host_drained", "beta", None),
        ("gpu_undrained", "alpha", 1)]
    assert events.json()["events"][0]["data"]["reason"] == "ECC errors"


async def test_drain_unknown_host_exits_2(cli: FleetCli, known: Seeded) -> None:
    result = await cli.run("drain", "ghost", "--reason", "x")
    assert result.returncode == 2 and result.stdout == ""
    assert "unknown host or GPU 'ghost'; known hosts: alpha, beta" in result.stderr


@pytest.mark.parametrize(("target", "message"), [
    ("ghost:0", "unknown host 'ghost'"),
    ("alpha:7", "host 'alpha' has no GPU 7 (known: 0, 1)"),
    (" ", "empty drain target"),
])
def test_drain_unknown_gpu_exits_2(cli: FleetCli, known: Seeded, target: str, message: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, cli.db_path, "undrain", target)
    assert result.returncode == 2
    assert message in result.stderr and result.stdout == ""


def test_events_filters_and_table(cli: FleetCli, known: Seeded,
        capsys: pytest.CaptureFixture[str]) -> None:
    database = open_database(str(cli.db_path))
    now = int(time.time())
    with database.session() as session:
        add_event(session, ts=now - 3 * 86400, kind="gpu_hot", severity="warning",
                  message="old", host_id=known.host_ids["alpha"])
        add_event(session, ts=now - 60, kind="gpu_hot", severity="warning",
                  message="alpha GPU 0: ok -> hot", host_id=known.host_ids["alpha"],
                  gpu_id=known.gpu_ids[("alpha", 0)])
        add_event(session, ts=now - 30, kind="host_down", severity="error",
                  message="beta: up -> down", host_id=known.host_ids["beta"])
        add_event(session, ts=now - 10, kind="host_up", severity="info", message="beta: up",
                  host_id=known.host_ids["beta"])
    database.close()
    table = run_cli(capsys, cli.db_path, "events")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == ["TIME", "SEVERITY", "KIND", "HOST", "GPU",
                                                    "MESSAGE"]
    assert len(table.stdout.splitlines()) == 4 and "old" not in table.stdout
    cases = {
        ("--severity", "warning"): ["gpu_hot", "host_down"],
        ("--host", "beta"): ["host_down", "host_up"],
        ("--kind", "host_*"): ["host_down", "host_up"],
        ("--since", "7d", "--limit", "2"): ["host_down", "host_up"],
        ("--since", "7d", "--kind", "gpu_hot"): ["gpu_hot", "gpu_hot"],
    }
    for args, kinds in cases.items():
        result = run_cli(capsys, cli.db_path, "--json", "events", *args)
        assert [e["kind"] for e in result.json()["events"]] == kinds, args
    bad = run_cli(capsys, cli.db_path, "events", "--since", "yesterday-ish")
    assert bad.returncode == 2 and "--since" in bad.stderr


def test_history_hosts_buckets_and_formats(cli: FleetCli, known: Seeded,
        capsys: pytest.CaptureFixture[str]) -> None:
    database = open_database(str(cli.db_path))
    start_ms = (int(time.time()) - 600) // 60 * 60 * 1000
    samples = [HostSampleIn(known.host_ids[name], start_ms + step * 10_000,
                            load_1m=float(step), cpu_busy_pct=50.0,
                            memory_available_bytes=(8 << 30) - step,
                            net_rx_bytes=step * 1_000_000, net_tx_bytes=0)
               for step in range(12) for name in ("alpha", "beta")]
    with database.session() as session:
        record_samples(session, samples, [])
    database.close()
    result = run_cli(capsys, cli.db_path, "history", "hosts", "--host", "alpha", "--since", "1h",
                           "--bucket", "1m", "--format", "json")
    assert result.returncode == 0, result.stderr
    points = result.json()["points"]
    assert [p["samples"] for p in points] == [6, 6]
    assert points[0]["load_1m_avg"] == 2.5 and points[0]["load_1m_max"] == 5
    assert points[0]["net_rx_bps"] == 100_000.0
    assert points[1]["memory_available_min"] == (8 << 30) - 11
    csv_out = run_cli(capsys, cli.db_path, "history", "hosts", "--since", "1h", "--format", "csv")
    assert csv_out.stdout.splitlines()[0].startswith("host,ts_ms,samples,")
    assert len(csv_out.stdout.splitlines()) == 1 + 24
    table = run_cli(capsys, cli.db_path, "history", "hosts", "--since", "1h", "--bucket", "5m")
    assert "LOAD1" in table.stdout.splitlines()[0]


def test_db_backup_check_and_retention(cli: FleetCli, known: Seeded, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "copy.db"
    backup = run_cli(capsys, cli.db_path, "db", "backup", str(copy))
    assert backup.returncode == 0, backup.stderr
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    refused = run_cli(capsys, cli.db_path, "db", "backup", str(copy))
    assert refused.returncode == 2 and "--force" in refused.stderr  # bad input, not storage
    assert run_cli(capsys, cli.db_path, "db", "backup", str(copy), "--force").returncode == 0
    check = run_cli(capsys, cli.db_path, "--db", str(copy), "db", "check")
    assert check.returncode == 0 and ": ok" in check.stdout
    with open(copy, "r+b") as handle:
        for offset in range(4096, copy.stat().st_size, 4096):  # every page but the schema's
            handle.seek(offset + 8)
            handle.write(b"\xff" * 1000)
    broken = run_cli(capsys, cli.db_path, "--json", "--db", str(copy), "db", "check")
    assert broken.returncode == 1 and broken.json()["ok"] is False
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    unmigrated = run_cli(capsys, cli.db_path, "--db", str(empty), "db", "check")
    assert unmigrated.returncode == 1 and "schema revision is none" in unmigrated.stdout
    postgres = run_cli(capsys, cli.db_path, "--db", "postgresql://u:secret@db.invalid/fleet",
                       "db", "check")
    assert postgres.returncode == 4 and "postgresql://u:***@db.invalid/fleet" in postgres.stderr
    assert "secret" not in postgres.stderr
    retention = run_cli(capsys, cli.db_path, "--json", "db", "retention", "--raw-days", "1")
    assert retention.returncode == 0, retention.stderr
    assert retention.json()["rollup_buckets"] == 0
