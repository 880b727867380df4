"""Host rows: merging host sources into the hosts table, state and probe facts, listing."""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import Host
from db.types import HostFacts, HostProbeFacts, HostState

PROBE_FACT_FIELDS = (
    "hostname",
    "kernel",
    "driver_version",
    "cuda_driver_version",
    "cpu_count",
    "memory_total_bytes",
    "gpu_count",
)


def sync_hosts(session: Session, hosts: Sequence[HostFacts], now: int) -> dict[str, int]:
    """Insert or update `hosts`, matched by (address, port), else by name; returns name → id.

    Hosts not listed are kept (never forgotten). A stored host whose name a listed host now
    takes, at another address, is renamed "NAME#ID" so names stay unique.
    Raises ValueError when two listed hosts share a name or an (address, port).
    """
    _check_unique(hosts)
    stored = list(session.scalars(select(Host)))
    by_key = {(host.address, host.port): host for host in stored}
    by_name = {host.name: host for host in stored}
    ids_by_name: dict[str, int] = {}
    for facts in hosts:
        row = by_key.get((facts.address, facts.port)) or by_name.get(facts.name)
        holder = by_name.get(facts.name)
        if holder is not None and holder is not row:
            del by_name[holder.name]
            holder.name = f"{holder.name}#{holder.id}"
            by_name[holder.name] = holder
            session.flush()
        if row is None:
            row = Host(
                state="unknown",
                drained=False,
                first_seen=now,
                name=facts.name,
                address=facts.address,
                port=facts.port,
            )
            session.add(row)
        else:
            del by_key[(row.address, row.port)]
            by_name.pop(row.name, None)
        _apply_facts(row, facts, now)
        by_key[(row.address, row.port)] = row
        by_name[row.name] = row
        session.flush()
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


def _apply_facts(row: Host, facts: HostFacts, now: int) -> None:
    row.name = facts.name
    row.address = facts.address
    row.port = facts.port
    row.user = facts.user
    row.connection = facts.connection
    row.source = facts.source
    row.groups_json = json.dumps(list(facts.groups))
    row.labels_json = json.dumps([list(pair) for pair in facts.labels])
    row.last_seen = now


def host_state(session: Session, host_id: int) -> str:
    """The stored state of a host. Raises LookupError for an unknown host id."""
    return _host(session, host_id).state


def update_host_state(
    session: Session, host_id: int, state: HostState, reason: str | None, now: int
) -> str:
    """Record the outcome of contacting a host; returns its previous state.

    "up" also refreshes last_seen. Raises LookupError for an unknown host id.
    """
    row = _host(session, host_id)
    previous = row.state
    row.state = state
    row.state_reason = reason
    row.last_probe_at = now
    if state == "up":
        row.last_seen = now
    return previous


def update_host_probe_facts(
    session: Session, host_id: int, facts: HostProbeFacts, now: int
) -> dict[str, tuple[object, object]]:
    """Store a probe's host facts; returns {field: (old, new)} for every field that changed.

    A None in `facts` (not readable this time) keeps the stored value.
    """
    row = _host(session, host_id)
    changed: dict[str, tuple[object, object]] = {}
    for name in PROBE_FACT_FIELDS:
        new = getattr(facts, name)
        old = getattr(row, name)
        if new is not None and new != old:
            setattr(row, name, new)
            changed[name] = (old, new)
    row.last_probe_at = now
    row.last_seen = now
    return changed


def set_host_drained(session: Session, host_id: int, drained: bool, reason: str | None) -> None:
    """Drain (no new work placed) or undrain a host."""
    row = _host(session, host_id)
    row.drained = drained
    row.drain_reason = reason if drained else None


def host_ids_by_name(session: Session) -> dict[str, int]:
    """name → id of every stored host."""
    return {name: host_id for name, host_id in session.execute(select(Host.name, Host.id))}


def _host(session: Session, host_id: int) -> Host:
    row = session.get(Host, host_id)
    if row is None:
        raise LookupError(f"no host with id {host_id}")
    return row
