"""SQLite backup (online backup API, consistent while others write) and integrity checking.

db.pg_maintenance does the same for PostgreSQL with the same result types.

Both work on the raw sqlite3 module, never migrating or creating anything: a backup or a check
of a database must not change it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from db.errors import DatabaseError
from db.migrate import HEAD_REVISION, newer_schema_reason
from db.references import UNENFORCED_REFERENCES
from db.sqlite import BUSY_TIMEOUT_MS, PRIVATE_FILE_MODE, refuse_non_regular, sqlite_file_path


class NotSqliteError(DatabaseError):
    """The operation works only on an SQLite file database."""


@dataclass(frozen=True, slots=True)
class BackupResult:
    """A finished backup: of what, where, how big, how long, and how the copy was verified.

    `source` is the file, or the server URL with its password hidden; `pages` is the SQLite
    copy's page count (None for a dump); `verified` says what checked the copy.
    """

    source: str
    destination: Path
    size_bytes: int
    pages: int | None
    seconds: float
    verified: str
    method: str


@dataclass(frozen=True, slots=True)
class CheckResult:
    """A check: ok when there are no problems; `revision` the schema version found.

    `target` is the file, or the server URL with its password hidden; `checks` names what was
    checked besides the schema revision.
    """

    target: str
    problems: tuple[str, ...]
    revision: str | None
    head: str
    checks: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when every check and the schema version are fine."""
        return not self.problems


def sqlite_path_of(url: str) -> Path:
    """The file an SQLite URL names; NotSqliteError for other databases or in-memory SQLite."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise DatabaseError(f"invalid database URL {url!r}: {exc}") from exc
    path = sqlite_file_path(parsed)
    if path is None:
        shown = parsed.render_as_string(hide_password=True)
        raise NotSqliteError(
            f"{shown} is not an SQLite file database"
        )
    return path


def _open_existing(path: Path, *, read_only: bool) -> sqlite3.Connection:
    refuse_non_regular(path, "database")
    if not path.is_file():
        raise DatabaseError(f"database file {path} does not exist")
    mode = "ro" if read_only else "rw"
    try:
        # timeout= installs SQLite's busy handler (the busy_timeout); nothing is read yet.
        connection = sqlite3.connect(f"file:{path}?mode={mode}", uri=True,
                                     timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as exc:
        raise DatabaseError(f"cannot open {path}: {exc}") from exc
    return connection


def backup_sqlite(url: str, destination: Path, *, force: bool = False) -> BackupResult:
    """Copy the database at `url` to `destination` (mode 0600) with SQLite's online backup.

    The copy is one consistent snapshot even while another process writes (WAL readers do not
    block writers). It is written to a temporary file beside `destination`, switched to a
    self-contained rollback-journal file, checked with quick_check, then renamed into place.
    Raises DatabaseError when `destination` exists and not `force`, or on any SQLite error.
    """
    source_path = sqlite_path_of(url)
    destination = destination.expanduser()
    refuse_non_regular(destination, "backup destination")
    if destination.exists() and not force:
        raise DatabaseError(f"{destination} already exists (use --force to overwrite it)")
    if destination.resolve() == source_path.resolve():
        raise DatabaseError("the backup destination is the database itself")
    if not destination.parent.is_dir():
        raise DatabaseError(f"directory {destination.parent} does not exist")
    temporary = destination.with_name(f".{destination.name}.{os.getpid()}.tmp")
    started = time.monotonic()
    source = _open_existing(source_path, read_only=True)
    try:
        fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC,
                     PRIVATE_FILE_MODE)
        os.close(fd)
        target = sqlite3.connect(temporary)
        try:
            source.backup(target)
            target.execute("PRAGMA journal_mode = DELETE")
            pages = int(target.execute("PRAGMA page_count").fetchone()[0])
            verdict = str(target.execute("PRAGMA quick_check").fetchone()[0])
        finally:
            target.close()
        if verdict != "ok":
            raise DatabaseError(f"the backup copy failed quick_check: {verdict}")
        os.chmod(temporary, PRIVATE_FILE_MODE)
        os.replace(temporary, destination)
    except sqlite3.Error as exc:
        raise DatabaseError(f"backup of {source_path} failed: {exc}") from exc
    except OSError as exc:
        raise DatabaseError(f"cannot write {destination}: {exc.strerror or exc}") from exc
    finally:
        source.close()
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return BackupResult(str(source_path), destination, destination.stat().st_size, pages,
                        time.monotonic() - started, f"quick_check {verdict}",
                        "sqlite online backup")


def check_sqlite(url: str, *, max_problems: int = 50) -> CheckResult:
    """Run integrity_check, foreign_key_check and the unenforced references' orphan counts, and
    compare the schema revision with head.

    Opens the file read-only. A damaged database is reported as a problem, not raised; a
    missing file, a path that is not a regular file, a file that is not an SQLite database
    at all and a non-SQLite URL raise DatabaseError (as opening it with any command does).
    """
    path = sqlite_path_of(url)
    connection = _open_existing(path, read_only=True)
    problems: list[str] = []
    revision: str | None = None
    try:
        try:
            for (message,) in connection.execute(f"PRAGMA integrity_check({max_problems})"):
                if message != "ok":
                    problems.append(f"integrity: {message}")
            for table, rowid, parent, _ in connection.execute("PRAGMA foreign_key_check"):
                problems.append(f"foreign key: {table} row {rowid} references missing {parent}")
                if len(problems) >= max_problems:
                    break
            for reference in UNENFORCED_REFERENCES:
                if _has_table(connection, reference.table):
                    (orphans,) = connection.execute(reference.orphans_sql()).fetchone()
                    if orphans:
                        problems.append(reference.problem(orphans))
            if _has_table(connection, "alembic_version"):
                versions = sorted(row[0] for row in connection.execute(
                    "SELECT version_num FROM alembic_version"))
                revision = ",".join(versions) or None
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorname", "") == "SQLITE_NOTADB":
                raise DatabaseError(f"cannot check {path}: {exc}") from exc
            problems.append(f"unreadable: {exc}")
    finally:
        connection.close()
    if revision != HEAD_REVISION and not any(p.startswith("unreadable") for p in problems):
        problems.append(revision_problem(revision))
    return CheckResult(str(path), tuple(problems), revision, HEAD_REVISION,
                       ("integrity", "foreign keys", "references"))


def revision_problem(revision: str | None) -> str:
    """The problem `db check` reports for a database at `revision`, not this fleet's head."""
    newer = newer_schema_reason(revision)
    if newer is not None:
        return newer
    return (f"schema revision is {revision or 'none'}, this fleet expects {HEAD_REVISION} "
            "(opening it with fleet migrates it)")


def _has_table(connection: sqlite3.Connection, name: str) -> bool:
    return connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone() is not None
