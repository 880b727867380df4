"""SQLite specifics: which URLs name a file, creating it privately, read-only opens, pragmas.

Nothing here imports SQLAlchemy: a command that only reads an SQLite file opens it with these
and the stdlib driver.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from db.errors import DatabaseError, InvalidDatabaseUrl

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

# The URL prefix of an SQLite file database: `sqlite://` + `/` + the file's path, quoted.
SQLITE_URL_PREFIX = "sqlite:///"
BUSY_TIMEOUT_MS = 10_000
# Once a monitor has run a few minutes, each GPU's newest entries in the (gpu_id, ts) index sit
# on a page of their own, so a flush dirties one 4 KiB page per GPU sample. SQLite's defaults
# (checkpoint every 1,000 WAL pages, 2 MiB of page cache) then copy every such page back into
# the file at each 1 s flush and spill the dirty pages of a large fleet's flush before commit.
# A checkpoint per 64 MiB of WAL copies a page once per many flushes; 32 MiB of cache holds the
# hot pages of ~4,000 GPUs. Measured in `make bench` (storage: "ingest into a grown database").
WAL_AUTOCHECKPOINT_PAGES = 16_000
WRITER_CACHE_KIB = 32 * 1024
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700

# A bool is bound as the integer SQLite stores for it anyway, through a registered adapter:
# unregistered, the driver first looks for __conform__ on each bool (not an exact int), raising
# and clearing an AttributeError, about 1 us a value; the monitor binds one per GPU sample.
sqlite3.register_adapter(bool, int)


def sqlite_url(database: str) -> str:
    """The URL of the SQLite database `database` (a path), as SQLAlchemy renders it: the path
    percent-quoted except spaces, `+` and `/` (a test holds the two to the same text)."""
    return SQLITE_URL_PREFIX + quote(database, safe=" +/")


def expand_home_in_sqlite_url(url: str) -> str:
    """`url` with a leading `~` or `~user` in an SQLite file path expanded (SQLite itself would
    open a directory named `~`); any other URL unchanged.

    Raises InvalidDatabaseUrl for `~user` naming no user (a typo would otherwise create a
    directory of that name; `./~user/...` names one on purpose).
    """
    if not url.startswith(SQLITE_URL_PREFIX + "~"):
        return url
    rest, mark, query = url[len(SQLITE_URL_PREFIX):].partition("?")
    return sqlite_url(expand_home(unquote(rest), url)) + mark + query


def expand_home(path: str, shown: str) -> str:
    """`path` with a leading `~` or `~user` expanded; InvalidDatabaseUrl (naming `shown`, the
    URL or path given) when there is no such user or no home directory to expand it to."""
    if not path.startswith("~"):
        return path
    try:
        expanded = os.path.expanduser(path)
    except (KeyError, RuntimeError):  # no $HOME and no passwd entry for this user
        expanded = path
    if expanded.startswith("~"):
        user = path[1:].split("/", 1)[0]
        if not user:
            raise InvalidDatabaseUrl(f"database URL {shown}: no home directory to expand ~ to")
        raise InvalidDatabaseUrl(f"database URL {shown}: no user {user!r} to expand ~{user} "
                                 f"for; write ./~{user}/... for a directory of that name")
    return expanded


def plain_sqlite_path(url: str) -> str | None:
    """The file a plain SQLite URL (`sqlite:///PATH`, no driver, no query) names, unquoted;
    None for any other URL and for in-memory databases.

    These are the URLs fleet writes itself (sqlite_url); other forms are left to SQLAlchemy's
    own parser (sqlite_file_path), which reads these the same way (tested).
    """
    if not url.startswith(SQLITE_URL_PREFIX) or "?" in url:
        return None
    database = unquote(url[len(SQLITE_URL_PREFIX):])
    if not database or database == ":memory:":
        return None
    return database


def sqlite_file_path(url: URL) -> Path | None:
    """The database file an SQLite URL names, or None for other databases and in-memory ones."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database
    if not database or database == ":memory:" or url.query.get("uri") == "true":
        return None
    # As the driver reads it: no `~` expansion (db.engine.resolve_database_url expands a
    # leading one in the URL itself, so fleet's file checks and the driver name one file).
    return Path(database)


