"""SQLite specifics: which URLs name a file, creating that file privately, connection pragmas."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

BUSY_TIMEOUT_MS = 10_000
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
SIDE_FILE_SUFFIXES = ("-wal", "-shm", "-journal")


def sqlite_file_path(url: URL) -> Path | None:
    """The database file an SQLite URL names, or None for other databases and in-memory ones."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database
    if not database or database == ":memory:" or url.query.get("uri") == "true":
        return None
    return Path(database).expanduser()


def prepare_sqlite_file(path: Path) -> None:
    """Create the parent directory (0700) and the database file (0600) before SQLite opens it.

    An existing file, and its -wal/-shm side files, owned by this user are narrowed to 0600.
    Raises OSError when the directory or file cannot be created.
    """
    parent = path.parent
    if not parent.exists():
        os.makedirs(parent, mode=PRIVATE_DIR_MODE, exist_ok=True)
    if path.is_dir():
        raise IsADirectoryError(21, "is a directory", str(path))
    if not path.exists():
        try:
            flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC
            fd = os.open(path, flags, PRIVATE_FILE_MODE)
        except FileExistsError:
            pass  # another process created it first; its mode is fixed below
        else:
            os.close(fd)
    for candidate in (path, *(Path(f"{path}{suffix}") for suffix in SIDE_FILE_SUFFIXES)):
        _make_private(candidate)


def _make_private(path: Path) -> None:
    """chmod `path` to 0600 if it exists, is ours and is readable or writable by others."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != PRIVATE_FILE_MODE:
        os.chmod(path, PRIVATE_FILE_MODE)


def apply_pragmas(dbapi_connection: Any, *, foreign_keys: bool) -> None:
    """Set the per-connection pragmas fleet relies on (busy wait, WAL, foreign keys, fsync level).

    busy_timeout comes first so that switching a new file to WAL waits for a concurrent opener.
    """
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()
