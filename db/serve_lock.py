"""The one `fleet serve` of a PostgreSQL database: a session advisory lock, and who holds it.

PostgreSQL drops a session's advisory locks when its connection ends, so a server that crashed
(or whose machine did) never blocks the next one; the holder is named from pg_stat_activity.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

# "flee" as an int4: pg_locks shows it as classid 0, objid SERVE_LOCK_KEY.
SERVE_LOCK_KEY = 0x666C6565


class ServeLock:
    """Held on one dedicated connection for the server's life; `label` names the holder."""

    def __init__(self, engine: Engine, label: str) -> None:
        self.engine = engine
        self.label = label
        self._connection: Connection | None = None

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; True when this process holds it now."""
        connection = self.engine.connect()
        try:
            connection.execute(text("SELECT set_config('application_name', :label, false)"),
                               {"label": self.label[:63]})
            taken = bool(connection.execute(text("SELECT pg_try_advisory_lock(:key)"),
                                            {"key": SERVE_LOCK_KEY}).scalar())
            connection.commit()
        except BaseException:
            connection.close()
            raise
        if not taken:
            connection.close()
            return False
        self._connection = connection
        return True

    def holder(self) -> str | None:
        """The application_name of the session holding the lock (None: nobody now)."""
        with self.engine.connect() as connection:
            return connection.execute(text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a "
                "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                "AND l.classid = 0 AND l.objid = :key AND l.objsubid = 1 LIMIT 1"),
                {"key": SERVE_LOCK_KEY}).scalar()

    def release(self) -> None:
        """Let go of the lock and its connection."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": SERVE_LOCK_KEY})
            connection.commit()
        finally:
            connection.close()
