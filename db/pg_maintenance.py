"""PostgreSQL backup (pg_dump, custom format, verified by pg_restore --list) and checking.

Like db.backup for SQLite, neither migrates nor creates anything in the database. The check
looks at the schema revision, the constraints and indexes the models declare (present, and
validated / valid per pg_constraint.convalidated and pg_index.indisvalid), and rows whose
foreign key points at nothing (possible after a restore with triggers disabled).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import NullPool

from db.backup import BackupResult, CheckResult, revision_problem
from db.errors import DatabaseError
from db.migrate import HEAD_REVISION
from db.models import Base
from db.references import UNENFORCED_REFERENCES
from db.sqlite import PRIVATE_FILE_MODE, refuse_non_regular

PG_LIB = Path("/usr/lib/postgresql")
DUMP_TIMEOUT_S = 3600


class ToolMissing(DatabaseError):
    """A PostgreSQL client tool (pg_dump, pg_restore) is not installed; the message names it."""


def postgresql_url(url: str) -> URL:
    """`url` parsed; DatabaseError when it is not a PostgreSQL URL."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise DatabaseError(f"invalid database URL {url!r}: {exc}") from exc
    if parsed.get_backend_name() != "postgresql":
        raise DatabaseError(f"{shown(parsed)} is not a PostgreSQL database")
    return parsed


