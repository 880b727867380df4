"""Listing events with filters (time, severity, host, kind glob) and the GPU each concerns."""

from __future__ import annotations

import json

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.models import Event, Gpu, Host
from db.rows import EventView
from db.types import SEVERITIES, Severity


def _like_pattern(glob: str) -> str:
    """A shell-style glob ("gpu_*") as a LIKE pattern with '\\' escaping % and _."""
    escaped = glob.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


def find_events(
    session: Session,
    *,
    since: int | None = None,
    until: int | None = None,
    severity: Severity | None = None,
    host: str | None = None,
    kind: str | None = None,
    limit: int | None = 100,
) -> list[EventView]:
    """The newest `limit` events matching every given filter, oldest first.

    since/until are epoch seconds (since <= ts < until); `severity` keeps that level and worse;
    `host` is a host name; `kind` an event kind or a glob ("gpu_*", `*` any run, `?` one
    character), matched case-insensitively on every backend (kinds are stored lower-case;
    SQLite's LIKE ignores ASCII case and PostgreSQL's does not, so both sides are lowered).
    Raises ValueError for an unknown severity or a non-positive limit.
    """
    if severity is not None and severity not in SEVERITIES:
        raise ValueError(f"unknown severity {severity!r}; use one of {', '.join(SEVERITIES)}")
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be positive, not {limit}")
    query = (
        select(Event, Host.name, Gpu.idx, Gpu.uuid)
        .outerjoin(Host, Host.id == Event.host_id)
        .outerjoin(Gpu, Gpu.id == Event.gpu_id)
    )
    if since is not None:
        query = query.where(Event.ts >= since)
    if until is not None:
        query = query.where(Event.ts < until)
    if severity is not None:
        query = query.where(Event.severity.in_(SEVERITIES[SEVERITIES.index(severity):]))
    if host is not None:
        query = query.where(Host.name == host)
    if kind is not None:
        stored_kind = func.lower(Event.kind)
        if "*" in kind or "?" in kind:
            query = query.where(stored_kind.like(_like_pattern(kind.lower()), escape="\\"))
        else:
            query = query.where(stored_kind == kind.lower())
    query = query.order_by(Event.ts.desc(), Event.id.desc())
    if limit is not None:
        query = query.limit(limit)
    rows = [
        EventView(
            id=event.id,
            ts=event.ts,
            kind=event.kind,
            severity=event.severity,
            message=event.message,
            host=host_name,
            gpu_idx=gpu_idx,
            gpu_uuid=gpu_uuid,
            task_id=event.task_id,
            data={} if event.data_json is None else dict(json.loads(event.data_json)),
        )
        for event, host_name, gpu_idx, gpu_uuid in session.execute(query)
    ]
    rows.reverse()
    return rows
