"""Task events for notifications: one `task_ended` per end, `task_started` only after a wait."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from db.engine import Database
from db.event_queries import find_events
from db.event_tail import events_after
from db.task_reads import get_task
from db.tasks import create_task, update_task
from fleet.dispatch import records
from fleet.dispatch.ending import Ending
from fleet.dispatch.request import DispatchRequest
from fleet.dispatch.staging import pack, stage
from fleet.dispatch.task_events import STARTED_AFTER_WAIT_S
from fleet.health.webhook_feed import event_document
from fleet.health.webhook_settings import Webhook
from fleet.placement.request import PlacementRequest
from fleet.wire.codec import decode, encode
from fleet.wire.dispatch import SubmitRequest
from tests.health.conftest import Seeded


def _task(database: Database, seeded: Seeded, *, state: str, wait: bool = False,
          submitted_ago: int = 0, constraints: dict[str, Any] | None = None) -> int:
    with database.session() as session:
        task_id = create_task(session, name="sweep.py", script="sweep.py", args=[],
                              gpus_requested=1, owner="bob", state=state,  # type: ignore[arg-type]
                              now=int(time.time()) - submitted_ago,
                              constraints=constraints or {"wait": wait})
        update_task(session, task_id, host_id=seeded.host_ids["beta"])
    return task_id


@pytest.mark.parametrize(("ending", "severity", "says"), [
    (Ending("succeeded", 0, None, 0, 12.0), "info", "succeeded on beta after 12s"),
    (Ending("failed", 2, "exit code 2", 0, 75.0), "error",
     "failed on beta with exit code 2 after 1m15s"),
    (Ending("failed", None, "timed out after 60s", 0, 60.0, timed_out=True), "error",
     "timed out on beta after 1m0s"),
    (Ending("lost", None, "host beta unreachable for 400s", 0, None), "warning",
     "lost on beta: host beta unreachable for 400s"),
    (Ending("cancelled", None, "cancelled", 0, None), "info", "cancelled on beta: cancelled"),
])
def test_each_end_is_one_task_ended_event(database: Database, seeded: Seeded, ending: Ending,
                                          severity: str, says: str) -> None:
    task_id = _task(database, seeded, state="running")
    assert records.finish(database, task_id, ending)
    assert not records.finish(database, task_id, ending)  # the race's loser records nothing
    with database.reader() as reader:
        (event,) = find_events(reader, kind="task_*")
    assert (event.kind, event.severity, event.task_id, event.host) == (
        "task_ended", severity, task_id, "beta")
    assert event.message == f"task {task_id} (sweep.py) of bob {says}"
    assert event.data["state"] == ending.state and event.data["owner"] == "bob"


def test_task_started_only_after_a_wait_in_the_queue(database: Database, seeded: Seeded) -> None:
    now = int(time.time())
    waited = _task(database, seeded, state="starting", wait=True,
                   submitted_ago=STARTED_AFTER_WAIT_S + 50)
    at_once = _task(database, seeded, state="starting", wait=True)
    no_wait = _task(database, seeded, state="starting", submitted_ago=600)
    for task_id in (waited, at_once, no_wait):
        assert records.started(database, task_id, pgid=4242, started_at=now)
    assert not records.started(database, waited, pgid=4242, started_at=now)  # not `starting`
    with database.reader() as reader:
        events = find_events(reader, kind="task_started")
        row = get_task(reader, waited)
    assert [event.task_id for event in events] == [waited]
    assert events[0].message.startswith(f"task {waited} (sweep.py) of bob started on beta "
                                        "after waiting 1m")
    assert row is not None and (row.state, row.remote_pid) == ("running", 4242)


def test_notify_travels_to_the_server_and_into_the_task_events(
        database: Database, seeded: Seeded, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    request = DispatchRequest(script, PlacementRequest(gpus=1), notify=True)
    (tmp_path / "staged").mkdir()
    staged = stage(decode(encode(pack(request, follow=True)), SubmitRequest), tmp_path / "staged")
    assert staged.notify and staged.stored_constraints()["notify"] is True

    mine = _task(database, seeded, state="running", constraints=staged.stored_constraints())
    other = _task(database, seeded, state="running")
    for task_id in (mine, other):
        records.finish(database, task_id, Ending("failed", 1, "exit code 1", 0, 1.0))
    with database.session() as session:
        documents = [event_document(row) for row in events_after(session, 0)]
    only_notified = Webhook("https://example.com/x", kinds=("task_*",), only_notified=True)
    everyone = Webhook("https://example.com/x", kinds=("task_*",))
    assert [doc["task_id"] for doc in documents if only_notified.wants(doc)] == [mine]
    assert [doc["task_id"] for doc in documents if everyone.wants(doc)] == [mine, other]
