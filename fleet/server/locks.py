"""One server per socket and per database: flock'd lock files (SQLite) or an advisory lock
(PostgreSQL), each naming the running pid."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fleet.errors import ConfigError

if TYPE_CHECKING:
    from db.engine import Database

LABEL_PREFIX = "fleet serve pid "


class ServerLock(Protocol):
    """What `fleet serve` holds for its life: taken at start, dropped at stop."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...


class InstanceLock:
    """An exclusive, non-blocking flock on `path` holding this process's pid.

    The kernel drops the lock when the process dies, so a crashed server never blocks the
    next one; the file itself stays (removing it would race with a starting server).
    """

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; ConfigError naming the pid of the server that holds it."""
        try:  # O_NOFOLLOW: a planted symlink must not make us truncate its target
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise ConfigError(f"cannot open the lock file {self.path}: {exc.strerror or exc}") \
                from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(f"another fleet serve (pid {holder}) is already running on "
                              f"{self.what}; stop it first (kill {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
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


class PostgresServeLock:
    """The database's advisory lock (db.serve_lock), its holder named by pid and host."""

    def __init__(self, database: Database, what: str) -> None:
        from db.serve_lock import ServeLock

        self.what = what
        self.database = database
        self._lock = ServeLock(database.engine,
                               f"{LABEL_PREFIX}{os.getpid()} on {socket.gethostname()}")

    def acquire(self) -> None:
        """Take the lock; ConfigError naming the server that holds it."""
        from fleet.storage import storage_errors

        with storage_errors("take the server lock", self.database.url):
            if self._lock.try_acquire():
                return
            holder = self._lock.holder() or ""
        pid, _, host = holder.removeprefix(LABEL_PREFIX).partition(" on ")
        raise ConfigError(f"another fleet serve (pid {pid or 'unknown'}) is already running on "
                          f"{self.what}{f' (host {host})' if host else ''}; stop it first")

    def release(self) -> None:
        """Drop the lock (closing its connection)."""
        from fleet.storage import storage_errors

        with storage_errors("release the server lock", self.database.url):
            self._lock.release()
