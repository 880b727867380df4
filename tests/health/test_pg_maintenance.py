"""`db check` and `db backup` on PostgreSQL: constraints, index validity, orphans, pg_dump."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from db.engine import open_database
from db.migrate import HEAD_REVISION
from fleet.cli.main import main
from tests.fixtures.database import PgServer
from tests.health.conftest import seed_fleet


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A migrated PostgreSQL database with hosts alpha and beta and three GPUs (dropped after)."""
    name = pg_server.create_database("maint")
    url = pg_server.cluster.url(name)
    database = open_database(url)
    try:
        seed_fleet(database)
    finally:
        database.close()
    yield url
    pg_server.drop_database(name)


def _sql(pg_server: PgServer, url: str, *statements: str) -> None:
    with psycopg.connect(pg_server.cluster.dsn(make_url(url).database or ""),
                         autocommit=True) as connection:
        for statement in statements:
            connection.execute(statement)


def _fleet(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--db", url, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_check_a_healthy_database_then_one_with_every_kind_of_damage(
    pg_server: PgServer, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _fleet(capsys, pg_url, "db", "check")
    assert code == 0 and f": ok (constraints, indexes, orphan rows, schema {HEAD_REVISION})" in out
    _sql(pg_server, pg_url,
         # A GPU row whose host is gone: possible after a restore with triggers disabled.
         "SET session_replication_role = replica",
         "INSERT INTO gpus (host_id, idx, state, drained, first_seen, last_seen) "
         "VALUES (9999, 0, 'ok', false, 0, 0)",
         "SET session_replication_role = DEFAULT",
         # A sample of a GPU that does not exist: no foreign key refuses it (migration 0011).
         "INSERT INTO gpu_samples (gpu_id, ts, lost) VALUES (424242, 1, false)",
         "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'ix_events_ts'::regclass",
         "DROP INDEX ix_tasks_state",
         "ALTER TABLE hosts DROP CONSTRAINT ck_hosts_state",
         "ALTER TABLE hosts ADD CONSTRAINT ck_hosts_state CHECK (state <> '') NOT VALID",
         "ALTER TABLE allocations DROP CONSTRAINT ck_allocations_kind")
    code, out, _ = _fleet(capsys, pg_url, "db", "check")
    assert code == 1, out
    assert "foreign key: 1 gpus row(s) reference a missing hosts (gpus.host_id)" in out
    assert "reference: 1 gpu_samples row(s) name a missing gpus (gpu_samples.gpu_id" in out
    assert "index ix_events_ts is invalid" in out
    assert "index ix_tasks_state on tasks is missing" in out
    assert "constraint ck_hosts_state is not validated" in out
    assert "constraint ck_allocations_kind on allocations is missing" in out
    assert "6 problem(s)" in out


def test_check_an_unmigrated_database_reports_its_revision(
    pg_server: PgServer, capsys: pytest.CaptureFixture[str]
) -> None:
    name = pg_server.create_empty_database("bare")
    try:
        code, out, _ = _fleet(capsys, pg_server.cluster.url(name), "db", "check")
    finally:
        pg_server.drop_database(name)
    assert code == 1 and f"schema revision is none, this fleet expects {HEAD_REVISION}" in out


def test_backup_is_a_pg_dump_that_restores_the_same_rows(
    pg_server: PgServer, pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "fleet.dump"
    code, out, err = _fleet(capsys, pg_server.cluster.tcp_url(make_url(pg_url).database or ""),
                            "db", "backup", str(dump))
    assert code == 0, err
    assert "pg_dump custom" in out and "pg_restore --list ok" in out
    assert "fleet-test-secret" not in out
    assert dump.stat().st_mode & 0o777 == 0o600
    code, _, err = _fleet(capsys, pg_url, "db", "backup", str(dump))
    assert code == 2 and "--force" in err  # bad input: FILE exists
    restored = pg_server.create_empty_database("restored")
    try:
        subprocess.run(["pg_restore", "--no-owner", f"--dbname={restored}", str(dump)],
                       env=pg_server.cluster.tool_env(), check=True, capture_output=True)
        with psycopg.connect(pg_server.cluster.dsn(restored)) as connection:
            hosts = connection.execute("SELECT name FROM hosts ORDER BY name").fetchall()
            gpus = connection.execute("SELECT count(*) FROM gpus").fetchone()
        assert hosts == [("alpha",), ("beta",)] and gpus == (3,)
    finally:
        pg_server.drop_database(restored)


def test_backup_without_pg_dump_is_refused_naming_it(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr("db.pg_maintenance.PG_LIB", tmp_path / "no-postgresql")
    code, _, err = _fleet(capsys, pg_url, "db", "backup", str(tmp_path / "x.dump"))
    assert code == 2 and "pg_dump is not installed" in err
    assert not (tmp_path / "x.dump").exists()
