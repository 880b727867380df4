"""`fleet serve --status`: which `fleet serve` leads a database, and which stand by.

Read from the database itself, so it answers from any machine that can reach it: on
PostgreSQL, the leader lock's holder, the leadership record (epoch, since) and the sessions
the standbys name themselves with; on SQLite, the pid in the file's server lock. A `fleet
monitor` that holds the lock instead (it records the database, no server leads) is shown as
the "monitor".
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleet.server.leader import LEADER_PREFIX, STANDBY_PREFIX
from fleet.server.locks import MONITOR_PREFIX, SERVE, database_lock_path, lock_file_holder
from fleet.storage import storage_errors

if TYPE_CHECKING:
    from db.engine import Database


@dataclass(frozen=True)
class Controller:
    """One running `fleet serve` of the database (or the `fleet monitor` recording it)."""

    role: str  # "leader", "standby" or "monitor"
    pid: int | None
    host: str
    epoch: int | None = None
    since_s: float | None = None


def _parse(label: str, prefix: str) -> tuple[int | None, str]:
    pid, _, host = label.removeprefix(prefix).partition(" on ")
    return (int(pid) if pid.isdigit() else None), host


def read_controllers(db_url: str | None) -> tuple[str, list[Controller]]:
    """(the database as shown, its controllers) for `fleet serve --status`."""
    from db.engine import open_database

    with storage_errors(None):
        database = open_database(db_url)
    try:
        return database.display_url, controllers(database)
    finally:
        database.close()


def controllers(database: Database) -> list[Controller]:
    """The database's running servers, the leader first."""
    if database.engine.dialect.name == "postgresql":
        with storage_errors("read the controllers", database.url):
            return _postgres_controllers(database)
    lock = database_lock_path(database.url)
    holder = _sqlite_lock_holder(lock) if lock is not None else None
    if holder is None:
        return []
    pid, what = holder
    return [Controller("leader" if what == SERVE else "monitor", pid, os.uname().nodename)]


def _postgres_controllers(database: Database) -> list[Controller]:
    from db.leadership import current_leader
    from db.serve_lock import ServeLock, controller_sessions

    holder = ServeLock(database.engine, "").holder()
    with database.engine.connect() as connection:
        record = current_leader(connection)
        sessions = controller_sessions(connection, (STANDBY_PREFIX,))
    found: list[Controller] = []
    if holder is not None and holder.startswith(MONITOR_PREFIX):
        found.append(Controller("monitor", *_parse(holder, MONITOR_PREFIX)))
    elif holder is not None:
        pid, host = _parse(holder, LEADER_PREFIX)
        current = record if record is not None and record.holder == holder else None
        found.append(Controller("leader", pid, host, current.epoch if current else None,
                                current.since_s if current else None))
    found += [Controller("standby", *_parse(name, STANDBY_PREFIX)) for name in sessions]
    return found


def _sqlite_lock_holder(path: os.PathLike[str]) -> tuple[int | None, str] | None:
    """(pid, "fleet serve" or "fleet monitor") from a SQLite database's lock while a live
    process holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: a server runs
            pid, what = lock_file_holder(os.pread(fd, 64, 0).decode(errors="replace"))
            return (int(pid) if pid.isdigit() else None), what
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
