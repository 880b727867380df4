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
    from sqlalchemy.sql.dml import ReturningUpdate


@dataclass(frozen=True)
class Drains:
    """Drain flags as stored: host name → reason, (host name, GPU index) → reason."""

    hosts: dict[str, str | None] = field(default_factory=dict)
    gpus: dict[tuple[str, int], str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class _Statements:
    """The Core statements every flush runs, built once: host ids go in as one expanding
    parameter, so no statement is rebuilt (and no id coerced) per flush. `touch_hosts` returns
    each touched host's id and stored state where the dialect has UPDATE ... RETURNING (SQLite
    3.35 and later, PostgreSQL), so a steady flush needs no `host_states` select."""

    host_states: Select[int, str]
    touch_hosts: Update
    touch_hosts_returning: ReturningUpdate[int, str]
    drained_hosts: Select[str, str | None]
    drained_gpus: Select[str, int, str | None]


@cache
def flush_statements() -> _Statements:
    from sqlalchemy import bindparam, select, update

    from db.models import Gpu

    hosts = hosts_table()
    gpus: Table = Gpu.__table__  # type: ignore[assignment]
    ids: BindParameter[list[int]] = bindparam("ids", expanding=True)
    now: BindParameter[int] = bindparam("now")
    touch = update(hosts).where(hosts.c.id.in_(ids)).values(last_seen=now, last_probe_at=now)
    return _Statements(
        host_states=select(hosts.c.id, hosts.c.state).where(hosts.c.id.in_(ids)),
        touch_hosts=touch,
        touch_hosts_returning=touch.returning(hosts.c.id, hosts.c.state),
        drained_hosts=select(hosts.c.name, hosts.c.drain_reason).where(hosts.c.drained.is_(True)),
        drained_gpus=select(hosts.c.name, gpus.c.idx, gpus.c.drain_reason)
        .select_from(gpus.join(hosts, hosts.c.id == gpus.c.host_id))
        .where(gpus.c.drained.is_(True)),
    )


def hosts_table() -> Table:
    from db.models import Host

    table: Table = Host.__table__  # type: ignore[assignment]
    return table


def read_drains(session: Session) -> Drains:
    """The stored drain flags, read with the Core selects built once (they run every flush)."""
    statements = flush_statements()
    hosts = dict(session.execute(statements.drained_hosts).all())
    gpus = {(name, idx): reason
            for name, idx, reason in session.execute(statements.drained_gpus)}
    return Drains(hosts, gpus)


def now_s() -> int:
    """Epoch seconds now, as the hosts table stores them."""
    return int(time.time())
