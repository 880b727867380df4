"""Usage on the wire (`/v1/usage`): fleet.services.usage.UsageReport and its query."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from msgspec import Struct

from fleet.wire.bounds import EpochS
from fleet.wire.codec import from_wire, to_wire

if TYPE_CHECKING:
    from fleet.services.usage import UsageReport


class UsageRowWire(Struct, frozen=True):
    """fleet.services.usage.UsageRow."""

    key: str
    task_gpu_hours: float
    reserved_gpu_hours: float
    busy_gpu_hours: float
    reserved_busy_gpu_hours: float
    tasks: int
    failures: int
    reservations: int
    median_wait_s: float | None


class UsageReply(Struct, frozen=True):
    """`GET /v1/usage`."""

    since: float
    until: float
    by: str
    usage: tuple[UsageRowWire, ...]


class UsageQuery(Struct, frozen=True, forbid_unknown_fields=True):
    """Query of `GET /v1/usage`: the arguments of `Fleet.usage()` (times epoch seconds)."""

    since: EpochS
    until: EpochS | None = None
    by: Literal["user", "group", "host", "gpu-model"] = "user"


def usage_to_wire(report: UsageReport) -> UsageReply:
    """The report as the reply."""
    return UsageReply(report.since, report.until, report.by,
                      tuple(to_wire(row, UsageRowWire) for row in report.rows))


def usage_from_wire(reply: UsageReply) -> UsageReport:
    """The reply as the UsageReport `Fleet.usage()` returns."""
    from fleet.services.usage import UsageReport, UsageRow

    return UsageReport(reply.since, reply.until, reply.by,
                       tuple(from_wire(row, UsageRow) for row in reply.usage))
