"""Events: recording what happened (state changes, health alarms, task ends) and listing them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from db.sql import RETURNING_ID, SqlWriter, writer_of
from db.types import SEVERITIES, EventRow, Severity

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

INSERT_EVENT = (
    "INSERT INTO events (ts, kind, severity, message, host_id, gpu_id, task_id, data_json) "
    "VALUES (:ts, :kind, :severity, :message, :host_id, :gpu_id, :task_id, :data_json)"
    + RETURNING_ID
)


def add_event(
    target: Session | SqlWriter,
    *,
    ts: int,
    kind: str,
    severity: Severity,
    message: str,
    host_id: int | None = None,
    gpu_id: int | None = None,
    task_id: int | None = None,
    data: Mapping[str, object] | None = None,
) -> int:
    """Store one event (ts in epoch seconds; `data` must be JSON-serialisable); returns its id."""
    return writer_of(target).insert(INSERT_EVENT, {
        "ts": ts, "kind": kind, "severity": severity, "message": message, "host_id": host_id,
        "gpu_id": gpu_id, "task_id": task_id,
        "data_json": None if data is None else json.dumps(dict(data), sort_keys=True),
    })


def list_events(
    session: Session,
    *,
    since: int | None = None,
    severity: Severity | None = None,
    limit: int | None = 100,
) -> list[EventRow]:
    """The newest `limit` events with ts >= since and at least `severity`, oldest first."""
    from sqlalchemy import select

    from db.models import Event, Host

    query = select(Event, Host.name).outerjoin(Host, Host.id == Event.host_id)
    if since is not None:
        query = query.where(Event.ts >= since)
    if severity is not None:
        at_least = SEVERITIES[SEVERITIES.index(severity) :]
        query = query.where(Event.severity.in_(at_least))
    query = query.order_by(Event.ts.desc(), Event.id.desc())
    if limit is not None:
        query = query.limit(limit)
    rows = [
        EventRow(
            id=event.id,
            ts=event.ts,
            kind=event.kind,
            severity=event.severity,
            message=event.message,
            host_id=event.host_id,
            host=host_name,
            gpu_id=event.gpu_id,
            task_id=event.task_id,
            data={} if event.data_json is None else dict(json.loads(event.data_json)),
        )
        for event, host_name in session.execute(query)
    ]
    rows.reverse()
    return rows
