"""SQLite specifics: which URLs name a file, creating it privately, read-only opens, pragmas."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy.engine import URL, make_url

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


def read_only_reason(path: Path) -> str | None:
    """Why the existing SQLite file `path` can only be read by this process, or None.

    Read-only: a file without write permission for this user, on a read-only mount or marked
    immutable (`chattr +i`, which even root cannot write); or a file in a directory where this
    user cannot create the -wal and -shm files SQLite needs to write (unless both exist and are
    writable). None too when the file is missing or unreadable: opening it then fails normally.
    """
    if not path.is_file() or not os.access(path, os.R_OK):
        return None
    if not os.access(path, os.W_OK):
        return "this user cannot write the file"
    if os.access(path.parent, os.W_OK | os.X_OK):
        return None
    sides = [Path(f"{path}{suffix}") for suffix in ("-wal", "-shm")]
    if all(side.is_file() and os.access(side, os.W_OK) for side in sides):
        return None
    return "this user cannot create files in its directory, where SQLite keeps its -wal/-shm files"


def read_only_url(path: Path) -> URL:
    """An SQLite URI URL that opens `path` for reading only (`mode=ro`, never created).

    A WAL database read this way needs its -shm side file, or a directory where SQLite may
    create it; when neither is there (a read-only mount of a cleanly closed database), the URL
    opens the file as immutable instead, which reads it without any locking or side file.
    """
    target = f"file:{quote(str(path.resolve()))}"
    mode = "mode=ro"
    try:
        probe = sqlite3.connect(f"{target}?{mode}", uri=True)
        try:
            probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            probe.close()
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorname", "") != "SQLITE_CANTOPEN":
            raise
        mode = "immutable=1"
    return make_url(f"sqlite:///{target}?{mode}&uri=true")


def apply_pragmas(dbapi_connection: Any, *, foreign_keys: bool, read_only: bool = False) -> None:
    """Set the per-connection pragmas fleet relies on (busy wait, WAL, foreign keys, fsync level).

    busy_timeout comes first so that switching a new file to WAL waits for a concurrent opener.
    A read-only connection keeps the file's journal mode (changing it is a write) and refuses
    every write itself (`query_only`), whatever the file's permissions say.
    """
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if read_only:
            cursor.execute("PRAGMA query_only = ON")
        else:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
    finally:
        cursor.close()
