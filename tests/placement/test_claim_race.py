"""No double-booking: 16 processes race through the real API for 8 GPUs in one database."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from db.allocation_details import allocation_details
from db.engine import open_database
from tests.db.conftest import race
from tests.placement.fleetdb import seed_fresh_fleet

PLACE_AND_CLAIM_ON_GO = """
import asyncio, json
import fleet.service
from fleet.errors import NoPlacement
from fleet.placement.request import PlacementRequest

async def main(db, inventory, owner):
    async with fleet.service.open(db, fleet.service.Path(inventory)) as service:
        ready_then_wait_for_go(sys.argv[1])
        try:
            # The seeded samples must stay fresh however long 16 interpreters took to start.
            claim = await service.place_and_claim(PlacementRequest(max_sample_age_s=3600),
                                                  owner=owner)
        except NoPlacement:
            print(json.dumps({"owner": owner, "placed": False}))
            return
        print(json.dumps({"owner": owner, "placed": True, "host": claim.host,
                          "gpus": list(claim.gpu_indices), "attempts": claim.attempts,
                          "ids": list(claim.allocation_ids)}))

asyncio.run(main(sys.argv[2], sys.argv[3], sys.argv[4]))
"""


@pytest.mark.slow
def test_sixteen_processes_eight_gpus_exactly_eight_win(tmp_path: Path, db_url: str) -> None:
    files = seed_fresh_fleet(tmp_path, {"node1": 4, "node2": 4}, db_url=db_url)
    arguments = [[files.db, str(files.inventory_path), f"racer{i}"] for i in range(16)]
    started = time.monotonic()
    outcomes = [json.loads(line) for line in race(PLACE_AND_CLAIM_ON_GO, tmp_path / "go",
                                                  arguments)]
    elapsed = time.monotonic() - started
    winners = [outcome for outcome in outcomes if outcome["placed"]]
    assert len(winners) == 8, outcomes
    taken = [(winner["host"], winner["gpus"][0]) for winner in winners]
    assert len(set(taken)) == 8  # no GPU twice
    assert any(winner["attempts"] > 1 for winner in winners)  # losers re-placed elsewhere
    database = open_database(files.db)
    try:
        with database.reader() as reader:
            active = allocation_details(reader)
    finally:
        database.close()
    assert sorted((row.host, row.gpu_idx) for row in active) == sorted(taken)
    assert {row.owner for row in active} == {winner["owner"] for winner in winners}
    print(f"16 racers for 8 GPUs: {elapsed:.2f}s, attempts "
          f"{sorted(winner['attempts'] for winner in winners)}")
