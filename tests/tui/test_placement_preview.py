"""The dispatch dialog's preview of a real placement: eligible GPUs best first, every exclusion."""

from __future__ import annotations

from fleet.placement.place import place
from fleet.placement.request import PlacementRequest
from fleet.render.explain import place_report
from tests.placement.builders import GIB, NOW, fleet, gpu, host
from tui.adapter import PREVIEW_EXCLUSIONS, placement_preview


def test_the_preview_lists_the_choice_and_each_exclusion_with_its_reason() -> None:
    candidates = fleet(
        host("atlas"), host("boreas", state="down"),
        gpus=[gpu("atlas", 0, drained=True, drain_reason="fan"), gpu("atlas", 1, state="hot"),
              gpu("atlas", 2), gpu("atlas", 3, memory_used_bytes=10 * GIB), gpu("boreas", 0)])
    result = place(PlacementRequest(gpus=1), candidates, {}, NOW)

    preview = placement_preview(place_report(result))

    assert (preview.feasible, preview.host, preview.gpu_indices) == (True, "atlas", (2,))
    assert [line.split()[:2] for line in preview.explanation] == [["*", "atlas:2"]]
    assert sorted(preview.exclusions) == sorted([
        "boreas: host is down",  # the whole host, once: not each of its GPUs
        "atlas:0: GPU drained: fan",
        "atlas:1: GPU state hot",
        "atlas:3: 10.0G memory in use outside fleet",
    ])


def test_an_infeasible_preview_still_explains_and_caps_its_exclusions() -> None:
    count = PREVIEW_EXCLUSIONS + 5
    candidates = fleet(host("big"), gpus=[gpu("big", i, state="hot") for i in range(count)])
    result = place(PlacementRequest(gpus=1), candidates, {}, NOW)

    preview = placement_preview(place_report(result))

    assert (preview.feasible, preview.host, preview.gpu_indices) == (False, None, ())
    assert preview.explanation == ()
    assert len(preview.exclusions) == PREVIEW_EXCLUSIONS + 1
    assert preview.exclusions[0] == "big:0: GPU state hot"
    assert preview.exclusions[-1] == "… and 5 more"
