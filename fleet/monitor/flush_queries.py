"""The plain SQL the monitor's writer runs on every flush, and the drain flags it reads (kept
out of the writer: it batches, this module only queries).

Host ids go in as IN lists of at most db.sql.IN_LIST_CHUNK values, whose few distinct lengths
each driver's statement cache keeps; on an SQLite file the flush runs on the stdlib driver
(db.engine.Database.writer), elsewhere inside a SQLAlchemy session.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from db.sql import SqlReader, SqlWriter, chunks, in_list


@dataclass(frozen=True)
class Drains:
    """Drain flags as stored: host name → reason, (host name, GPU index) → reason."""

    hosts: dict[str, str | None] = field(default_factory=dict)
    gpus: dict[tuple[str, int], str | None] = field(default_factory=dict)


def touch_hosts(writer: SqlWriter, ids: Sequence[int], now: int) -> None:
    """Set last_seen and last_probe_at of the hosts `ids` to `now`."""
    for chunk in chunks(ids):
        placeholders, params = in_list("id", chunk)
        writer.execute(f"UPDATE hosts SET last_seen = :now, last_probe_at = :now "
                       f"WHERE id IN ({placeholders})", {**params, "now": now})


def read_drains(reader: SqlReader) -> Drains:
    """The stored drain flags (two small selects: they run every flush)."""
    hosts: dict[str, str | None] = {name: reason for name, reason in reader.rows(
        "SELECT name, drain_reason FROM hosts WHERE drained = TRUE")}
    gpus = {(name, idx): reason for name, idx, reason in reader.rows(
        "SELECT hosts.name, gpus.idx, gpus.drain_reason FROM gpus "
        "JOIN hosts ON hosts.id = gpus.host_id WHERE gpus.drained = TRUE")}
    return Drains(hosts, gpus)


def now_s() -> int:
    """Epoch seconds now, as the hosts table stores them."""
    return int(time.time())
