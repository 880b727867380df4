"""GPU and host history on the wire: the points and queries of /v1/history/gpu and /host."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct

from fleet.wire.bounds import BucketS, Count, EpochS, Text
from fleet.wire.codec import from_wire, to_wire

if TYPE_CHECKING:
    from fleet.records import GpuHistoryPoint, HostHistoryPoint

# The most points one reply of /v1/history/gpu or /host holds: a request without a limit gets
# at most this many (`truncated` says whether there were more), and one whose limit is more
# than this plus one (a client showing this many asks for one more, to learn whether there
# are more) is refused. ~100 bytes a point on the wire, a few hundred in the server's memory.
MAX_HISTORY_POINTS = 100_000


class GpuHistoryPointWire(Struct, frozen=True, array_like=True):
    """db.types.GpuHistoryPoint: one sample or bucket (ts_ms epoch milliseconds); sent as an
    array (thousands of points per reply)."""

    host: str
    gpu_idx: int
    uuid: str | None
    gpu_id: int
    ts_ms: int
    samples: int
    util_avg: float | None
    util_max: float | None
    mem_used_avg: float | None
    mem_used_max: int | None
    temp_avg: float | None
    temp_max: float | None
    power_avg: float | None
    power_max: float | None


class GpuHistoryQuery(Struct, frozen=True, forbid_unknown_fields=True):
    """Query of `GET /v1/history/gpu` (as `Fleet.gpu_history`)."""

    since: EpochS
    until: EpochS
    host: Text | None = None
    gpu: Text | None = None
    bucket_s: BucketS | None = None
    limit: Count | None = None


class GpuHistoryList(Struct, frozen=True):
    """`GET /v1/history/gpu`: the earliest points; `truncated` when the range holds more than
    the reply (the request's limit, or MAX_HISTORY_POINTS without one)."""

    points: tuple[GpuHistoryPointWire, ...]
    truncated: bool = False


def history_to_wire(points: list[GpuHistoryPoint], truncated: bool = False) -> GpuHistoryList:
    """History points as the reply."""
    return GpuHistoryList(tuple(to_wire(point, GpuHistoryPointWire) for point in points),
                          truncated)


def history_from_wire(reply: GpuHistoryList) -> list[GpuHistoryPoint]:
    """The reply as the points `Fleet.gpu_history` returns."""
    from fleet.records import GpuHistoryPoint

    return [from_wire(point, GpuHistoryPoint) for point in reply.points]


class HostHistoryPointWire(Struct, frozen=True, array_like=True):
    """db.rows.HostHistoryPoint: one host sample or bucket; sent as an array."""

    host: str
    ts_ms: int
    samples: int
    load_1m_avg: float | None
    load_1m_max: float | None
    cpu_busy_avg: float | None
    cpu_busy_max: float | None
    memory_available_min: int | None
    memory_available_avg: float | None
    net_rx_bytes: int | None
    net_tx_bytes: int | None
    net_rx_bps: float | None
    net_tx_bps: float | None


class HostHistoryQuery(Struct, frozen=True, forbid_unknown_fields=True):
    """Query of `GET /v1/history/host` (as `Fleet.host_history`)."""

    since: EpochS
    until: EpochS
    host: Text | None = None
    bucket_s: BucketS | None = None
    limit: Count | None = None


class HostHistoryList(Struct, frozen=True):
    """`GET /v1/history/host`: the earliest points; `truncated` as in GpuHistoryList."""

    points: tuple[HostHistoryPointWire, ...]
    truncated: bool = False


def host_history_to_wire(points: list[HostHistoryPoint],
                         truncated: bool = False) -> HostHistoryList:
    """Host history points as the reply."""
    return HostHistoryList(tuple(to_wire(point, HostHistoryPointWire) for point in points),
                           truncated)


def reply_limit(limit: int | None) -> int:
    """How many points a history reply holds at most: `limit`, or MAX_HISTORY_POINTS without
    one. ValueError for a limit over MAX_HISTORY_POINTS + 1."""
    if limit is None:
        return MAX_HISTORY_POINTS
    if limit > MAX_HISTORY_POINTS + 1:
        raise ValueError(f"a history reply holds at most {MAX_HISTORY_POINTS} points: ask for "
                         "buckets (bucket_s, --bucket) or a shorter time range, a part at a time")
    return limit


def host_history_from_wire(reply: HostHistoryList) -> list[HostHistoryPoint]:
    """The reply as the points `Fleet.host_history` returns."""
    from fleet.records import HostHistoryPoint

    return [from_wire(point, HostHistoryPoint) for point in reply.points]
