"""Allocations on the wire: the list, reserve and release requests and their results."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from msgspec import Meta, Struct

from fleet.probe.limits import MAX_GPUS
from fleet.wire.bounds import GpuIndex, Id, PositiveDurationS, Text
from fleet.wire.codec import from_wire, to_wire
from fleet.wire.placement import check_placement

if TYPE_CHECKING:
    from fleet.placement.claim import Claim
    from fleet.records import AllocationDetail, UnmanagedGpu


class AllocationWire(Struct, frozen=True):
    """db.allocation_details.AllocationDetail: who holds which GPU (times epoch seconds)."""

    id: int
    gpu_id: int
    host: str
    gpu_idx: int
    uuid: str | None
    kind: str
    owner: str
    task_id: int | None
    task_name: str | None
    task_state: str | None
    note: str | None
    created_at: int
    expires_at: int | None
    released_at: int | None
    release_reason: str | None
    idle_since: int | None = None


class AllocationList(Struct, frozen=True):
    """`GET /v1/allocations`."""

    allocations: tuple[AllocationWire, ...]


class UnmanagedProcessWire(Struct, frozen=True):
    """A process fleet did not start (db.unmanaged)."""

    pid: int
    name: str | None = None
    uid: int | None = None
    user: str | None = None


class UnmanagedGpuWire(Struct, frozen=True):
    """db.unmanaged.UnmanagedGpu."""

    host: str
    gpu_idx: int
    uuid: str | None
    processes: tuple[UnmanagedProcessWire, ...]


class UnmanagedList(Struct, frozen=True):
    """`GET /v1/unmanaged`."""

    unmanaged: tuple[UnmanagedGpuWire, ...]


def unmanaged_to_wire(rows: list[UnmanagedGpu]) -> UnmanagedList:
    """Stored unmanaged use as the reply."""
    return UnmanagedList(tuple(msgspec.convert(row, UnmanagedGpuWire, from_attributes=True)
                               for row in rows))


def unmanaged_from_wire(reply: UnmanagedList) -> list[UnmanagedGpu]:
    """The reply as `Fleet.unmanaged_use()` returns it."""
    from fleet.records import UnmanagedGpu

    return [UnmanagedGpu(gpu.host, gpu.gpu_idx, gpu.uuid,
                         tuple(msgspec.structs.asdict(p) for p in gpu.processes))
            for gpu in reply.unmanaged]


class AllocationQuery(Struct, frozen=True, forbid_unknown_fields=True):
    """Query of `GET /v1/allocations`."""

    active_only: bool = True


class ReleaseRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """Body of `POST /v1/allocations/release`: ids, and/or every reservation of the caller."""

    ids: tuple[Id, ...] = ()
    all_mine: bool = False
    force: bool = False


class ReleaseResult(Struct, frozen=True):
    """The allocation ids released."""

    released: tuple[int, ...]


class ReserveRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """Body of `POST /v1/reservations`: a PlacementRequest.to_dict(), how long, and why."""

    placement: dict[str, Any]  # held to fleet.wire.placement.PlacementWire
    duration_s: PositiveDurationS | None = None
    note: Text | None = None

    def __post_init__(self) -> None:
        check_placement(self.placement)


class ReserveGpusRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """Body of `POST /v1/reservations/gpus`: exactly these GPUs of one host (all or none)."""

    host: Text
    gpu_indices: Annotated[tuple[GpuIndex, ...], Meta(max_length=MAX_GPUS)]
    duration_s: PositiveDurationS | None = None
    note: Text | None = None


class ClaimWire(Struct, frozen=True):
    """fleet.placement.claim.Claim without its placement explanation."""

    host: str
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str | None, ...]
    allocation_ids: tuple[int, ...]
    kind: str
    owner: str
    task_id: int | None = None
    note: str | None = None
    created_at: int = 0
    expires_at: int | None = None
    attempts: int = 1


def allocations_to_wire(rows: list[AllocationDetail]) -> AllocationList:
    """Allocations as the reply."""
    return AllocationList(tuple(to_wire(row, AllocationWire) for row in rows))


def allocations_from_wire(reply: AllocationList) -> list[AllocationDetail]:
    """The reply as the AllocationDetails `Fleet.allocations()` returns."""
    from fleet.records import AllocationDetail

    return [from_wire(row, AllocationDetail) for row in reply.allocations]


def claim_to_wire(claim: Claim) -> ClaimWire:
    """A claim as its wire struct."""
    return to_wire(claim, ClaimWire)


def claim_from_wire(wire: ClaimWire) -> Claim:
    """The wire struct as a Claim (its `placement` is None: explanations stay on the server)."""
    from fleet.placement.claim import Claim

    return from_wire(wire, Claim)
