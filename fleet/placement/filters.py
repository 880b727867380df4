"""Why a host or GPU cannot take the request: every failing constraint, as readable reasons."""

from __future__ import annotations

from dataclasses import replace
from fnmatch import fnmatchcase

from fleet.placement.candidates import CandidateSet, GpuCandidate, HostCandidate
from fleet.placement.request import PlacementRequest, format_memory, host_matches_pattern
from fleet.snapshot import AllocationInfo

# A GPU with more memory than this in use and no fleet allocation is busy with someone's work.
UNMANAGED_MEMORY_BYTES = 512 << 20


def host_exclusions(request: PlacementRequest, host: HostCandidate) -> list[str]:
    """Reasons the host cannot be used at all (empty when it can)."""
    reasons: list[str] = []
    if host.name in request.exclude_hosts:
        reasons.append("host excluded")
    if not host_matches_pattern(request.hosts, host.name, host.groups, host.labels):
        reasons.append(f"host not selected by --hosts {request.hosts}")
    if request.group is not None and not any(fnmatchcase(g, request.group) for g in host.groups):
        reasons.append(f"host not in group {request.group}")
    for key, value_glob in request.labels:
        value = host.label(key)
        if value is None:
            reasons.append(f"host has no label {key}")
        elif not fnmatchcase(value, value_glob):
            reasons.append(f"host label {key}={value} does not match {value_glob}")
    if host.state != "up":
        detail = f" ({host.reason})" if host.reason else ""
        reasons.append(f"host is {host.state}{detail}")
    if host.drained:
        reasons.append("host drained" + (f": {host.drain_reason}" if host.drain_reason else ""))
    return reasons


def gpu_exclusions(
    request: PlacementRequest, gpu: GpuCandidate, allocation: AllocationInfo | None, now: float
) -> list[str]:
    """Reasons this GPU cannot be used (empty when it can); host-level reasons are not repeated."""
    reasons: list[str] = []
    if gpu.lost or gpu.state == "lost":
        reasons.append("GPU lost")
    elif gpu.state != "ok":
        reasons.append(f"GPU state {gpu.state}")
    if gpu.drained:
        reasons.append("GPU drained" + (f": {gpu.drain_reason}" if gpu.drain_reason else ""))
    if allocation is not None:
        reasons.append(describe_allocation(allocation))
    if gpu.sampled_at is None:
        reasons.append("never sampled")
    elif now - gpu.sampled_at > request.max_sample_age_s:
        reasons.append(f"sample {now - gpu.sampled_at:.0f}s old "
                       f"(limit {request.max_sample_age_s:.0f}s)")
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
    if not request.allow_unmanaged and allocation is None:
        reasons.extend(unmanaged_use(gpu))
    return reasons


def unmanaged_use(gpu: GpuCandidate) -> list[str]:
    """How the GPU is in use by work fleet did not start (processes, memory), if it is."""
    if gpu.process_count:
        plural = "es" if gpu.process_count > 1 else ""
        return [f"in use by {gpu.process_count} process{plural} not started by fleet"]
    if gpu.memory_used_bytes is not None and gpu.memory_used_bytes > UNMANAGED_MEMORY_BYTES:
        return [f"{format_memory(gpu.memory_used_bytes)} memory in use outside fleet"]
    return []


def describe_allocation(allocation: AllocationInfo) -> str:
    """"allocated to task 12 (ann)" or "reserved by ann"."""
    if allocation.kind == "task":
        task = f"task {allocation.task_id}" if allocation.task_id is not None else "a task"
        return f"allocated to {task} ({allocation.owner})"
    return f"reserved by {allocation.owner} (allocation {allocation.allocation_id})"


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
