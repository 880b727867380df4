"""What a GPU snapshot carries besides its reading and health state: drain flag, holder and
processes fleet did not start, looked up per host and rebuilt only when a source changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec.structs import replace

if TYPE_CHECKING:
    from fleet.health.unmanaged import UnmanagedWatch
    from fleet.monitor.flush_queries import Drains
    from fleet.reports import ProcessInfo
    from fleet.snapshot import AllocationInfo, GpuSnapshot

# GpuSnapshot's fields after `state`, in order: drained, drain_reason, allocation, unmanaged.
GpuExtras = tuple[bool, "str | None", "AllocationInfo | None", "tuple[ProcessInfo, ...]"]
NO_EXTRAS: GpuExtras = (False, None, None, ())


class GpuOverlay:
    """Per host, the GPUs whose snapshot carries more than its reading and state (drained,
    held, or used by processes fleet did not start).

    The monitor builds every reading's GPU snapshots with it: one lookup per host instead of
    four per GPU, and for most hosts (nothing drained, held or in unmanaged use) none at all.
    It is rebuilt when the drain flags or allocations are new objects, or the unmanaged watch
    has changed (its version).
    """

    def __init__(self, unmanaged: UnmanagedWatch) -> None:
        self._unmanaged = unmanaged
        self._sources: tuple[Drains, dict[tuple[str, int], AllocationInfo], int] | None = None
        self._by_host: dict[str, dict[int, GpuExtras]] = {}

    def of_host(self, drains: Drains, allocations: dict[tuple[str, int], AllocationInfo],
                host: str) -> dict[int, GpuExtras] | None:
        """GPU index → extras of `host`'s GPUs that have any; None when none has."""
        sources = self._sources
        if (sources is None or sources[0] is not drains or sources[1] is not allocations
                or sources[2] != self._unmanaged.version):
            self._rebuild(drains, allocations)
        return self._by_host.get(host)

    def _rebuild(self, drains: Drains,
                 allocations: dict[tuple[str, int], AllocationInfo]) -> None:
        in_use = self._unmanaged.in_use()
        by_host: dict[str, dict[int, GpuExtras]] = {}
        for key in {*drains.gpus, *allocations, *in_use}:
            host, index = key
            by_host.setdefault(host, {})[index] = (
                key in drains.gpus, drains.gpus.get(key), allocations.get(key),
                in_use.get(key, ()))
        self._by_host = by_host
        self._sources = (drains, allocations, self._unmanaged.version)


def with_extras(gpu: GpuSnapshot, extras: GpuExtras) -> GpuSnapshot:
    """`gpu` carrying `extras` (the same object when it already does)."""
    if (gpu.drained, gpu.drain_reason, gpu.allocation, gpu.unmanaged) == extras:
        return gpu
    drained, drain_reason, allocation, unmanaged = extras
    return replace(gpu, drained=drained, drain_reason=drain_reason, allocation=allocation,
                   unmanaged=unmanaged)
