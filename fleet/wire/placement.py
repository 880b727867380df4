"""A placement on the wire: the typed, bounded form of PlacementRequest.to_dict(), checked in C.

Requests carry the placement as the mapping `to_dict()` makes (what clients build and what a
task row stores); `check_placement` holds it to `PlacementWire` with msgspec in one pass, so a
wrong type or a value out of range is refused at the wire, naming the field
(`$.placement.min_free_memory.fraction`), before any service sees it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from fleet.placement.request import (
    DEFAULT_MAX_SAMPLE_AGE_S,
    DEFAULT_POLICY,
    MAX_EXCLUDED,
    MAX_LABELS,
    MAX_NODES,
    MAX_SAMPLE_AGE_S,
    MAX_TEXT,
)
from fleet.probe.limits import MAX_GPUS, MAX_INT
from fleet.wire.bounds import Text

# The bounds are PlacementRequest's own, so whatever it accepts (and a client sends) passes.
Name = Annotated[str, Meta(min_length=1, max_length=MAX_TEXT)]
_PATH = re.compile(r" - at `\$")


class MemoryWire(Struct, frozen=True, forbid_unknown_fields=True):
    """fleet.placement.request.MemorySize: bytes, or a fraction of each GPU's memory."""

    bytes: Annotated[int, Meta(ge=0, le=MAX_INT)] | None = None
    fraction: Annotated[float, Meta(gt=0, le=1)] | None = None


class PlacementWire(Struct, frozen=True, forbid_unknown_fields=True):
    """fleet.placement.request.PlacementRequest, every field typed and bounded."""

    gpus: Annotated[int, Meta(ge=1, le=MAX_GPUS)] = 1
    min_free_memory: MemoryWire | None = None
    max_util: Annotated[float, Meta(ge=0, le=100)] | None = None
    max_temp: Annotated[float, Meta(ge=-50, le=200)] | None = None
    hosts: Text | None = None
    group: Text | None = None
    labels: Annotated[tuple[tuple[Text, Text], ...], Meta(max_length=MAX_LABELS)] = ()
    gpu_model: Text | None = None
    allow_unmanaged: bool = False
    policy: Name = DEFAULT_POLICY
    exclude_hosts: Annotated[tuple[Text, ...], Meta(max_length=MAX_EXCLUDED)] = ()
    max_sample_age_s: Annotated[float, Meta(gt=0, le=MAX_SAMPLE_AGE_S)] = (
        DEFAULT_MAX_SAMPLE_AGE_S)
    nodes: Annotated[int, Meta(ge=1, le=MAX_NODES)] = 1
    same: Name | None = None


def check_placement(placement: dict[str, Any]) -> None:
    """msgspec.ValidationError naming `$.placement.<field>` unless `placement` is a valid
    PlacementRequest.to_dict() (called from the requests' `__post_init__`, so on decode)."""
    try:
        msgspec.convert(placement, PlacementWire)
    except msgspec.ValidationError as exc:
        message = _PATH.sub(" - at `$.placement", str(exc), count=1)
        if message == str(exc):
            message = f"{exc} - at `$.placement`"
        raise msgspec.ValidationError(message) from exc
