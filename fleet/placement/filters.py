"""Why a host or GPU cannot take the request: every failing constraint, as readable reasons."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from fnmatch import fnmatchcase

from fleet.inventory.select import host_matches
from fleet.placement.candidates import CandidateSet, GpuCandidate, HostCandidate
from fleet.placement.free import gpu_unavailable, host_unavailable
from fleet.placement.request import PlacementRequest, format_memory
from fleet.snapshot import AllocationInfo


def host_exclusions(request: PlacementRequest, host: HostCandidate) -> list[str]:
    """Reasons the host cannot be used at all (empty when it can)."""
    reasons: list[str] = []
    if host.name in request.exclude_hosts:
        reasons.append("host excluded")
    if not host_matches(request.hosts, host.name, host.groups, host.labels):
        reasons.append(f"host not selected by --hosts {request.hosts}")
    if request.group is not None and not any(fnmatchcase(g, request.group) for g in host.groups):
        reasons.append(f"host not in group {request.group}")
    for key, value_glob in request.labels:
        value = host.label(key)
        if value is None:
            reasons.append(f"host has no label {key}")
        elif not fnmatchcase(value, value_glob):
            reasons.append(f"host label {key}={value} does not match {value_glob}")
    reasons.extend(host_unavailable(host))  # what makes no GPU of it free (fleet.placement.free)
    return reasons


def gpu_exclusions(
    request: PlacementRequest, gpu: GpuCandidate, allocation: AllocationInfo | None, now: float
) -> list[str]:
    """Reasons this GPU cannot be used (empty when it can); host-level reasons are not repeated."""
    # Not free at all (fleet.placement.free: the one definition), then what the request adds.
    reasons = gpu_unavailable(gpu, allocation, now, max_sample_age_s=request.max_sample_age_s,
                              allow_unmanaged=request.allow_unmanaged)
    if request.gpu_model is not None and not fnmatchcase(
        (gpu.model or "").lower(), request.gpu_model.lower()
    ):
        reasons.append(f"model {gpu.model or 'unknown'} does not match {request.gpu_model}")
    reasons.extend(_memory_reasons(request, gpu))
    if request.max_util is not None:
        if gpu.utilization_pct is None:
            reasons.append("utilisation unknown")
        elif gpu.utilization_pct > request.max_util:
            reasons.append(f"utilisation {gpu.utilization_pct:.0f}% > {request.max_util:g}%")
    if request.max_temp is not None:
        if gpu.temperature_c is None:
            reasons.append("temperature unknown")
        elif gpu.temperature_c > request.max_temp:
            reasons.append(f"temperature {gpu.temperature_c:.0f}°C > {request.max_temp:g}°C")
    return reasons


def _memory_reasons(request: PlacementRequest, gpu: GpuCandidate) -> list[str]:
    if request.min_free_memory is None:
        return []
    needed = request.min_free_memory.required_bytes(gpu.memory_total_bytes)
    free = gpu.memory_free_bytes
    if needed is None or free is None:
        return ["free memory unknown"]
    if free < needed:
        return [f"free memory {format_memory(free)} < {format_memory(needed)}"]
    return []


def stale_host_names(request: PlacementRequest, candidates: CandidateSet, now: float) -> list[str]:
    """Hosts the request could use whose data is too old (or missing) to place on.

    A host is stale when it was never contacted, its last contact is older than the request's
    sample age limit, or it is up and one of its GPUs has no sample that recent.
    """
    limit = request.max_sample_age_s
    stale: list[str] = []
    for host in candidates.hosts:
        selectable = replace(host, state="up", drained=False)
        if host.drained or host_exclusions(request, selectable):
            continue
        if host.checked_at is None or now - host.checked_at > limit:
            stale.append(host.name)
            continue
        if host.state == "up" and any(
            gpu.sampled_at is None or now - gpu.sampled_at > limit
            for gpu in candidates.gpus if gpu.host == host.name
        ):
            stale.append(host.name)
    return stale


def duplicate_gpus(gpus: Iterable[GpuCandidate]) -> dict[tuple[str, int], str]:
    """(host, index) → why, for every GPU whose UUID an earlier host (by name, then index)
    also reports: one machine listed twice (two names or addresses) must not be placed on
    twice, so only its first listing is offered."""
    first: dict[str, tuple[str, int]] = {}
    duplicates: dict[tuple[str, int], str] = {}
    for gpu in sorted(gpus, key=lambda gpu: gpu.key):
        if not gpu.uuid:
            continue
        seen = first.setdefault(gpu.uuid, gpu.key)
        if seen != gpu.key:
            duplicates[gpu.key] = (f"the same GPU ({gpu.uuid}) as {seen[0]}:{seen[1]}: one "
                                   "machine listed twice?")
    return duplicates
