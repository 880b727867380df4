"""Drain and undrain on the wire: requests and fleet.health.drain.DrainOutcome."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct

from fleet.wire.bounds import Text
from fleet.wire.codec import from_wire, to_wire

if TYPE_CHECKING:
    from fleet.health.drain import DrainOutcome


class DrainRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """Body of `POST /v1/drain`: a host, "HOST:IDX" or GPU UUID, and why."""

    target: Text
    reason: Text | None = None


class UndrainRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """Body of `POST /v1/undrain`."""

    target: Text


class DrainResult(Struct, frozen=True):
    """fleet.health.drain.DrainOutcome: what was named and whether anything changed."""

    host: str
    gpu_index: int | None
    drained: bool
    changed: bool
    reason: str | None
    event_id: int | None


def drain_to_wire(outcome: DrainOutcome) -> DrainResult:
    """A drain outcome as its wire struct."""
    return to_wire(outcome, DrainResult)


def drain_from_wire(wire: DrainResult) -> DrainOutcome:
    """The wire struct as the DrainOutcome `Fleet.drain()` returns."""
    from fleet.health.drain import DrainOutcome

    return from_wire(wire, DrainOutcome)
