"""Per-user limits: resolution (lab-wide, per group, the highest of several groups), the
settings' checks with file and line, reservation length, queue length, and the GPU cap held
inside the claim's transaction against racing claims of one owner, on both backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.inventory import load_inventory
from fleet.monitor.config import load_settings
from fleet.placement.limits import (
    GroupLimits,
    LimitReached,
    LimitSettings,
    check_queued,
    check_reservation,
    limit_settings,
    limits_for,
    over_gpu_limit,
)
from tests.db.conftest import race
from tests.placement.fleetdb import seed_fresh_fleet

GROUPS = {"ann": ("users", "interns"), "bob": ("users", "staff", "seniors"), "cy": ()}.get


def _groups(user: str) -> tuple[str, ...]:
    return GROUPS(user) or ()


def test_a_groups_value_replaces_the_lab_wide_one_and_the_highest_group_wins() -> None:
    limits = LimitSettings(max_gpus_per_user=4, max_reservation=3600.0, groups={
        "interns": GroupLimits(max_gpus_per_user=1),
        "staff": GroupLimits(max_gpus_per_user=8),
        "seniors": GroupLimits(max_gpus_per_user=16, max_queued_per_user=5)})
    ann, bob, cy = (limits_for(limits, user, _groups) for user in ("ann", "bob", "cy"))
    assert (ann.max_gpus, bob.max_gpus, cy.max_gpus) == (1, 16, 4)
    assert ann.named("max_gpus_per_user") == "limits.groups.interns.max_gpus_per_user = 1"
    assert cy.named("max_reservation") == "limits.max_reservation = 3600s"
    assert bob.value("max_queued_per_user") == 5 and cy.value("max_queued_per_user") is None
    assert over_gpu_limit(ann, 0, 1) is None
    assert over_gpu_limit(ann, 1, 1) == ("limits.groups.interns.max_gpus_per_user = 1: ann "
                                         "holds 1 GPU(s) and asks for 1 more")
    assert over_gpu_limit(limits_for(LimitSettings(), "cy", _groups), 99, 99) is None


def test_reservation_length_and_queue_length() -> None:
    limits = limits_for(LimitSettings(max_reservation=3600.0, max_queued_per_user=2), "cy",
                        _groups)
    check_reservation(limits, 3600)
    with pytest.raises(LimitReached, match=r"limits\.max_reservation = 3600s: a reservation "
                                           r"of 7200s is longer") as refused:
        check_reservation(limits, 7200)
    assert refused.value.exit_code == 7
    with pytest.raises(LimitReached, match="give --for"):
        check_reservation(limits, None)
    check_queued(limits, 1)
    with pytest.raises(LimitReached, match="max_queued_per_user = 2: cy has 2 task"):
        check_queued(limits, 2)


def test_bad_limits_name_their_file_and_line(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  a: {address: 10.0.0.1}\nsettings:\n  limits:\n"
                         "    groups:\n      no-such-group-here: {max_gpus_per_user: 1}\n")
    with pytest.raises(ConfigError, match=r"inventory\.yaml:\d+: limits\.groups: no Unix "
                                          r"group named 'no-such-group-here'"):
        limit_settings(load_settings(load_inventory(inventory)))
    inventory.write_text("hosts:\n  a: {address: 10.0.0.1}\nsettings:\n  limits:\n"
                         "    max_gpus_per_user: -1\n")
    with pytest.raises(ConfigError, match=r"inventory\.yaml:5: .*max_gpus_per_user"):
        load_settings(load_inventory(inventory))
    inventory.write_text("hosts:\n  a: {address: 10.0.0.1}\nsettings:\n  idle:\n"
                         "    util_below_pct: 150\n")  # a threshold outside 0-100 %
    with pytest.raises(ConfigError, match=r"inventory\.yaml:5: .*util_below_pct"):
        load_settings(load_inventory(inventory))


CLAIM_ONE_ON_GO = """
import asyncio, json
import fleet.service
from fleet.errors import NoPlacement
from fleet.placement.request import PlacementRequest

async def main(db, inventory):
    async with fleet.service.open(db, fleet.service.Path(inventory)) as service:
        limits = service.placement_service.user_limits("ann")
        ready_then_wait_for_go(sys.argv[1])
        try:
            # The seeded samples must stay fresh however long the racers took to start.
            await service.place_and_claim(PlacementRequest(max_sample_age_s=3600), owner="ann",
                                          limits=limits)
        except NoPlacement as exc:
            print(json.dumps({"placed": False, "why": str(exc)}))
            return
        print(json.dumps({"placed": True}))

asyncio.run(main(sys.argv[2], sys.argv[3]))
"""


@pytest.mark.slow
def test_racing_claims_of_one_owner_never_pass_the_limit_together(tmp_path: Path,
                                                                 db_url: str) -> None:
    files = seed_fresh_fleet(tmp_path, {"node1": 4, "node2": 4}, db_url=db_url)
    with files.inventory_path.open("a") as inventory:
        inventory.write("settings:\n  limits:\n    max_gpus_per_user: 3\n")
    outcomes = [json.loads(line) for line in race(
        CLAIM_ONE_ON_GO, tmp_path / "go", [[files.db, str(files.inventory_path)]] * 6)]
    assert sum(outcome["placed"] for outcome in outcomes) == 3, outcomes
    assert all("limits.max_gpus_per_user = 3" in outcome["why"]
               for outcome in outcomes if not outcome["placed"])
