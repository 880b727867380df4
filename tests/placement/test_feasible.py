"""A request that no host could ever take is told apart from one that waits for busy GPUs."""

from __future__ import annotations

from fleet.placement.feasible import never_fits
from fleet.placement.request import PlacementRequest
from fleet.snapshot import AllocationInfo
from tests.placement.builders import GIB, NOW, fleet, gpu, host

BUSY = {"memory_used_bytes": 79 * GIB, "utilization_pct": 100.0, "temperature_c": 95.0,
        "process_count": 3, "allocation": AllocationInfo(1, "task", "bob", task_id=9)}


def test_busy_hot_drained_or_down_gpus_could_still_free_up() -> None:
    hosts = fleet(host("a", drained=True, drain_reason="fan"),
                  host("b", state="unreachable", last_seen=NOW - 3600),
                  gpus=[gpu("a", 0, **BUSY), gpu("a", 1, state="failed"),
                        gpu("b", 0, **BUSY), gpu("b", 1, lost=True)])
    for request in (PlacementRequest(gpus=2), PlacementRequest(gpus=1, max_temp=50.0,
                                                                max_util=5.0),
                    PlacementRequest(gpus=2, nodes=2),
                    PlacementRequest(gpus=1, min_free_memory=None, gpu_model="*H100*")):
        assert never_fits(request, hosts, NOW) is None, request


def test_more_gpus_than_any_host_or_a_model_none_has_never_fits() -> None:
    hosts = fleet(host("a"), host("b"), gpus=[gpu("a", 0), gpu("a", 1), gpu("b", 0)])
    for request, said in ((PlacementRequest(gpus=3), "no host has 3 free GPUs"),
                          (PlacementRequest(gpus=1, gpu_model="*A100*"), "no host has 1 free"),
                          (PlacementRequest(gpus=2, nodes=2), "2 hosts"),
                          (PlacementRequest(gpus=1, hosts="c*"), "")):
        impossible = never_fits(request, hosts, NOW)
        assert impossible is not None and impossible.host is None, request
        assert said in impossible.summary(), (request, impossible.summary())


def test_a_host_whose_gpus_were_never_read_rules_nothing_out() -> None:
    hosts = fleet(host("a"), host("new", state="unknown", last_seen=None),
                  gpus=[gpu("a", 0)])
    assert never_fits(PlacementRequest(gpus=8), hosts, NOW) is None
    up_without_gpus = fleet(host("a"), host("cpu"), gpus=[gpu("a", 0)])
    assert never_fits(PlacementRequest(gpus=8), up_without_gpus, NOW) is not None

