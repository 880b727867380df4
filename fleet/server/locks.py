"""One server per socket, one recorder per database: flock'd lock files (SQLite) or the
database's advisory lock (PostgreSQL), each naming the process that holds it."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fleet.errors import ConfigError

if TYPE_CHECKING:
    from db.engine import Database

log = logging.getLogger(__name__)

SERVE = "fleet serve"
MONITOR = "fleet monitor"
# How a monitor holding PostgreSQL's lock names its session (a leading server: "fleet serve pid").
MONITOR_PREFIX = f"{MONITOR} pid "
# Who holds a lock whose holder PostgreSQL no longer names (it let go meanwhile).
SOMEONE = "another fleet serve or fleet monitor"
# How often a monitor checks that its PostgreSQL lock is still its own.
KEEP_EVERY_S = 5.0


def lock_file_holder(text: str) -> tuple[str, str]:
    """(pid, what holds it) from a lock file's text `PID [fleet serve|fleet monitor]` (a file
    with only the pid, as older servers wrote it, is a server's)."""
    written = text.split(maxsplit=1)
    return (written[0] if written else "unknown"), (written[1].strip() if len(written) > 1
                                                    else SERVE)


class ServerLock(Protocol):
    """What `fleet serve` holds for its life: taken at start, dropped at stop."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...


class InstanceLock:
    """An exclusive, non-blocking flock on `path` holding this process's pid and what it is
    (`holder`: "fleet serve" or "fleet monitor").

    The kernel drops the lock when the process dies, so a crashed server never blocks the
    next one; the file itself stays (removing it would race with a starting server).
    """

    def __init__(self, path: Path, what: str, holder: str = SERVE, *,
                 same_kind_hint: str = "") -> None:
        self.path = path
        self.what = what
        self.holder = holder
        self.same_kind_hint = same_kind_hint  # said when the holder is of our own kind
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; ConfigError naming the process that holds it."""
        try:  # O_NOFOLLOW: a planted symlink must not make us truncate its target
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise ConfigError(f"cannot open the lock file {self.path}: {exc.strerror or exc}") \
                from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, holder = lock_file_holder(os.pread(fd, 64, 0).decode(errors="replace"))
            os.close(fd)
            hint = f" ({self.same_kind_hint})" if holder == self.holder and \
                self.same_kind_hint else ""
            raise ConfigError(f"another {holder} (pid {pid}) is already running on "
                              f"{self.what}{hint}; stop it first (kill {pid})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {self.holder}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the pid is cleared so the file names nobody)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)


def remove_stale_socket(path: Path) -> None:
    """Remove a socket file left by a dead server (call with the socket's lock held).

    ConfigError when something other than a socket is in the way: it is not ours to delete.
    """
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise ConfigError(f"{path} exists and is not a socket; refusing to replace it")
    path.unlink()


def database_lock_path(url: str) -> Path | None:
    """The lock file next to a SQLite database file (None for other databases or :memory:)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or not parsed.database or \
            parsed.database == ":memory:":
        return None
    return Path(parsed.database + ".serve.lock")


class PostgresRecorderLock:
    """The database's advisory lock (db.serve_lock, the one a server pair elects its leader
    with), held by a `fleet monitor`: one process records a database at a time.

    The lock lives on one session, which a database restart ends: `keep` takes it again on a
    new session once the database answers, and says when another process got it meanwhile.
    """

    def __init__(self, database: Database, what: str) -> None:
        from db.serve_lock import ServeLock

        self.what = what
        self.database = database
        self._lock = ServeLock(database.engine,
                               f"{MONITOR_PREFIX}{os.getpid()} on {socket.gethostname()}")

    def acquire(self) -> None:
        """Take the lock; ConfigError naming the process (a server or a monitor) that holds it."""
        from fleet.storage import storage_errors

        with storage_errors("take the recorder lock", self.database.url):
            if self._lock.try_acquire():
                return
            holder = self._lock.holder() or SOMEONE
        raise ConfigError(f"{holder} is already recording {self.what}; stop it first")

    def keep(self) -> str | None:
        """Check the lock is still ours, taking it again if its session ended; None while this
        process holds it, else the process that holds it now. Raises (a DBAPIError) while the
        database cannot be reached."""
        from sqlalchemy.exc import DBAPIError

        if self._lock.held:
            try:
                self._lock.heartbeat()
                return None
            except DBAPIError as exc:
                log.warning("the recorder lock's session ended (%s); taking the lock again",
                            exc.orig)
        if self._lock.try_acquire():
            log.warning("took the recorder lock of %s again", self.what)
            return None
        return self._lock.holder() or SOMEONE

    def release(self) -> None:
        """Drop the lock (closing its connection). A session the database ended meanwhile (a
        restart, a terminated backend) already took the lock with it: that is logged."""
        from sqlalchemy.exc import DBAPIError

        try:
            self._lock.release()
        except DBAPIError as exc:
            log.info("the recorder lock's session had ended already: %s", exc.orig)


async def hold_until_stopped(lock: PostgresRecorderLock, stop: asyncio.Event,
                             every_s: float = KEEP_EVERY_S) -> str | None:
    """Check `lock` every `every_s` until `stop` is set (then None). When another process
    took it while this one's session was gone, set `stop` and return that process."""
    from sqlalchemy.exc import DBAPIError

    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(every_s):
                await stop.wait()
        if stop.is_set():
            return None
        try:
            holder = await asyncio.to_thread(lock.keep)
        except DBAPIError as exc:  # the database is away: the writer rides that out, and so do we
            log.info("cannot check the recorder lock now: %s", exc.orig)
            continue
        if holder is not None:
            stop.set()
            return holder


def recorder_lock(database: Database) -> ServerLock | None:
    """The lock a `fleet monitor` holds while it records `database` (None for a read-only
    SQLite file: nothing is recorded there, and the monitor says so)."""
    from fleet.storage import redact_url

    shown = redact_url(database.url)
    path = database_lock_path(database.url)
    if path is not None:
        if database.read_only_file is not None:
            return None
        return InstanceLock(path, f"SQLite database {shown}", MONITOR)
    if database.engine.dialect.name != "postgresql":
        return None  # SQLite :memory: (nobody else can record it), or a database with no lock
    return PostgresRecorderLock(database, f"database {shown}")
