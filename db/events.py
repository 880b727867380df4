"""Events: recording what happened (state changes, health alarms, task ends) and listing them."""

from __future__ import annotations

import json
from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import Event, Host
from db.types import SEVERITIES, EventRow, Severity


def add_event(
    session: Session,
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
    event = Event(
        ts=ts,
        kind=kind,
        severity=severity,
        message=message,
        host_id=host_id,
        gpu_id=gpu_id,
        task_id=task_id,
        data_json=None if data is None else json.dumps(dict(data), sort_keys=True),
    )
    session.add(event)
    session.flush()
    return event.id


def list_events(
    session: Session,
    *,
    since: int | None = None,
    severity: Severity | None = None,
    limit: int | None = 100,
) -> list[EventRow]:
    """The newest `limit` events with ts >= since and at least `severity`, oldest first."""
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
