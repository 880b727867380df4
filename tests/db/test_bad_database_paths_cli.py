"""`fleet` given database paths and URLs that are not fleet databases: documented exit codes, a
message naming the path, no traceback, and nothing created or changed on disk."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from db.engine import open_database
from tests.cli.conftest import FleetCli
from tests.fixtures.disk_listing import listing

EXIT_BAD_INPUT = 2
EXIT_STORAGE = 4


def assert_no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr and "Warning" not in stderr, stderr


async def test_a_file_that_is_not_a_database_keeps_its_mode(fleet_cli: FleetCli,
                                                            tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    text = work / "perm.txt"
    text.write_text("hi\n")
    text.chmod(0o644)
    before = listing(work)
    for args in (["events"], ["tasks"], ["db", "check"], ["db", "backup", str(tmp_path / "b")]):
        result = await fleet_cli.run("--db", str(text), *args)
        assert result.returncode == EXIT_STORAGE, (args, result.stderr)
        assert str(text) in result.stderr and "not a database" in result.stderr, result.stderr
        assert_no_traceback(result.stderr)
        assert listing(work) == before, args
    assert text.read_text() == "hi\n"
    assert not (tmp_path / "b").exists()


async def test_a_fifo_or_a_directory_is_refused_as_the_database(fleet_cli: FleetCli,
                                                                tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    os.mkfifo(work / "fifo")
    (work / "link").symlink_to("fifo")
    (work / "dir").mkdir()
    before = listing(work)
    for name, kind in (("fifo", "a FIFO"), ("link", "a FIFO"), ("dir", "a directory")):
        for args in (["events"], ["db", "check"], ["db", "copy", str(work / name),
                                                   str(tmp_path / "copy.db")]):
            result = await fleet_cli.run("--db", str(work / name), *args)
            assert result.returncode == EXIT_STORAGE, (name, args, result.stderr)
            assert f"is {kind}, not a regular file" in result.stderr, result.stderr
            assert str(work) in result.stderr
            assert_no_traceback(result.stderr)
        assert listing(work) == before, name
    assert not (tmp_path / "copy.db").exists()


async def test_an_existing_database_keeps_its_mode(fleet_cli: FleetCli) -> None:
    open_database(str(fleet_cli.db_path)).close()
    fleet_cli.db_path.chmod(0o644)
    for args in (["tasks"], ["events"], ["db", "retention"]):
        result = await fleet_cli.run(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert stat.S_IMODE(fleet_cli.db_path.stat().st_mode) == 0o644, args


async def test_backup_refuses_a_destination_that_is_not_a_regular_file(
        fleet_cli: FleetCli, tmp_path: Path) -> None:
    open_database(str(fleet_cli.db_path)).close()
    work = tmp_path / "work"
    work.mkdir()
    os.mkfifo(work / "fifo")
    (work / "link").symlink_to("fifo")
    before = listing(work)
    for name in ("fifo", "link"):
        result = await fleet_cli.run("db", "backup", str(work / name), "--force")
        assert result.returncode == EXIT_BAD_INPUT, (name, result.stderr)
        assert f"{work / name} exists and is not a regular file" in result.stderr
        assert listing(work) == before, name


async def test_malformed_database_urls_exit_without_a_traceback(
        fleet_cli: FleetCli, tmp_path: Path) -> None:
    before = listing(fleet_cli.home)
    cases = [
        (["--db", "~no-such-user-here/x.db", "events"], "no user 'no-such-user-here'"),
        (["events"], "no user 'no-such-user-here'", {"FLEET_DB": "~no-such-user-here/x.db"}),
        (["db", "copy", str(fleet_cli.db_path), "~no-such-user-here/x.db"],
         "no user 'no-such-user-here'"),
        (["--db", "postgresql://[::1/x", "events"], "invalid database URL"),
        (["--db", "postgresql://[::1/x", "db", "check"], "invalid database URL"),
        (["--db", f"sqlite:///{tmp_path}/%00x.db", "events"], "NUL byte"),
        (["--db", f"sqlite:///{tmp_path}/d/x.db?uri=true&mode=ro", "events"],
         "options 'mode', 'uri' are not supported for SQLite"),
        (["--db", f"sqlite:///{tmp_path}/d/x.db?bogus=1", "events"],
         "option 'bogus' is not supported for SQLite"),
        (["--db", f"sqlite:///{tmp_path}/d/x.db?bogus=1", "db", "check"], "'bogus'"),
    ]
    open_database(str(fleet_cli.db_path)).close()
    for args, message, *env in cases:
        result = await fleet_cli.run(*args, env=env[0] if env else None)
        assert result.returncode == EXIT_STORAGE, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert_no_traceback(result.stderr)
    assert listing(fleet_cli.home) == before
    assert not (tmp_path / "d").exists()
    assert not list(tmp_path.glob("*x.db*"))


async def test_an_empty_database_url_is_refused(fleet_cli: FleetCli) -> None:
    default = fleet_cli.home / ".local" / "share" / "fleet" / "fleet.db"
    result = await fleet_cli.run("--db", "", "events")
    # 4 (storage) from the storage layer; 2 once the CLI checks --db itself.
    assert result.returncode in (EXIT_BAD_INPUT, EXIT_STORAGE), result.stderr
    assert "empty database URL" in result.stderr
    for args in (["db", "copy", "", str(fleet_cli.db_path)],
                 ["db", "copy", str(fleet_cli.db_path), ""]):
        result = await fleet_cli.run(*args)
        assert result.returncode == EXIT_BAD_INPUT, (args, result.stderr)
        assert "empty database URL" in result.stderr
    assert not default.exists() and not fleet_cli.db_path.exists()


async def test_a_database_from_a_newer_fleet_asks_for_an_upgrade(
        fleet_cli: FleetCli, tmp_path: Path) -> None:
    open_database(str(fleet_cli.db_path)).close()
    with sqlite3.connect(fleet_cli.db_path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999'")
    connection.close()
    target = tmp_path / "copy.db"
    for args, code in ((["events"], EXIT_STORAGE), (["tasks"], EXIT_STORAGE),
                       (["db", "check"], 1),
                       (["db", "copy", str(fleet_cli.db_path), str(target)], EXIT_STORAGE),
                       (["db", "copy", str(target), str(fleet_cli.db_path)], EXIT_STORAGE)):
        if args[-1] == str(fleet_cli.db_path):
            open_database(str(target)).close()  # a current source copied into the newer one
        result = await fleet_cli.run(*args)
        output = result.stdout + result.stderr
        assert result.returncode == code, (args, output)
        assert "written by a newer fleet" in output and "'9999'" in output, (args, output)
        assert "upgrade fleet" in output and "migrates" not in output, (args, output)
        if args[0] == "db" and args[1] == "copy" and args[-1] == str(target):
            assert not target.exists()  # refused before the target was created
