"""Pure placement: every filter's exclusion reason, every policy's choice, ties, N GPUs per host."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from fleet.placement.candidates import CandidateSet
from fleet.placement.place import PlacementResult, place
from fleet.placement.request import MemorySize, PlacementRequest
from fleet.snapshot import AllocationInfo
from tests.placement.builders import GIB, NOW, fleet, gpu, host, two_idle_hosts


def _place(request: PlacementRequest, candidates: CandidateSet,
           allocations: dict[tuple[str, int], AllocationInfo] | None = None) -> PlacementResult:
    return place(request, candidates, allocations or {}, NOW)


def _reasons(result: PlacementResult, host_name: str, index: int | None) -> str:
    return "; ".join(reason for exclusion in result.exclusions
                     if (exclusion.host, exclusion.index) == (host_name, index)
                     for reason in exclusion.reasons)


# Each case makes GPU a:0 (or host "a") unfit in one way; the placement must take b:0 and
# explain a's exclusion with the expected words.
GPU_FILTER_CASES = [
    ("lost", {"lost": True}, PlacementRequest(), "GPU lost"),
    ("unhealthy", {"state": "hot"}, PlacementRequest(), "GPU state hot"),
    ("drained", {"drained": True, "drain_reason": "fan"}, PlacementRequest(), "GPU drained: fan"),
    ("never sampled", {"sampled_at": None}, PlacementRequest(), "never sampled"),
    ("stale", {"sampled_at": NOW - 100}, PlacementRequest(), "sample 100s old (limit 30s)"),
    ("low memory", {"memory_used_bytes": 70 * GIB},
     PlacementRequest(min_free_memory=MemorySize(bytes=20 * GIB), allow_unmanaged=True),
     "free memory 10.0G < 20.0G"),
    ("low memory %", {"memory_used_bytes": 40 * GIB},
     PlacementRequest(min_free_memory=MemorySize(fraction=0.8), allow_unmanaged=True),
     "free memory 40.0G < 64.0G"),
    ("memory unknown", {"memory_used_bytes": None},
     PlacementRequest(min_free_memory=MemorySize(bytes=GIB)), "free memory unknown"),
    ("busy", {"utilization_pct": 90.0}, PlacementRequest(max_util=50), "utilisation 90% > 50%"),
    ("hot", {"temperature_c": 91.0}, PlacementRequest(max_temp=85), "temperature 91°C > 85°C"),
    ("model", {"model": "Tesla V100"}, PlacementRequest(gpu_model="*h100*"),
     "model Tesla V100 does not match *h100*"),
    ("unmanaged process", {"process_count": 1}, PlacementRequest(),
     "in use by 1 process not started by fleet"),
    ("unmanaged memory", {"memory_used_bytes": 3 * GIB}, PlacementRequest(),
     "3.0G memory in use outside fleet"),
]


@pytest.mark.parametrize(("changes", "request_", "expected"),
                         [case[1:] for case in GPU_FILTER_CASES],
                         ids=[case[0] for case in GPU_FILTER_CASES])
def test_each_gpu_filter_excludes_with_its_reason(
    changes: dict[str, object], request_: PlacementRequest, expected: str
) -> None:
    candidates = fleet(host("a"), host("b"), gpus=[gpu("a", 0, **changes), gpu("b", 0)])
    result = _place(request_, candidates)
    assert (result.host, result.gpu_indices) == ("b", (0,))
    assert expected in _reasons(result, "a", 0)
    assert [item.gpu.key for item in result.scored] == [("b", 0)]


def test_allocated_gpu_is_excluded_naming_its_holder() -> None:
    allocations = {("a", 0): AllocationInfo(7, "task", "ann", task_id=12),
                   ("a", 1): AllocationInfo(8, "reservation", "bob")}
    result = _place(PlacementRequest(), two_idle_hosts(), allocations)
    assert result.host == "b"
    assert _reasons(result, "a", 0) == "allocated to task 12 (ann)"
    assert _reasons(result, "a", 1) == "reserved by bob (allocation 8)"


def test_allow_unmanaged_counts_foreign_work_as_free() -> None:
    candidates = fleet(host("a"), gpus=[gpu("a", 0, process_count=2, memory_used_bytes=4 * GIB)])
    assert not _place(PlacementRequest(), candidates).placed
    assert _place(PlacementRequest(allow_unmanaged=True), candidates).gpu_indices == (0,)


HOST_FILTER_CASES = [
    ("down", {"state": "unreachable", "reason": "no answer within 5s"}, PlacementRequest(),
     "host is unreachable (no answer within 5s)"),
    ("drained", {"drained": True, "drain_reason": "maintenance"}, PlacementRequest(),
     "host drained: maintenance"),
    ("pattern", {}, PlacementRequest(hosts="b*"), "host not selected by --hosts b*"),
    ("negated pattern", {}, PlacementRequest(hosts="!a"), "host not selected by --hosts !a"),
    ("group", {"groups": ("cpu",)}, PlacementRequest(group="gpu*"), "host not in group gpu*"),
    ("label missing", {}, PlacementRequest(labels=(("rack", "r1"),)), "host has no label rack"),
    ("label value", {"labels": (("rack", "r2"),)}, PlacementRequest(labels=(("rack", "r1"),)),
     "host label rack=r2 does not match r1"),
    ("excluded", {}, PlacementRequest(exclude_hosts=frozenset({"a"})), "host excluded"),
]


@pytest.mark.parametrize(("changes", "request_", "expected"),
                         [case[1:] for case in HOST_FILTER_CASES],
                         ids=[case[0] for case in HOST_FILTER_CASES])
def test_each_host_filter_excludes_the_whole_host(
    changes: dict[str, object], request_: PlacementRequest, expected: str
) -> None:
    candidates = fleet(host("a", **changes),
                       host("b", groups=("gpu",), labels=(("rack", "r1"),)),
                       gpus=[gpu("a", 0), gpu("a", 1), gpu("b", 0)])
    result = _place(request_, candidates)
    assert result.host == "b"
    assert expected in _reasons(result, "a", None)
    assert _reasons(result, "a", 0) == ""  # host-level reasons are not repeated per GPU


def test_all_gpus_on_one_host_and_why_smaller_hosts_lose() -> None:
    candidates = fleet(host("a"), host("b"),
                       gpus=[gpu("a", 0), gpu("b", 0), gpu("b", 1), gpu("b", 2)])
    result = _place(PlacementRequest(gpus=3), candidates)
    assert (result.host, result.gpu_indices) == ("b", (0, 1, 2))
    assert _reasons(result, "a", None) == "only 1 eligible GPU on this host, 3 needed on one host"
    nothing = _place(PlacementRequest(gpus=4), candidates)
    assert not nothing.placed and nothing.gpus == ()
    assert "no host has 4 free GPUs" in nothing.summary()


def test_host_without_known_gpus_is_explained() -> None:
    result = _place(PlacementRequest(), fleet(host("a"), host("new", state="up"),
                                              gpus=[gpu("a", 0)]))
    assert _reasons(result, "new", None) == "no GPUs known on this host"


def test_least_loaded_uses_recent_history_not_just_the_last_sample() -> None:
    # a:0 looks idle right now but averaged 90% over the last minutes; b:0 was really idle.
    candidates = fleet(host("a"), host("b"), gpus=[
        gpu("a", 0, utilization_pct=0.0, recent_util_avg=90.0, recent_util_peak=100.0),
        gpu("b", 0, utilization_pct=5.0, recent_util_avg=5.0, recent_util_peak=10.0),
    ])
    result = _place(PlacementRequest(), candidates)
    assert result.host == "b"
    best, worse = result.scored
    assert best.chosen and not worse.chosen
    assert best.factors["idle"] == pytest.approx(0.95)
    assert worse.factors["idle"] == pytest.approx(0.10)
    assert set(best.factors) == {"idle", "calm", "free_mem", "mem_headroom", "cool"}


def test_least_loaded_prefers_memory_headroom_and_cool_gpus() -> None:
    candidates = fleet(host("a"), gpus=[
        gpu("a", 0, recent_memory_peak_bytes=60 * GIB),
        gpu("a", 1, temperature_c=80.0),
        gpu("a", 2),
    ])
    ranked = [item.gpu.index for item in _place(PlacementRequest(), candidates).scored]
    assert ranked == [2, 1, 0]


def _pack_spread_fleet() -> CandidateSet:
    # Host "a" has 3 of 4 GPUs in use; "b" is empty.
    return fleet(host("a"), host("b"), gpus=[
        gpu("a", 0), gpu("a", 1, process_count=1), gpu("a", 2, process_count=1),
        gpu("a", 3, process_count=1), *(gpu("b", i) for i in range(4)),
    ])


def test_pack_fills_partially_used_hosts_first() -> None:
    result = _place(PlacementRequest(policy="pack"), _pack_spread_fleet())
    assert (result.host, result.gpu_indices) == ("a", (0,))
    assert result.scored[0].factors["host_used"] == pytest.approx(0.75)


def test_spread_takes_the_emptiest_host() -> None:
    result = _place(PlacementRequest(policy="spread"), _pack_spread_fleet())
    assert (result.host, result.gpu_indices) == ("b", (0,))
    assert result.scored[0].factors["host_free"] == pytest.approx(1.0)


def test_ties_are_broken_by_host_name_then_index_deterministically() -> None:
    for policy in ("least-loaded", "pack", "spread"):
        result = _place(PlacementRequest(gpus=2, policy=policy), two_idle_hosts(3))
        assert (result.host, result.gpu_indices) == ("a", (0, 1)), policy


def test_random_tie_breaking_spreads_retries_over_equal_gpus() -> None:
    rng = random.Random(7)
    chosen = {place(PlacementRequest(), two_idle_hosts(4), {}, NOW, rng=rng).gpus[0].key
              for _ in range(200)}
    assert len(chosen) == 8  # every equally good GPU gets picked sometimes
    clearly_better = fleet(host("a"), host("b"),
                           gpus=[gpu("a", 0, utilization_pct=80.0), gpu("b", 0)])
    for _ in range(20):
        assert place(PlacementRequest(), clearly_better, {}, NOW, rng=rng).host == "b"


def test_allocation_on_the_candidate_counts_when_the_map_lacks_it() -> None:
    held = gpu("a", 0, allocation=AllocationInfo(3, "reservation", "ann"))
    result = _place(PlacementRequest(), fleet(host("a"), gpus=[held, gpu("a", 1)]))
    assert result.gpu_indices == (1,)


def test_hosts_outside_the_inventory_are_never_chosen() -> None:
    result = _place(PlacementRequest(), fleet(host("a"), gpus=[gpu("ghost", 0)]))
    assert not result.placed
    assert _reasons(result, "ghost", 0).startswith("host not in the inventory")


def test_result_is_independent_of_candidate_order() -> None:
    candidates = two_idle_hosts(3)
    shuffled = replace(candidates, gpus=tuple(reversed(candidates.gpus)),
                       hosts=tuple(reversed(candidates.hosts)))
    first = _place(PlacementRequest(gpus=2), candidates)
    second = _place(PlacementRequest(gpus=2), shuffled)
    assert (first.host, first.gpu_indices) == (second.host, second.gpu_indices)


def test_one_machine_listed_twice_is_offered_once() -> None:
    # gpu1 and gpu1-ib are one machine (two addresses in the inventory): the same UUIDs.
    twice = fleet(host("gpu1"), host("gpu1-ib"), host("gpu2"),
                  gpus=[gpu("gpu1", 0, uuid="GPU-x"), gpu("gpu1-ib", 0, uuid="GPU-x"),
                        gpu("gpu2", 0)])
    result = place(PlacementRequest(gpus=1, hosts="gpu1*"), twice, {}, NOW)
    assert result.host == "gpu1"
    reasons = {(e.host, e.index): e.reasons for e in result.exclusions}
    assert reasons[("gpu1-ib", 0)][0] == "the same GPU (GPU-x) as gpu1:0: one machine listed twice?"
    held = {("gpu1", 0): AllocationInfo(1, "reservation", "ann")}
    assert place(PlacementRequest(gpus=1, hosts="gpu1*"), twice, held, NOW).host is None
