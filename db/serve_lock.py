"""The leading `fleet serve` of a PostgreSQL database: a session advisory lock, and who holds it.

PostgreSQL drops a session's advisory locks when its connection ends, so a server that crashed
(or whose machine did) never blocks the next one. A leader also sets `idle_session_timeout` on
the lock's session and keeps it busy with a heartbeat: a leader frozen (SIGSTOP, a hung
machine) stops beating, and the server ends its session, dropping the lock, within that
timeout. The holder is named from pg_stat_activity.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

# "flee" as an int4: pg_locks shows it as classid 0, objid SERVE_LOCK_KEY.
SERVE_LOCK_KEY = 0x666C6565


class ServeLock:
    """The lock on one dedicated connection, kept open between tries and for the leader's life;
    `label` (the session's application_name) names this process to the others."""

    def __init__(self, engine: Engine, label: str) -> None:
        self.engine = engine
        self.label = label
        self._connection: Connection | None = None
        self.held = False

    def _session(self) -> Connection:
        if self._connection is None or self._connection.closed or self._connection.invalidated:
            self._close()
            # Autocommit: each statement is its own transaction, so wherever the process
            # freezes its session is idle, never idle in a transaction, which
            # idle_session_timeout leaves alone (the lock would outlive the freeze).
            connection = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            try:
                self._set_label(connection)
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return self._connection

    def _set_label(self, connection: Connection) -> None:
        connection.execute(text("SELECT set_config('application_name', :label, false)"),
                           {"label": self.label[:63]})

    def relabel(self, label: str) -> None:
        """Name this process `label` from now on (a standby that became the leader)."""
        self.label = label
        self._set_label(self._session())

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; True when this process holds it now."""
        connection = self._session()
        try:
            taken = bool(connection.execute(text("SELECT pg_try_advisory_lock(:key)"),
                                            {"key": SERVE_LOCK_KEY}).scalar())
        except BaseException:
            self._close()
            raise
        self.held = taken
        return taken

    def end_when_idle(self, idle_timeout_s: float) -> None:
        """Have the server end the lock's session (dropping the lock) once it has been idle
        `idle_timeout_s`: from now on, `heartbeat` more often than that."""
        connection = self._session()
        connection.execute(text("SELECT set_config('idle_session_timeout', :ms, false)"),
                           {"ms": f"{int(idle_timeout_s * 1000)}ms"})

    def heartbeat(self) -> None:
        """One round trip on the lock's session; raises (a DBAPIError) when the session is gone,
        and with it the lock."""
        if self._connection is None or not self.held:
            raise RuntimeError("the serve lock is not held")
        try:
            self._connection.execute(text("SELECT 1"))
        except BaseException:
            self.held = False
            self._close()
            raise

    def holder(self) -> str | None:
        """The application_name of the session holding the lock on this database (None:
        nobody now). Advisory locks are per database, and pg_locks lists every database's."""
        with self.engine.connect() as connection:
            return connection.execute(text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a "
                "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                "AND l.database = (SELECT oid FROM pg_database "
                "WHERE datname = current_database()) "
                "AND l.classid = 0 AND l.objid = :key AND l.objsubid = 1 LIMIT 1"),
                {"key": SERVE_LOCK_KEY}).scalar()

    def release(self) -> None:
        """Let go of the lock and its connection."""
        connection = self._connection
        if connection is None:
            return
        try:
            if self.held and not connection.closed and not connection.invalidated:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"),
                                   {"key": SERVE_LOCK_KEY})
        finally:
            self.held = False
            self._close()

    def _close(self) -> None:
        """Close the lock's connection for good: its session settings (label, idle timeout)
        must not go back to the pool for others to inherit."""
        connection, self._connection = self._connection, None
        if connection is not None:
            if not connection.invalidated:
                connection.invalidate()
            connection.close()


def controller_sessions(connection: Connection, prefixes: tuple[str, ...]) -> list[str]:
    """The application_name of every session on this database named with one of `prefixes`
    (the pair's servers: leader and standbys), oldest first."""
    names = connection.execute(text(
        "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
        "ORDER BY backend_start")).scalars()
    return [name for name in names if name and name.startswith(prefixes)]
