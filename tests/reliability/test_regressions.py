"""Regression tests for bugs the reliability suite found (each names the symptom it prevents)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from db.engine import open_database
from fleet.placement.claim import claim
from tests.placement.fleetdb import seed_fresh_fleet

LOCK_HELD_S = 2.2


def test_a_claim_that_waited_for_the_write_lock_is_timed_after_the_wait(tmp_path: Path) -> None:
    """32 concurrent dispatchers: an allocation's created_at was taken before waiting for the
    SQLite write lock, so it could predate the release it waited for and the history showed one
    GPU allocated twice at once."""
    files = seed_fresh_fleet(tmp_path, {"h1": 1})
    blocker = sqlite3.connect(files.db_path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    released_at: list[float] = []

    def release_later() -> None:
        time.sleep(LOCK_HELD_S)
        released_at.append(time.time())
        blocker.execute("COMMIT")

    thread = threading.Thread(target=release_later)
    thread.start()
    database = open_database(str(files.db_path))
    try:
        made = claim(database, "h1", [0], kind="reservation", owner="me")
    finally:
        thread.join()
        database.close()
        blocker.close()
    assert made.created_at >= int(released_at[0])
