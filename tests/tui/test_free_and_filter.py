"""The TUI's free GPUs are placement's (fleet.placement.free) and its filter is fleet's matcher."""

from __future__ import annotations

import msgspec
import pytest
from textual.widgets import Static

from fleet.placement.candidates import SnapshotGpuFacts, candidates_from_snapshot, gpu_from_snapshot
from fleet.placement.free import free_gpus, is_free
from fleet.placement.place import place
from fleet.placement.request import PlacementRequest
from fleet.snapshot import FleetSnapshot
from tests.tui.conftest import settle
from tests.tui.fake_service import NOW, FakeService, gpu, host, standard_fleet
from tui.app import FleetApp
from tui.rows import FreeCounts, RowFilter, free_count, gpu_is_free
from tui.screens.host_detail import GpuPanel
from tui.widgets.fleet_table import FleetTable


def busy_outside_fleet() -> FleetSnapshot:
    """What the demo showed as 8/8 free: idle-looking GPUs that placement refuses."""
    gpus = [
        gpu("atlas", 0, "NVIDIA H100 80GB HBM3", 80, 0, 0.8, 30, 60),  # 819 MiB used, no holder
        gpu("atlas", 1, "NVIDIA H100 80GB HBM3", 80, 0, 0.1, 30, 60, processes=1),  # foreign
        gpu("atlas", 2, "NVIDIA H100 80GB HBM3", 80, 0, 0.1, 30, 60),  # really free
        gpu("atlas", 3, "NVIDIA H100 80GB HBM3", 80, 0, 0.1, 30, 60, state="hot"),
    ]
    stale = [gpu("boreas", 0, "NVIDIA L4", 24, 0, 0.1, 30, 20)]  # up, but its sample is old
    hosts = (host("atlas", gpus), host("boreas", stale, last_seen=NOW - 120))
    return FleetSnapshot(taken_at=NOW, hosts=hosts, changed=frozenset({"atlas", "boreas"}))


def eligible(snapshot: FleetSnapshot) -> set[tuple[str, int]]:
    """The GPUs a default 1-GPU dispatch may use, as placement computes them."""
    result = place(PlacementRequest(), candidates_from_snapshot(snapshot, {}), {}, NOW)
    return {item.gpu.key for item in result.scored}


def tui_free(snapshot: FleetSnapshot) -> set[tuple[str, int]]:
    return {(h.spec.name, g.index) for h in snapshot.hosts for g in h.gpus
            if gpu_is_free(h, g, NOW)}


def test_gpus_placement_excludes_are_not_free_in_the_tui() -> None:
    snapshot = busy_outside_fleet()
    assert eligible(snapshot) == {("atlas", 2)}
    assert tui_free(snapshot) == {("atlas", 2)}
    atlas, boreas = snapshot.hosts
    assert (free_count(atlas, NOW), free_count(boreas, NOW)) == (1, 0)


@pytest.mark.parametrize("snapshot", [standard_fleet(), busy_outside_fleet()],
                         ids=["standard", "busy_outside_fleet"])
def test_tui_free_is_exactly_what_a_default_dispatch_may_use(snapshot: FleetSnapshot) -> None:
    assert tui_free(snapshot) == eligible(snapshot)


async def test_overview_counts_only_placeable_gpus_as_free() -> None:
    app = FleetApp(FakeService(snapshot=busy_outside_fleet()), clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        assert str(table.get_cell("atlas", "gpus")) == "1/4"
        assert str(table.get_cell("boreas", "gpus")) == "0/1"
        summary = str(app.screen.query_one("#summary", Static).render())
        assert "5 GPUs (1 free)" in summary


@pytest.mark.parametrize(("query", "expected"), [
    ("label:rack=r1", {"atlas", "boreas"}),
    ("label:rack=r2", set()),
    ("rack=r1", set()),  # not fleet's syntax: a label is label:KEY=VALUE
    ("@h100", {"atlas"}),
    ("at*", {"atlas"}),
    ("!atlas", {"boreas"}),
    ("atlas,boreas", {"atlas", "boreas"}),
    ("TLA", {"atlas"}),  # free text: part of a host name, any case
    ("bor state:up", {"boreas"}),
])
def test_the_filter_speaks_the_hosts_pattern_syntax(query: str, expected: set[str]) -> None:
    hosts = (host("atlas", [], groups=("h100",)), host("boreas", []))
    row_filter = RowFilter(query)
    assert {h.spec.name for h in hosts if row_filter.matches(h, NOW)} == expected


def test_free_only_uses_the_same_definition() -> None:
    snapshot = busy_outside_fleet()
    atlas, boreas = snapshot.hosts
    only_free = RowFilter("", free_only=True)
    assert only_free.matches(atlas, NOW)
    assert not only_free.matches(boreas, NOW)
    assert not only_free.matches(msgspec.structs.replace(atlas, drained=True), NOW)


async def test_host_detail_says_which_gpus_are_free_and_why_not() -> None:
    app = FleetApp(FakeService(snapshot=busy_outside_fleet()), clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("enter")  # atlas
        await settle(pilot)
        heads = [str(panel.query_one(".gpu-head", Static).render())
                 for panel in app.screen.query(GpuPanel)]
        assert "not free: 819.2M memory in use outside fleet" in heads[0]
        assert "not free: in use by 1 process not started by fleet" in heads[1]
        assert heads[2].endswith("free") and "not free" not in heads[2]
        assert "not free: GPU state hot" in heads[3]


def test_free_counts_follow_new_snapshots_and_the_sample_age_limit() -> None:
    counts = FreeCounts()
    atlas, boreas = busy_outside_fleet().hosts
    fresh = host("boreas", [gpu("boreas", 0, "NVIDIA L4", 24, 0, 0.1, 30, 20)])
    for now in (NOW, NOW + 25, NOW + 40, NOW + 3600, NOW):  # boreas's report ages past 30 s
        for snapshot_host in (atlas, boreas, fresh):
            assert counts(snapshot_host, now) == free_count(snapshot_host, now)
    assert counts(fresh, NOW) == 1 and counts(fresh, NOW + 60) == 0


def test_snapshot_facts_are_the_candidates_fields() -> None:
    """What the free count reads of a live GPU is what placement's candidate holds."""
    lost = msgspec.structs.replace(gpu("hydra", 0, "NVIDIA L4", 24, None, 0, None, None),
                                   drained=True, drain_reason="fan")
    lost = msgspec.structs.replace(lost, reading=msgspec.structs.replace(lost.reading, lost=True))
    unreported = msgspec.structs.replace(host("hydra", [lost]), report=None)
    hosts = [h for snapshot in (standard_fleet(), busy_outside_fleet()) for h in snapshot.hosts]
    compared = 0
    for snapshot_host in [*hosts, host("hydra", [lost]), unreported]:
        for snapshot_gpu in snapshot_host.gpus:
            facts = SnapshotGpuFacts(snapshot_host, snapshot_gpu)
            candidate = gpu_from_snapshot(snapshot_host, snapshot_gpu)
            for name in SnapshotGpuFacts.__slots__:
                assert getattr(facts, name) == getattr(candidate, name), (snapshot_host, name)
            compared += 1
    assert compared > 10


@pytest.mark.parametrize("now", [NOW, NOW + 60])
def test_free_gpus_is_is_free_on_each_gpu(now: float) -> None:
    snapshots = (standard_fleet(), busy_outside_fleet())
    for snapshot_host in (h for snapshot in snapshots for h in snapshot.hosts):
        assert free_gpus(snapshot_host, now) == tuple(
            g for g in snapshot_host.gpus if is_free(snapshot_host, g, now))
