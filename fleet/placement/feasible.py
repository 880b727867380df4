"""Whether a request could ever be placed on these hosts: with every GPU free, every host up."""

from __future__ import annotations

from dataclasses import replace

from fleet.placement.candidates import CandidateSet, GpuCandidate, HostCandidate
from fleet.placement.place import PlacementResult, place
from fleet.placement.request import PlacementRequest


def at_best(candidates: CandidateSet, now: float) -> CandidateSet | None:
    """`candidates` with every host up and undrained and every GPU free, idle, cool and healthy:
    what a queued task could get once everything ahead of it has gone. None when a host that is
    not up has no GPUs on record (never read), so nothing can be ruled out."""
    known = {gpu.host for gpu in candidates.gpus}
    if any(host.name not in known and host.state != "up" for host in candidates.hosts):
        return None
    return replace(candidates, hosts=tuple(_host_at_best(host, now) for host in candidates.hosts),
                   gpus=tuple(_gpu_at_best(gpu, now) for gpu in candidates.gpus))


def never_fits(request: PlacementRequest, candidates: CandidateSet,
               now: float) -> PlacementResult | None:
    """The placement that fails even at best (what it says is why the request can never be
    met by these hosts), or None when the request could fit once GPUs free up."""
    best = at_best(candidates, now)
    if best is None:
        return None
    result = place(request, best, {}, now)
    return result if result.host is None else None


def _host_at_best(host: HostCandidate, now: float) -> HostCandidate:
    return replace(host, state="up", reason=None, drained=False, drain_reason=None,
                   last_seen=now, checked_at=now)


def _gpu_at_best(gpu: GpuCandidate, now: float) -> GpuCandidate:
    return replace(gpu, memory_used_bytes=None if gpu.memory_total_bytes is None else 0,
                   utilization_pct=0.0, temperature_c=0.0, process_count=0, sampled_at=now,
                   state="ok", drained=False, drain_reason=None, lost=False,
                   recent_util_avg=None, recent_util_peak=None, recent_memory_peak_bytes=None,
                   allocation=None)
