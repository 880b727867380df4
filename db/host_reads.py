"""Reading hosts back in plain SQL (db.sql): every stored host, and adopted hosts' endpoints."""

from __future__ import annotations

import json

from db.sql import Row, SqlReader
from db.types import HostRow

# A host's columns in HostRow's order (groups and labels as their stored JSON).
_HOST_SELECT = """
SELECT id, name, address, port, "user", connection, source, groups_json, labels_json, state,
       state_reason, drained, drain_reason, hostname, kernel, driver_version,
       cuda_driver_version, cpu_count, memory_total_bytes, gpu_count, first_seen, last_seen,
       last_probe_at
FROM hosts
"""


def list_hosts(reader: SqlReader) -> list[HostRow]:
    """Every stored host, ordered by name."""
    return [_host_row(row) for row in reader.rows(f"{_HOST_SELECT} ORDER BY name")]


def adopted_endpoints(reader: SqlReader) -> list[tuple[str, str, int, str | None]]:
    """(name, address, port, user) of every host adopted through discovery, by name."""
    rows = reader.rows("SELECT name, address, port, \"user\" FROM hosts "
                       "WHERE source = 'adopted' ORDER BY name")
    return [(name, address, port, user) for name, address, port, user in rows]


def _host_row(row: Row) -> HostRow:
    (host_id, name, address, port, user, connection, source, groups_json, labels_json, state,
     state_reason, drained, drain_reason, hostname, kernel, driver_version, cuda_driver_version,
     cpu_count, memory_total_bytes, gpu_count, first_seen, last_seen, last_probe_at) = row
    return HostRow(
        id=host_id,
        name=name,
        address=address,
        port=port,
        user=user,
        connection=connection,
        source=source,
        groups=tuple(str(group) for group in json.loads(groups_json)),
        labels=tuple((str(key), str(value)) for key, value in json.loads(labels_json)),
        state=state,
        state_reason=state_reason,
        drained=bool(drained),
        drain_reason=drain_reason,
        hostname=hostname,
        kernel=kernel,
        driver_version=driver_version,
        cuda_driver_version=cuda_driver_version,
        cpu_count=cpu_count,
        memory_total_bytes=memory_total_bytes,
        gpu_count=gpu_count,
        first_seen=first_seen,
        last_seen=last_seen,
        last_probe_at=last_probe_at,
    )