def prepare_sqlite_file(path: Path) -> None:
    """Create the parent directory (0700) and the database file (0600) before SQLite opens it.

    Only what this creates gets those modes: an existing file keeps its own (SQLite gives the
    -wal/-shm files it makes the database file's mode). Raises DatabaseError when `path`
    exists and is not a regular file (fleet neither opens nor changes it), OSError when the
    directory or file cannot be created.
    """
    refuse_non_regular(path, "database")
    target = Path(os.path.realpath(path))  # where a symbolic link leads, as SQLite follows it
    parent = target.parent
    if not parent.exists():
        os.makedirs(parent, mode=PRIVATE_DIR_MODE, exist_ok=True)
    if not target.exists():
        try:
            flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC
            fd = os.open(target, flags, PRIVATE_FILE_MODE)
        except FileExistsError:
            pass  # another process created it first, with its own mode
        else:
            os.close(fd)
    refuse_non_regular(path, "database")  # what another process may have put there meanwhile


def non_regular_kind(path: Path) -> str | None:
    """What `path` is when it exists and is not a regular file (a symbolic link is followed):
    "a directory", "a FIFO", "a character device"...; None for a regular file or no file."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None  # none (a parent that is a file makes creating it fail with its own error)
    kinds = ((stat.S_ISREG, None), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((kind for test, kind in kinds if test(mode)), "a special file")


def refuse_non_regular(path: Path, role: str) -> None:
    """Raise DatabaseError naming `path` and what it is when it exists and is not a regular
    file: fleet never reads, replaces or changes the mode of such a path."""
    kind = non_regular_kind(path)
    if kind is not None:
        raise DatabaseError(f"{role} path {path} is {kind}, not a regular file; "
                            "fleet leaves it alone")


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


@dataclass(frozen=True)
class SqliteFile:
    """One fleet database file as the stdlib driver opens it: by path, or (read-only) by a
    `file:` URI with `mode=ro` or `immutable=1`."""

    path: Path  # absolute, as the driver opens it
    read_only_uri: str | None = None

    @property
    def engine_url(self) -> str | None:
        """The SQLAlchemy URL of a read-only open (None: the database's own URL serves)."""
        if self.read_only_uri is None:
            return None
        return f"{SQLITE_URL_PREFIX}{self.read_only_uri}&uri=true"

    def connect_reader(self) -> sqlite3.Connection:
        """A connection for reading only: autocommit (each block of reads opens its own
        transaction), waits out a writer's lock, refuses writes itself (`query_only`), and may
        be handed between threads (a pool gives it to one at a time)."""
        if self.read_only_uri is None:
            connection = sqlite3.connect(self.path, isolation_level=None,
                                         check_same_thread=False)
        else:
            connection = sqlite3.connect(self.read_only_uri, uri=True, isolation_level=None,
                                         check_same_thread=False)
        try:
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            connection.execute("PRAGMA query_only = ON")
        except sqlite3.Error:
            connection.close()
            raise
        return connection

    def connect_writer(self) -> sqlite3.Connection:
        """A connection for writing, with the pragmas an engine connection gets
        (apply_pragmas): autocommit mode, so its owner opens each transaction itself
        (db.sql.SqliteWriter), and it may be handed between threads one at a time."""
        if self.read_only_uri is not None:
            raise sqlite3.OperationalError(f"{self.path} was opened for reading only")
        connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            apply_pragmas(connection, foreign_keys=True)
        except sqlite3.Error:
            connection.close()
            raise
        return connection


def read_only_file(path: Path) -> SqliteFile:
    """`path` opened for reading only (`mode=ro`, never created).

    A WAL database read this way needs its -shm side file, or a directory where SQLite may
    create it; when neither is there (a read-only mount of a cleanly closed database), the file
    is opened as immutable instead, which reads it without any locking or side file.
    Raises sqlite3.Error when the file cannot be read as a database.
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
    return SqliteFile(path, f"{target}?{mode}")


def schema_revision(connection: sqlite3.Connection) -> str | None:
    """The Alembic revision an SQLite database is at (as db.migrate.current_revision reads
    it), or None when it was never migrated."""
    has_table = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
    ).fetchone()
    if has_table is None:
        return None
    versions = [str(version)
                for (version,) in connection.execute("SELECT version_num FROM alembic_version")]
    return ",".join(sorted(versions)) or None


def apply_pragmas(dbapi_connection: Any, *, foreign_keys: bool, read_only: bool = False) -> None:
    """Set the per-connection pragmas fleet relies on (busy wait, WAL, foreign keys, fsync level).

    busy_timeout comes first so that switching a new file to WAL waits for a concurrent opener.
    A read-only connection keeps the file's journal mode (changing it is a write) and refuses
    every write itself (`query_only`), whatever the file's permissions say. A writing one gets
    the checkpoint spacing and page cache that keep a grown database's flushes cheap (above).
    """
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if read_only:
            cursor.execute("PRAGMA query_only = ON")
        else:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
            cursor.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        cursor.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
    finally:
        cursor.close()
