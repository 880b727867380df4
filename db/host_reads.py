"""Reading hosts back in plain SQL (db.sql): the endpoints of hosts adopted through discovery."""

from __future__ import annotations

from db.sql import SqlReader


def adopted_endpoints(reader: SqlReader) -> list[tuple[str, str, int, str | None]]:
    """(name, address, port, user) of every host adopted through discovery, by name."""
    rows = reader.rows("SELECT name, address, port, \"user\" FROM hosts "
                       "WHERE source = 'adopted' ORDER BY name")
    return [(name, address, port, user) for name, address, port, user in rows]
