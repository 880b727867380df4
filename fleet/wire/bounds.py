"""Bounded scalars of the wire: ids, counts, times and durations the database and datetime hold.

msgspec checks each bound in C while it decodes (NaN fails every bound), so a value out of range
is a 400 naming its field, never an OverflowError deep in a service.
"""

from __future__ import annotations

import re
from typing import Annotated

from msgspec import Meta

from fleet.placement.request import MAX_TEXT  # free text longer is not a real request
from fleet.probe.limits import MAX_GPUS, MAX_INT
from fleet.timeparse import MAX_DURATION_S, MAX_EPOCH_S
from fleet.wire.codec import WireError

Id = Annotated[int, Meta(ge=0, le=MAX_INT)]  # a row id (task, allocation, group)
Count = Annotated[int, Meta(ge=1, le=MAX_INT)]  # a result limit
SqlInt = Annotated[int, Meta(ge=-MAX_INT, le=MAX_INT)]  # any value an SQLite INTEGER holds
GpuIndex = Annotated[int, Meta(ge=0, lt=MAX_GPUS)]
EpochS = Annotated[float, Meta(ge=0, le=MAX_EPOCH_S)]  # a point in time, epoch seconds
EpochIntS = Annotated[int, Meta(ge=0, le=int(MAX_EPOCH_S))]
DurationS = Annotated[float, Meta(ge=0, le=MAX_DURATION_S)]  # a timeout or grace (0 allowed)
PositiveDurationS = Annotated[float, Meta(gt=0, le=MAX_DURATION_S)]  # a hold, a sample age
BucketS = Annotated[int, Meta(ge=1, le=int(MAX_DURATION_S))]
Text = Annotated[str, Meta(max_length=MAX_TEXT)]

_HOST_GPU = re.compile(r".+:(?P<idx>\d+)")


def check_target(target: str, what: str) -> None:
    """WireError (a 400) for a "HOST:IDX" whose index no SQLite INTEGER holds."""
    match = _HOST_GPU.fullmatch(target.strip())
    if match is not None and (len(match["idx"]) > len(str(MAX_INT))
                              or int(match["idx"]) > MAX_INT):
        raise WireError(f"{what} {target[:80]!r}: GPU index out of range")
