"""Allocations on the wire: the list, reserve and release requests and their results."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from msgspec import Meta, Struct

from fleet.probe.limits import MAX_GPUS
from fleet.wire.bounds import GpuIndex, Id, PositiveDurationS, Text
from fleet.wire.codec import WireError, from_wire, to_wire
from fleet.wire.placement import check_placement
from fleet.wire.snapshot import AllocationInfoWire

if TYPE_CHECKING:
    from fleet.placement.candidates import GpuCandidate
    from fleet.placement.claim import Claim
    from fleet.placement.place import PlacementResult
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


class GpuCandidateWire(Struct, frozen=True):
    """fleet.placement.candidates.GpuCandidate: a GPU as placement saw it."""

    host: str
    index: int
    uuid: str | None = None
    model: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    utilization_pct: float | None = None
    temperature_c: float | None = None
    process_count: int | None = None
    sampled_at: float | None = None
    state: str = "ok"
    drained: bool = False
    drain_reason: str | None = None
    lost: bool = False
    recent_util_avg: float | None = None
    recent_util_peak: float | None = None
    recent_memory_peak_bytes: int | None = None
    allocation: AllocationInfoWire | None = None
    gpu_id: int | None = None


class ScoredGpuWire(Struct, frozen=True):
    """fleet.placement.place.ScoredGpu. The factors are [name, value] pairs in the policy's
    order, which `--explain` keeps (as a JSON object its keys would come back sorted)."""

    gpu: GpuCandidateWire
    factors: tuple[tuple[str, float], ...]
    chosen: bool = False


class ExclusionWire(Struct, frozen=True):
    """fleet.placement.place.Exclusion: a host (index None) or GPU left out, and why."""

    host: str
    index: int | None
    reasons: tuple[str, ...]


class NodePlacementWire(Struct, frozen=True):
    """fleet.placement.place.NodePlacement: one node of a gang and its chosen GPUs."""

    host: str
    gpus: tuple[GpuCandidateWire, ...]


class PlacementResultWire(Struct, frozen=True):
    """fleet.placement.place.PlacementResult: the choice and every candidate's score and
    exclusion, all that `--explain` shows (fleet.render.explain renders it on the client)."""

    request: dict[str, Any]  # PlacementRequest.to_dict()
    host: str | None
    gpus: tuple[GpuCandidateWire, ...]
    scored: tuple[ScoredGpuWire, ...]
    exclusions: tuple[ExclusionWire, ...]
    source: str
    placed_at: float
    gang: tuple[NodePlacementWire, ...] = ()

    def __post_init__(self) -> None:
        check_placement(self.request)  # a malformed reply is refused as it is decoded


class ClaimWire(Struct, frozen=True):
    """fleet.placement.claim.Claim, with the placement that chose its GPUs (None for GPUs
    named outright: `POST /v1/reservations/gpus`)."""

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
    placement: PlacementResultWire | None = None
    attempts: int = 1


def allocations_to_wire(rows: list[AllocationDetail]) -> AllocationList:
    """Allocations as the reply."""
    return AllocationList(tuple(to_wire(row, AllocationWire) for row in rows))


def allocations_from_wire(reply: AllocationList) -> list[AllocationDetail]:
    """The reply as the AllocationDetails `Fleet.allocations()` returns."""
    from fleet.records import AllocationDetail

    return [from_wire(row, AllocationDetail) for row in reply.allocations]


def claim_to_wire(claim: Claim) -> ClaimWire:
    """A claim as its wire struct, its placement included."""
    placement = None if claim.placement is None else placement_to_wire(claim.placement)
    return msgspec.structs.replace(to_wire(replace(claim, placement=None), ClaimWire),
                                   placement=placement)


def claim_from_wire(wire: ClaimWire) -> Claim:
    """The wire struct as the same Claim the service made (placement included), so
    `reserve --explain` renders the explanation from the same data as local mode."""
    from fleet.placement.claim import Claim

    claim = from_wire(msgspec.structs.replace(wire, placement=None), Claim)
    if wire.placement is None:
        return claim
    return replace(claim, placement=placement_from_wire(wire.placement))


def placement_to_wire(result: PlacementResult) -> PlacementResultWire:
    """A placement (its request as `to_dict()`, each GPU's factors in order) as its wire struct."""

    def gpus(candidates: tuple[GpuCandidate, ...]) -> tuple[GpuCandidateWire, ...]:
        return tuple(to_wire(gpu, GpuCandidateWire) for gpu in candidates)

    return PlacementResultWire(
        request=result.request.to_dict(), host=result.host, gpus=gpus(result.gpus),
        scored=tuple(ScoredGpuWire(to_wire(item.gpu, GpuCandidateWire),
                                   tuple(item.factors.items()), item.chosen)
                     for item in result.scored),
        exclusions=tuple(to_wire(exclusion, ExclusionWire) for exclusion in result.exclusions),
        source=result.source, placed_at=result.placed_at,
        gang=tuple(NodePlacementWire(node.host, gpus(node.gpus)) for node in result.gang))


def placement_from_wire(wire: PlacementResultWire) -> PlacementResult:
    """The wire struct as the same PlacementResult (WireError for a malformed request)."""
    from fleet.errors import ConfigError
    from fleet.placement.candidates import GpuCandidate
    from fleet.placement.place import Exclusion, NodePlacement, PlacementResult, ScoredGpu
    from fleet.placement.request import PlacementRequest

    def gpus(candidates: tuple[GpuCandidateWire, ...]) -> tuple[GpuCandidate, ...]:
        return tuple(from_wire(gpu, GpuCandidate) for gpu in candidates)

    try:
        request = PlacementRequest.from_dict(dict(wire.request))
    except ConfigError as exc:
        raise WireError(f"placement.request: {exc}") from exc
    return PlacementResult(
        request=request, host=wire.host, gpus=gpus(wire.gpus),
        scored=tuple(ScoredGpu(from_wire(item.gpu, GpuCandidate), dict(item.factors),
                               item.chosen) for item in wire.scored),
        exclusions=tuple(Exclusion(exclusion.host, exclusion.index, exclusion.reasons)
                         for exclusion in wire.exclusions),
        source=wire.source, placed_at=wire.placed_at,
        gang=tuple(NodePlacement(node.host, gpus(node.gpus)) for node in wire.gang))
