"""What a free GPU is: the one definition that placement's filters, the TUI and every count use.

A GPU is free when a default 1-GPU dispatch (`PlacementRequest()`) could be placed on it now:
its host is up and not drained; the GPU is healthy, not drained, not allocated or reserved,
sampled within the request's age limit, and not in use by work fleet did not start (processes,
or more than UNMANAGED_MEMORY_BYTES of memory used).
"""

from __future__ import annotations

from typing import Protocol

from fleet.placement.candidates import HostCandidate, SnapshotGpuFacts, host_from_snapshot
from fleet.placement.request import DEFAULT_MAX_SAMPLE_AGE_S, format_memory
from fleet.snapshot import AllocationInfo, GpuSnapshot, HostSnapshot

# A GPU with more memory than this in use and no fleet allocation is busy with someone's work.
UNMANAGED_MEMORY_BYTES = 512 << 20


class GpuFacts(Protocol):
    """What the rules read of a GPU: a GpuCandidate, or a live snapshot's SnapshotGpuFacts."""

    @property
    def lost(self) -> bool: ...
    @property
    def state(self) -> str: ...
    @property
    def drained(self) -> bool: ...
    @property
    def drain_reason(self) -> str | None: ...
    @property
    def sampled_at(self) -> float | None: ...
    @property
    def process_count(self) -> int | None: ...
    @property
    def memory_used_bytes(self) -> int | None: ...


def host_unavailable(host: HostCandidate) -> list[str]:
    """Why no GPU of the host is free whatever is asked: not up, or drained (empty: it is)."""
    reasons: list[str] = []
    if host.state != "up":
        detail = f" ({host.reason})" if host.reason else ""
        reasons.append(f"host is {host.state}{detail}")
    if host.drained:
        reasons.append(drained_text("host", host.drain_reason))
    return reasons


def drained_text(what: str, reason: str | None) -> str:
    """How a drain reads in reasons: "host drained: rack move", "GPU drained" (no reason)."""
    return f"{what} drained" + (f": {reason}" if reason else "")


def gpu_unavailable(gpu: GpuFacts, allocation: AllocationInfo | None, now: float, *,
                    max_sample_age_s: float = DEFAULT_MAX_SAMPLE_AGE_S,
                    allow_unmanaged: bool = False) -> list[str]:
    """Why the GPU itself is not free (empty: it is); host-level reasons are not repeated."""
    reasons: list[str] = []
    if gpu.lost or gpu.state == "lost":
        reasons.append("GPU lost")
    elif gpu.state != "ok":
        reasons.append(f"GPU state {gpu.state}")
    if gpu.drained:
        reasons.append(drained_text("GPU", gpu.drain_reason))
    if allocation is not None:
        reasons.append(describe_allocation(allocation))
    if gpu.sampled_at is None:
        reasons.append("never sampled")
    elif now - gpu.sampled_at > max_sample_age_s:
        reasons.append(f"sample {now - gpu.sampled_at:.0f}s old "
                       f"(limit {max_sample_age_s:.0f}s)")
    if not allow_unmanaged and allocation is None:
        reasons.extend(unmanaged_use(gpu))
    return reasons


def unmanaged_use(gpu: GpuFacts) -> list[str]:
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


def not_free_reasons(host: HostSnapshot, gpu: GpuSnapshot, now: float) -> list[str]:
    """Why a GPU of a live snapshot is not free at epoch time `now` (empty: it is free)."""
    return (host_unavailable(host_from_snapshot(host, now))
            + gpu_unavailable(SnapshotGpuFacts(host, gpu), gpu.allocation, now))


def is_free(host: HostSnapshot, gpu: GpuSnapshot, now: float) -> bool:
    """Whether a default 1-GPU dispatch could be placed on this GPU at epoch time `now`."""
    return not not_free_reasons(host, gpu, now)


def free_gpus(host: HostSnapshot, now: float) -> tuple[GpuSnapshot, ...]:
    """The host's free GPUs, in index order (`is_free` for each, with the host asked once)."""
    if host_unavailable(host_from_snapshot(host, now)):
        return ()
    return tuple(gpu for gpu in host.gpus
                 if not gpu_unavailable(SnapshotGpuFacts(host, gpu), gpu.allocation, now))