def shown(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def find_tool(name: str) -> str:
    """The path of a PostgreSQL client tool: on PATH, else the newest /usr/lib/postgresql/N/bin."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted((p for p in PG_LIB.glob("*") if p.name.isdigit()),
                      key=lambda p: int(p.name), reverse=True)
    for version in versions:
        if (version / "bin" / name).exists():
            return str(version / "bin" / name)
    raise ToolMissing(
        f"{name} is not installed: backing up a PostgreSQL database needs {name} "
        "(Debian: apt install postgresql-client)"
    )


def libpq_environment(url: URL) -> dict[str, str]:
    """PG* variables that point libpq tools at `url` (the password travels in PGPASSWORD,
    never on a command line)."""
    env = dict(os.environ)
    query = {key: value if isinstance(value, str) else value[0]
             for key, value in url.query.items()}
    values = {
        "PGHOST": url.host or query.get("host"),
        "PGPORT": str(url.port) if url.port else query.get("port"),
        "PGUSER": url.username,
        "PGPASSWORD": url.password if isinstance(url.password, str) else None,
        "PGDATABASE": url.database,
        "PGSSLMODE": query.get("sslmode"),
    }
    env.update({key: value for key, value in values.items() if value})
    return env


def backup_postgresql(url: str, destination: Path, *, force: bool = False) -> BackupResult:
    """pg_dump the database at `url` to `destination` (custom format, mode 0600).

    The dump is one consistent snapshot (pg_dump reads in one repeatable-read transaction). It
    is written beside `destination`, listed with pg_restore --list, then renamed into place.
    Raises ToolMissing without pg_dump/pg_restore, DatabaseError on any other failure.
    """
    parsed = postgresql_url(url)
    destination = destination.expanduser()
    refuse_non_regular(destination, "backup destination")
    if destination.exists() and not force:
        raise DatabaseError(f"{destination} already exists (use --force to overwrite it)")
    if not destination.parent.is_dir():
        raise DatabaseError(f"directory {destination.parent} does not exist")
    pg_dump, pg_restore = find_tool("pg_dump"), find_tool("pg_restore")
    env = libpq_environment(parsed)
    temporary = destination.with_name(f".{destination.name}.{os.getpid()}.tmp")
    started = time.monotonic()
    try:
        fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC,
                     PRIVATE_FILE_MODE)
        os.close(fd)
        _run([pg_dump, "--format=custom", "--no-password", f"--file={temporary}"], env,
             f"pg_dump of {shown(parsed)}")
        listing = _run([pg_restore, "--list", str(temporary)], env, "pg_restore --list")
        entries = sum(1 for line in listing.splitlines() if line and not line.startswith(";"))
        os.chmod(temporary, PRIVATE_FILE_MODE)
        os.replace(temporary, destination)
    except OSError as exc:
        raise DatabaseError(f"cannot write {destination}: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return BackupResult(shown(parsed), destination, destination.stat().st_size, None,
                        time.monotonic() - started, f"pg_restore --list ok ({entries} entries)",
                        "pg_dump custom")


def _run(command: list[str], env: dict[str, str], what: str) -> str:
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=DUMP_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise DatabaseError(f"{what} did not finish within {DUMP_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        raise DatabaseError(f"{what} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def check_postgresql(url: str, *, max_problems: int = 50) -> CheckResult:
    """Schema revision, declared constraints and indexes (present and valid), orphan rows.

    Connects without migrating; a server that cannot be reached raises DatabaseError naming
    the URL with its password hidden.
    """
    parsed = postgresql_url(url)
    engine = create_engine(parsed, poolclass=NullPool)
    problems: list[str] = []
    try:
        with engine.connect() as connection:
            revision = _revision(connection)
            if revision is not None:
                problems += _constraint_problems(connection)
                problems += _index_problems(connection)
                problems += _orphan_problems(connection)
    except DBAPIError as exc:
        raise DatabaseError(f"cannot check database {shown(parsed)}: {exc.orig}") from exc
    finally:
        engine.dispose()
    if revision != HEAD_REVISION:
        problems.append(revision_problem(revision))
    return CheckResult(shown(parsed), tuple(problems[:max_problems]), revision, HEAD_REVISION,
                       ("constraints", "indexes", "orphan rows"))


def _revision(connection: Connection) -> str | None:
    exists = connection.scalar(text("SELECT to_regclass('alembic_version') IS NOT NULL"))
    if not exists:
        return None
    versions = sorted(connection.scalars(text("SELECT version_num FROM alembic_version")))
    return ",".join(versions) or None


def _constraint_problems(connection: Connection) -> list[str]:
    rows = connection.execute(text(
        "SELECT c.conname, c.convalidated FROM pg_constraint c "
        "JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = current_schema()"
    )).all()
    found = {name: validated for name, validated in rows}
    problems = [f"constraint {name} is not validated (NOT VALID)"
                for name, validated in sorted(found.items()) if not validated]
    preparer = connection.dialect.identifier_preparer
    for table in Base.metadata.sorted_tables:
        for constraint in table.constraints:
            # The name the naming convention gives it (what the migrations created).
            name = preparer.format_constraint(constraint)
            if name and name not in found:
                problems.append(f"constraint {name} on {table.name} is missing")
    return problems


def _index_problems(connection: Connection) -> list[str]:
    rows = connection.execute(text(
        "SELECT c.relname, i.indisvalid AND i.indisready FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema()"
    )).all()
    found = {name: usable for name, usable in rows}
    problems = [f"index {name} is invalid (pg_index.indisvalid false: rebuild it with "
                f"REINDEX INDEX {name})" for name, usable in sorted(found.items()) if not usable]
    for table in Base.metadata.sorted_tables:
        for index in table.indexes:
            if index.name and str(index.name) not in found:
                problems.append(f"index {index.name} on {table.name} is missing")
    return problems


def _orphan_problems(connection: Connection) -> list[str]:
    problems = []
    for table in Base.metadata.sorted_tables:
        for foreign_key in table.foreign_keys:
            column, target = foreign_key.parent, foreign_key.column
            orphans = connection.scalar(text(
                f"SELECT count(*) FROM {table.name} c WHERE c.{column.name} IS NOT NULL AND "
                f"NOT EXISTS (SELECT 1 FROM {target.table.name} p "
                f"WHERE p.{target.name} = c.{column.name})"
            ))
            if orphans:
                problems.append(f"foreign key: {orphans} {table.name} row(s) reference a missing "
                                f"{target.table.name} ({table.name}.{column.name})")
    for reference in UNENFORCED_REFERENCES:
        orphans = connection.scalar(text(reference.orphans_sql()))
        if orphans:
            problems.append(reference.problem(orphans))
    return problems
