"""`fleet events` reads the half-open range since <= ts < until, as `fleet history` does; and
`fleet db backup` refuses an existing FILE without --force, or one in a missing directory, as
bad input (exit 2, naming FILE and --force), not as a storage failure (exit 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from db.engine import open_database
from db.events import add_event
from fleet.cli.main import main
from tests.cli.conftest import CliResult

T0 = 1_767_225_600  # 2026-01-01 00:00 UTC


@pytest.fixture
def db_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An SQLite file with one event a second from T0 to T0 + 4; an isolated home."""
    for name in ("FLEET_DB", "FLEET_CONFIG", "FLEET_INVENTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FLEET_SERVER", "local")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "fleet.db"
    database = open_database(str(path))
    try:
        with database.session() as session:
            for second in range(5):
                add_event(session, ts=T0 + second, kind="gpu_hot", severity="warning",
                          message=f"event {second}")
    finally:
        database.close()
    return path


def _run(capsys: pytest.CaptureFixture[str], db: Path, *args: str) -> CliResult:
    code = main(["--db", str(db), *args])
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def _seconds(capsys: pytest.CaptureFixture[str], db: Path, since: str, until: str) -> list[int]:
    result = _run(capsys, db, "--json", "events", "--since", since, "--until", until)
    assert result.returncode == 0, result.stderr
    return [event["ts"] - T0 for event in json.loads(result.stdout)["events"]]


def test_events_until_is_exclusive(db_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _seconds(capsys, db_file, str(T0), str(T0 + 2)) == [0, 1]  # not the one at until
    assert _seconds(capsys, db_file, str(T0 + 1), str(T0 + 1)) == []  # an empty range
    assert _seconds(capsys, db_file, f"{T0}.5", f"{T0 + 2}.5") == [1, 2]  # between seconds
    assert _seconds(capsys, db_file, str(T0), str(T0 + 5)) == [0, 1, 2, 3, 4]
    help_text = _run(capsys, db_file, "events", "--help").stdout
    assert "exclusive" in help_text and "half-open" in help_text


def test_backup_over_an_existing_file_or_into_a_missing_directory_is_bad_input(
        db_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    existing = tmp_path / "existing.db"
    existing.write_bytes(b"keep me")
    refused = _run(capsys, db_file, "db", "backup", str(existing))
    assert refused.returncode == 2, refused.stderr
    assert str(existing) in refused.stderr and "--force" in refused.stderr
    assert existing.read_bytes() == b"keep me"
    missing = tmp_path / "no" / "such" / "dir" / "copy.db"
    nowhere = _run(capsys, db_file, "db", "backup", str(missing))
    assert nowhere.returncode == 2, nowhere.stderr
    assert str(missing) in nowhere.stderr and str(missing.parent) in nowhere.stderr
    forced = _run(capsys, db_file, "db", "backup", str(existing), "--force")
    assert forced.returncode == 0, forced.stderr
    assert existing.read_bytes() != b"keep me"
