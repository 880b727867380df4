"""The GPU overlay: drain flags, holders and unmanaged use per host, rebuilt when a source
changes, and put on snapshots exactly as the per-GPU lookups did."""

from __future__ import annotations

from fleet.health.unmanaged import UnmanagedWatch
from fleet.model import HostSpec
from fleet.monitor.flush_queries import Drains
from fleet.monitor.overlay import NO_EXTRAS, GpuOverlay, with_extras
from fleet.reports import GpuReport, ProcessInfo
from fleet.snapshot import AllocationInfo, FleetSnapshot, GpuSnapshot, HostSnapshot

STRAY = ProcessInfo(101, 1 << 30, "python", uid=1001, user="cy", session=99)
HELD = AllocationInfo(5, "reservation", "ann")


def _unmanaged_on(host: str, index: int) -> UnmanagedWatch:
    watch = UnmanagedWatch()
    gpu = GpuSnapshot(host, index, GpuReport(index=index, processes=(STRAY,)))
    spec = HostSpec(host, "10.0.0.1")
    watch.check(FleetSnapshot(0.0, (HostSnapshot(spec, "up", gpus=(gpu,)),)), {})
    return watch


def test_only_hosts_with_a_drained_held_or_used_gpu_have_extras() -> None:
    watch = _unmanaged_on("c", 3)
    overlay = GpuOverlay(watch)
    drains = Drains(hosts={"a": "rack"}, gpus={("a", 1): "fan"})
    allocations = {("b", 0): HELD}
    assert overlay.of_host(drains, allocations, "idle") is None
    assert overlay.of_host(drains, allocations, "a") == {1: (True, "fan", None, ())}
    assert overlay.of_host(drains, allocations, "b") == {0: (False, None, HELD, ())}
    assert overlay.of_host(drains, allocations, "c") == {3: (False, None, None, (STRAY,))}


def test_a_new_source_object_or_a_changed_watch_rebuilds_it() -> None:
    watch = UnmanagedWatch()
    overlay = GpuOverlay(watch)
    drains, allocations = Drains(), {}
    assert overlay.of_host(drains, allocations, "h") is None
    drained = Drains(gpus={("h", 0): None})
    assert overlay.of_host(drained, allocations, "h") == {0: (True, None, None, ())}
    held = {("h", 2): HELD}
    assert overlay.of_host(drained, held, "h") == {0: (True, None, None, ()),
                                                   2: (False, None, HELD, ())}
    version = watch.version
    gpu = GpuSnapshot("h", 1, GpuReport(index=1, processes=(STRAY,)))
    snapshot = FleetSnapshot(0.0, (HostSnapshot(HostSpec("h", "10.0.0.1"), "up", gpus=(gpu,)),))
    watch.check(snapshot, {})
    assert watch.version == version + 1
    assert overlay.of_host(drained, held, "h") == {0: (True, None, None, ()),
                                                   1: (False, None, None, (STRAY,)),
                                                   2: (False, None, HELD, ())}
    watch.check(snapshot, {})  # nothing new: the same answer, no rebuild needed
    assert watch.version == version + 1


def test_with_extras_keeps_the_same_object_when_nothing_changes() -> None:
    gpu = GpuSnapshot("h", 0, GpuReport(index=0), "hot")
    assert with_extras(gpu, NO_EXTRAS) is gpu
    marked = with_extras(gpu, (True, "bad fan", HELD, (STRAY,)))
    assert marked == GpuSnapshot("h", 0, gpu.reading, "hot", drained=True,
                                 drain_reason="bad fan", allocation=HELD, unmanaged=(STRAY,))
    assert with_extras(marked, (True, "bad fan", HELD, (STRAY,))) is marked
    assert with_extras(marked, NO_EXTRAS) == gpu
