"""The queue's backfill rule (pure): a task ahead that fits nowhere still protects the free GPUs
of its shadow, so small tasks cannot starve a large task or gang; other GPUs stay usable."""

from __future__ import annotations

from fleet.dispatch.queue import blocked_by_ahead, shadow_placement
from fleet.placement.request import PlacementRequest
from fleet.snapshot import AllocationInfo
from tests.placement.builders import NOW, fleet, gpu, host


def _busy(*keys: tuple[str, int]) -> dict[tuple[str, int], AllocationInfo]:
    return {key: AllocationInfo(allocation_id=n, kind="task", owner="ann", task_id=n)
            for n, key in enumerate(keys, start=1)}


def _lab() -> tuple:
    hosts = [host("a"), host("b")]
    return fleet(*hosts, gpus=[gpu(name, i) for name in ("a", "b") for i in range(2)])


def test_a_gang_ahead_that_cannot_fit_keeps_the_free_gpus_it_waits_for() -> None:
    candidates = _lab()
    allocations = _busy(("a", 0), ("b", 0))  # one GPU busy on each host
    gang = PlacementRequest(gpus=2, nodes=2)
    shadow = shadow_placement(gang, candidates, allocations, NOW)
    assert [(node.host, node.gpu_indices) for node in shadow.nodes] == [("a", (0, 1)),
                                                                        ("b", (0, 1))]
    # A 1-GPU task behind the gang may not take a:1 or b:1 (the gang waits for them) ...
    assert blocked_by_ahead([("a", (1,))], [gang], candidates, allocations, NOW)
    assert blocked_by_ahead([("b", (1,))], [gang], candidates, allocations, NOW)


def test_the_shadow_prefers_gpus_free_now_and_leaves_the_rest_to_backfill() -> None:
    busy = {("a", 0), ("b", 0)}
    candidates = fleet(host("a"), host("b"), host("c"), gpus=[
        gpu(name, i, utilization_pct=95.0 if (name, i) in busy else 0.0)
        for name in ("a", "b", "c") for i in range(2)])
    allocations = _busy(*sorted(busy))
    gang = PlacementRequest(gpus=2, nodes=2)
    # c is wholly free: the gang's shadow takes it (and a, best of the others by name) ...
    shadow = shadow_placement(gang, candidates, allocations, NOW)
    assert sorted(node.host for node in shadow.nodes) == ["a", "c"]
    assert blocked_by_ahead([("c", (0,))], [gang], candidates, allocations, NOW)
    assert not blocked_by_ahead([("b", (1,))], [gang], candidates, allocations, NOW)
    # ... and a gang limited to a and b leaves c to backfill.
    pinned = PlacementRequest(gpus=2, nodes=2, hosts="a,b")
    assert not blocked_by_ahead([("c", (0,))], [pinned], candidates, allocations, NOW)


def test_reserved_gpus_are_not_in_the_shadow() -> None:
    candidates = _lab()
    held = {("a", 0): AllocationInfo(allocation_id=9, kind="reservation", owner="ops")}
    big = PlacementRequest(gpus=2)
    shadow = shadow_placement(big, candidates, {**held, **_busy(("b", 0))}, NOW)
    assert [(node.host, node.gpu_indices) for node in shadow.nodes] == [("b", (0, 1))]
    assert not blocked_by_ahead([("a", (1,))], [big], candidates, {**held, **_busy(("b", 0))},
                                NOW)
