"""Host rows: merging host sources into the hosts table, state and probe facts, listing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from db.sql import RETURNING_ID, SqlReader, SqlWriter, writer_of
from db.types import HostFacts, HostProbeFacts, HostState

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.models import Host

PROBE_FACT_FIELDS = (
    "hostname",
    "kernel",
    "driver_version",
    "cuda_driver_version",
    "cpu_count",
    "memory_total_bytes",
    "gpu_count",
)


HOST_FACT_COLUMNS = ("name", "address", "port", "user", "connection", "source", "groups_json",
                     "labels_json")
# Quoted: "user" is a reserved word in PostgreSQL.
_QUOTED = {name: '"' + name + '"' for name in HOST_FACT_COLUMNS}
INSERT_HOST = (
    f"INSERT INTO hosts ({', '.join(_QUOTED.values())}, state, drained, first_seen, last_seen) "
    f"VALUES ({', '.join(':' + name for name in HOST_FACT_COLUMNS)}, 'unknown', FALSE, :now, "
    ":now)" + RETURNING_ID
)
# Listing a host is not contact: last_seen moves only with a good reading (update_host_state
# "up", update_host_probe_facts, the monitor's touch), so a down host keeps its last contact.
UPDATE_HOST_FACTS = (
    f"UPDATE hosts SET {', '.join(f'{quoted} = :{name}' for name, quoted in _QUOTED.items())} "
    "WHERE id = :id"
)


@dataclass
class _StoredHost:
    """A hosts row as sync_hosts tracks it while it renames and moves hosts."""

    id: int
    name: str
    address: str
    port: int


def sync_hosts(target: Session | SqlWriter, hosts: Sequence[HostFacts], now: int
               ) -> dict[str, int]:
    """Insert or update `hosts`, matched by (address, port), else by name; returns name → id.

    A new host's first_seen and last_seen are `now`; a listed host's last_seen is left as its
    last good reading set it. Hosts not listed are kept (never forgotten). A stored host whose
    name a listed host now takes, at another address, is renamed "NAME#ID" so names stay
    unique.
    Raises ValueError when two listed hosts share a name or an (address, port).
    """
    _check_unique(hosts)
    writer = writer_of(target)
    stored = [_StoredHost(*row) for row in writer.rows("SELECT id, name, address, port FROM hosts")]
    by_key = {(host.address, host.port): host for host in stored}
    by_name = {host.name: host for host in stored}
    ids_by_name: dict[str, int] = {}
    for facts in hosts:
        row = by_key.get((facts.address, facts.port)) or by_name.get(facts.name)
        holder = by_name.get(facts.name)
        if holder is not None and holder is not row:
            del by_name[holder.name]
            holder.name = f"{holder.name}#{holder.id}"
            writer.execute("UPDATE hosts SET name = :name WHERE id = :id",
                           {"name": holder.name, "id": holder.id})
            by_name[holder.name] = holder
        values = _fact_values(facts, now)
        if row is None:
            row = _StoredHost(writer.insert(INSERT_HOST, values), facts.name, facts.address,
                              facts.port)
        else:
            del by_key[(row.address, row.port)]
            by_name.pop(row.name, None)
            writer.execute(UPDATE_HOST_FACTS, {**values, "id": row.id})
            row.name, row.address, row.port = facts.name, facts.address, facts.port
        by_key[(row.address, row.port)] = row
        by_name[row.name] = row
        ids_by_name[facts.name] = row.id
    return ids_by_name


def _check_unique(hosts: Sequence[HostFacts]) -> None:
    names: set[str] = set()
    keys: set[tuple[str, int]] = set()
    for facts in hosts:
        if facts.name in names:
            raise ValueError(f"host name {facts.name!r} listed twice")
        if (facts.address, facts.port) in keys:
            raise ValueError(f"host {facts.address}:{facts.port} listed twice ({facts.name!r})")
        names.add(facts.name)
        keys.add((facts.address, facts.port))


def _fact_values(facts: HostFacts, now: int) -> dict[str, object]:
    """The bound values of INSERT_HOST and UPDATE_HOST_FACTS for `facts`."""
    return {
        "name": facts.name, "address": facts.address, "port": facts.port, "user": facts.user,
        "connection": facts.connection, "source": facts.source,
        "groups_json": json.dumps(list(facts.groups)),
        "labels_json": json.dumps([list(pair) for pair in facts.labels]), "now": now,
    }


def host_state(target: Session | SqlWriter, host_id: int) -> str:
    """The stored state of a host. Raises LookupError for an unknown host id."""
    row = writer_of(target).first("SELECT state FROM hosts WHERE id = :id", {"id": host_id})
    if row is None:
        raise LookupError(f"no host with id {host_id}")
    return str(row[0])


def host_states(reader: SqlReader, host_ids: Sequence[int]) -> dict[int, str]:
    """The stored state of each host of `host_ids` (unknown ids are left out), by id."""
    return {host_id: state for host_id, state in reader.rows_in(
        "SELECT id, state FROM hosts WHERE id IN ({values})", "id", host_ids)}


def host_ids_named(reader: SqlReader, names: Sequence[str]) -> dict[str, int]:
    """name → id of each stored host of `names` (unknown names are left out)."""
    return {name: host_id for name, host_id in reader.rows_in(
        "SELECT name, id FROM hosts WHERE name IN ({values})", "name", names)}


def update_host_state(
    target: Session | SqlWriter, host_id: int, state: HostState, reason: str | None, now: int
) -> str:
    """Record the outcome of contacting a host; returns its previous state.

    "up" also refreshes last_seen. Raises LookupError for an unknown host id.
    """
    writer = writer_of(target)
    previous = host_state(writer, host_id)
    seen = ", last_seen = :now" if state == "up" else ""
    writer.execute(f"UPDATE hosts SET state = :state, state_reason = :reason, "
                   f"last_probe_at = :now{seen} WHERE id = :id",
                   {"state": state, "reason": reason, "now": now, "id": host_id})
    return previous


def update_host_probe_facts(
    target: Session | SqlWriter, host_id: int, facts: HostProbeFacts, now: int
) -> dict[str, tuple[object, object]]:
    """Store a probe's host facts; returns {field: (old, new)} for every field that changed.

    A None in `facts` (not readable this time) keeps the stored value.
    """
    writer = writer_of(target)
    row = writer.first(f"SELECT {', '.join(PROBE_FACT_FIELDS)} FROM hosts WHERE id = :id",
                       {"id": host_id})
    if row is None:
        raise LookupError(f"no host with id {host_id}")
    changed: dict[str, tuple[object, object]] = {}
    for name, old in zip(PROBE_FACT_FIELDS, row, strict=True):
        new = getattr(facts, name)
        if new is not None and new != old:
            changed[name] = (old, new)
    assignments = "".join(f"{name} = :{name}, " for name in changed)
    writer.execute(f"UPDATE hosts SET {assignments}last_probe_at = :now, last_seen = :now "
                   "WHERE id = :id",
                   {**{name: new for name, (_, new) in changed.items()}, "now": now,
                    "id": host_id})
    return changed


def set_host_drained(session: Session, host_id: int, drained: bool, reason: str | None) -> None:
    """Drain (no new work placed) or undrain a host."""
    row = _host(session, host_id)
    row.drained = drained
    row.drain_reason = reason if drained else None


def host_ids_by_name(session: Session) -> dict[str, int]:
    """name → id of every stored host."""
    from sqlalchemy import select

    from db.models import Host

    return {name: host_id for name, host_id in session.execute(select(Host.name, Host.id))}


def _host(session: Session, host_id: int) -> Host:
    from db.models import Host

    row = session.get(Host, host_id)
    if row is None:
        raise LookupError(f"no host with id {host_id}")
    return row
