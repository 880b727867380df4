"""The Core statements the monitor's writer runs on every flush, built once, and the drain
flags they read (kept out of the writer: it batches, this module only queries)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import BindParameter, Select, Table, Update
    from sqlalchemy.orm import Session


@dataclass(frozen=True)
class Drains:
    """Drain flags as stored: host name → reason, (host name, GPU index) → reason."""

    hosts: dict[str, str | None] = field(default_factory=dict)
    gpus: dict[tuple[str, int], str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class _Statements:
    """The Core statements every flush runs, built once: host ids go in as one expanding
    parameter, so no statement is rebuilt (and no id coerced) per flush."""

    host_states: Select[int, str]
    touch_hosts: Update


@cache
def flush_statements() -> _Statements:
    from sqlalchemy import bindparam, select, update

    hosts = hosts_table()
    ids: BindParameter[list[int]] = bindparam("ids", expanding=True)
    now: BindParameter[int] = bindparam("now")
    return _Statements(
        host_states=select(hosts.c.id, hosts.c.state).where(hosts.c.id.in_(ids)),
        touch_hosts=update(hosts).where(hosts.c.id.in_(ids)).values(last_seen=now,
                                                                      last_probe_at=now),
    )


def hosts_table() -> Table:
    from db.models import Host

    table: Table = Host.__table__  # type: ignore[assignment]
    return table


def read_drains(session: Session) -> Drains:
    """The stored drain flags, read with Core selects (they run every flush)."""
    from sqlalchemy import select

    from db.models import Gpu

    table = hosts_table()
    gpus_table: Table = Gpu.__table__  # type: ignore[assignment]
    host_name, gpu = table.c.name, gpus_table.c
    hosts = {
        name: reason
        for name, reason in session.execute(
            select(host_name, table.c.drain_reason).where(table.c.drained.is_(True))
        )
    }
    gpus = {
        (name, idx): reason
        for name, idx, reason in session.execute(
            select(host_name, gpu.idx, gpu.drain_reason)
            .select_from(gpus_table.join(table, table.c.id == gpu.host_id))
            .where(gpu.drained.is_(True))
        )
    }
    return Drains(hosts, gpus)


def now_s() -> int:
    """Epoch seconds now, as the hosts table stores them."""
    return int(time.time())
