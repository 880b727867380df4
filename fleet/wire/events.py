"""Events on the wire (`/v1/events`): db.event_queries.EventView and the query's filters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from msgspec import Struct, field

from fleet.wire.bounds import Count, EpochS, Text
from fleet.wire.codec import from_wire, to_wire

if TYPE_CHECKING:
    from fleet.records import EventView


class EventWire(Struct, frozen=True):
    """db.event_queries.EventView: a stored event (ts epoch seconds)."""

    id: int
    ts: int
    kind: str
    severity: str
    message: str
    host: str | None
    gpu_idx: int | None
    gpu_uuid: str | None
    task_id: int | None
    data: dict[str, object] = field(default_factory=dict)


class EventList(Struct, frozen=True):
    """`GET /v1/events`."""

    events: tuple[EventWire, ...]


class EventQuery(Struct, frozen=True, forbid_unknown_fields=True):
    """Query of `GET /v1/events`: the arguments of `Fleet.events()` (times epoch seconds)."""

    since: EpochS | None = None
    until: EpochS | None = None
    severity: Literal["info", "warning", "error", "critical"] | None = None
    host: Text | None = None
    kind: Text | None = None
    limit: Count | None = 100
    newest_first: bool = False


def events_to_wire(rows: list[EventView]) -> EventList:
    """Events as the reply."""
    return EventList(tuple(to_wire(row, EventWire) for row in rows))


def events_from_wire(reply: EventList) -> list[EventView]:
    """The reply as the EventViews `Fleet.events()` returns."""
    from fleet.records import EventView

    return [from_wire(event, EventView) for event in reply.events]
