"""Reading events in the order they were stored, after a known id (for delivering them)."""

from __future__ import annotations

import json
from collections.abc import Collection

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from db.models import Event, Gpu, Host
from db.rows import EventView


def last_event_id(session: Session) -> int:
    """The highest stored event id (0 when there is none)."""
    return int(session.scalar(select(func.max(Event.id))) or 0)


def events_after(session: Session, after_id: int, *, also_ids: Collection[int] = (),
                 limit: int = 500) -> list[EventView]:
    """Events with an id above `after_id` (or in `also_ids`), lowest id first, at most `limit`."""
    condition = Event.id > after_id
    if also_ids:
        condition = or_(condition, Event.id.in_(list(also_ids)))
    query = (
        select(Event, Host.name, Gpu.idx, Gpu.uuid)
        .outerjoin(Host, Host.id == Event.host_id)
        .outerjoin(Gpu, Gpu.id == Event.gpu_id)
        .where(condition)
        .order_by(Event.id)
        .limit(limit)
    )
    return [
        EventView(id=event.id, ts=event.ts, kind=event.kind, severity=event.severity,
                  message=event.message, host=host, gpu_idx=idx, gpu_uuid=uuid,
                  task_id=event.task_id,
                  data={} if event.data_json is None else dict(json.loads(event.data_json)))
        for event, host, idx, uuid in session.execute(query)
    ]
