"""Webhooks against a real HTTP receiver on 127.0.0.1: formats, retries, deadlines, failures."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from db.engine import Database
from db.event_queries import find_events
from db.events import add_event
from db.tasks import create_task, update_task
from fleet.dispatch import records
from fleet.dispatch.ending import Ending
from fleet.health.hooks import HookSettings
from fleet.health.webhook_delivery import RetryPolicy, WebhookRunner
from fleet.health.webhook_feed import WebhookFeed
from fleet.health.webhook_settings import Webhook
from fleet.monitor.config import default_settings
from fleet.monitor.monitor import Monitor
from fleet.ssh.options import SshOptions
from tests.health.conftest import Seeded
from tests.health.webhook_receiver import Receiver, wait_for

FAST = RetryPolicy(first_wait_s=0.02, max_wait_s=0.1, attempt_timeout_s=2.0)
EVENT = {"id": 7, "ts": 1700000000, "kind": "gpu_hot", "severity": "warning", "host": "alpha",
         "gpu_index": 1, "task_id": None, "message": "alpha GPU 1: ok -> hot", "data": {}}


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deliveries honour proxy variables; the tests' receiver is on loopback, reached directly."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    started = await Receiver().start()
    yield started
    await started.close()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on (bound, never listening, so never reused meanwhile)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def _failed_task(database: Database, seeded: Seeded) -> int:
    """A running task of ann on alpha (GPU 0 and 1 not needed for the event)."""
    with database.session() as session:
        task_id = create_task(session, name="train.py", script="train.py", args=[],
                              gpus_requested=1, owner="ann", now=int(time.time()) - 90,
                              state="starting")
        update_task(session, task_id, host_id=seeded.host_ids["alpha"], state="running",
                    started_at=int(time.time()) - 90)
    return task_id


async def test_slack_json_for_a_failed_task_arrives_after_500s(
        database: Database, seeded: Seeded, receiver: Receiver) -> None:
    receiver.statuses = [500, 503, 200]
    settings = HookSettings(webhooks=(Webhook(receiver.url(), kinds=("task_*",),
                                              format="slack"),), webhook_poll_s=0.05)
    feed = WebhookFeed(database, settings, policy=FAST)
    await feed.start()
    try:
        task_id = _failed_task(database, seeded)
        assert records.finish(database, task_id, Ending("failed", 3, "exit code 3",
                                                        int(time.time()), 90.0))
        await wait_for(lambda: receiver.delivered)
    finally:
        await feed.close()
    assert [item.status for item in receiver.received] == [500, 503, 200]
    (delivered,) = receiver.delivered
    assert delivered.content_type == "application/json"
    text = str(delivered.body["text"])
    assert text.startswith("[ERROR] task_ended on alpha: ")
    assert f"task {task_id} (train.py) of ann failed on alpha with exit code 3 after 1m30s" \
        in text
    blocks = delivered.body["blocks"]
    assert isinstance(blocks, list) and blocks[0]["type"] == "section"
    assert f"task {task_id}" in blocks[1]["elements"][0]["text"]
    assert feed.runner is not None and feed.runner.stats.attempts == 3


async def test_plain_json_is_the_event_document_and_filters_apply(receiver: Receiver) -> None:
    runner = WebhookRunner([Webhook(receiver.url("/hook"), kinds=("gpu_*",)),
                            Webhook(receiver.url("/severe"), min_severity="error")],
                           policy=FAST)
    assert runner.submit(EVENT) == 1  # gpu_hot is a warning: not for /severe
    assert runner.submit({**EVENT, "kind": "host_down", "severity": "error"}) == 1
    await runner.close(timeout_s=10)
    assert sorted((item.path, item.body["kind"]) for item in receiver.delivered) == [
        ("/hook", "gpu_hot"), ("/severe", "host_down")]
    assert next(item.body for item in receiver.delivered if item.path == "/hook") == EVENT


async def test_a_failing_webhook_is_an_event_and_never_a_stall(
        receiver: Receiver, closed_port: int, caplog: pytest.LogCaptureFixture) -> None:
    failures: list[dict[str, object]] = []
    good = Webhook(receiver.url("/good"), name="good")
    dead = Webhook(f"http://127.0.0.1:{closed_port}/hooks/SECRETTOKEN?key=SECRETKEY",
                   deadline_s=0.5)
    runner = WebhookRunner([dead, good], on_failure=failures.append, policy=FAST)
    assert runner.submit(EVENT) == 2
    assert runner.stats.attempts == 0  # submit only queues: no attempt before the loop runs
    await wait_for(lambda: failures and receiver.delivered)
    (failure,) = failures
    assert failure["kind"] == "webhook_failed" and failure["severity"] == "warning"
    message = str(failure["message"])
    assert "SECRET" not in message and "SECRET" not in str(failure["data"])
    assert message.startswith(f"webhook http://127.0.0.1:{closed_port}/hooks/***?*** failed "
                              "for event gpu_hot: cannot connect")
    assert "gave up at its 0.5s deadline" in message
    assert message in caplog.text and "SECRET" not in caplog.text  # logged, redacted
    data = failure["data"]
    assert isinstance(data, dict) and data["attempts"] > 1 and data["event_id"] == 7
    # The failure goes to the other webhooks, never back to the one that failed; a failure to
    # deliver a failure goes nowhere (two failing webhooks cannot feed each other).
    assert runner.submit({**failure, "id": 8}) == 1
    assert runner.submit({"kind": "webhook_failed", "severity": "warning",
                          "data": {"webhook": "good", "event_kind": "webhook_failed"}}) == 0
    await wait_for(lambda: len(receiver.delivered) == 2)
    assert receiver.delivered[1].body["kind"] == "webhook_failed"
    assert runner.submit(EVENT) == 2  # still delivering after the failure
    await runner.close(timeout_s=10)
    assert runner.stats.failed == 2 and runner.stats.delivered == 3


async def test_4xx_is_not_retried_but_429_is(receiver: Receiver) -> None:
    failures: list[dict[str, object]] = []
    receiver.statuses = [404]
    runner = WebhookRunner([Webhook(receiver.url())], on_failure=failures.append, policy=FAST)
    runner.submit(EVENT)
    await wait_for(lambda: failures)
    assert len(receiver.received) == 1
    assert "HTTP 404 after 1 attempt" in str(failures[0]["message"])
    receiver.statuses = [429, 200]
    receiver.received.clear()
    receiver.headers = {"Retry-After": "0"}
    runner.submit(EVENT)
    await wait_for(lambda: receiver.delivered)
    assert [item.status for item in receiver.received] == [429, 200]
    await runner.close(timeout_s=10)


async def test_a_silent_receiver_fails_as_no_answer_and_keeps_the_telling_reason(
        receiver: Receiver) -> None:
    failures: list[dict[str, object]] = []
    runner = WebhookRunner([Webhook(receiver.url("/slow"), deadline_s=0.4)],
                           on_failure=failures.append, policy=FAST)
    receiver.silent_from = 0  # never answers: the one attempt ends at the deadline
    runner.submit(EVENT)
    await wait_for(lambda: failures)
    assert "failed for event gpu_hot: no answer within 0.4s after 1 attempt;" in str(
        failures[0]["message"])
    await runner.close(timeout_s=0.2)
    # A 503, then silence: the attempt the deadline cut short does not hide the 503 (1.5 s
    # leaves room for the second attempt, and is below the 2 s an attempt may take).
    failures.clear()
    receiver.received.clear()
    receiver.statuses, receiver.silent_from = [503], 1
    runner = WebhookRunner([Webhook(receiver.url("/slow"), deadline_s=1.5)],
                           on_failure=failures.append, policy=FAST)
    runner.submit(EVENT)
    await wait_for(lambda: failures)
    assert [item.status for item in receiver.received] == [503, 0]
    assert str(failures[0]["message"]).endswith(
        "failed for event gpu_hot: HTTP 503 after 2 attempts (the last cut off by the "
        "deadline); gave up at its 1.5s deadline")
    await runner.close(timeout_s=0.2)


async def test_full_queue_drops_and_counts(closed_port: int) -> None:
    slow = Webhook(f"http://127.0.0.1:{closed_port}/x", deadline_s=5)
    runner = WebhookRunner([slow], max_concurrent=1, queue_size=2,
                           policy=RetryPolicy(first_wait_s=1, max_wait_s=1))
    queued = sum(runner.submit(EVENT) for _ in range(10))
    assert queued <= 3 and runner.stats.dropped >= 7
    started = time.monotonic()
    await runner.close(timeout_s=0.2)  # bounded: what is left is dropped, not awaited
    assert time.monotonic() - started < 3


async def test_the_monitor_delivers_task_events_and_records_webhook_failures(
        database: Database, seeded: Seeded, receiver: Receiver, closed_port: int) -> None:
    hooks = HookSettings(webhook_poll_s=0.05, close_timeout_s=2, webhooks=(
        Webhook(receiver.url(), kinds=("task_*", "webhook_failed")),
        Webhook(f"http://127.0.0.1:{closed_port}/services/T0/B0/SECRETTOKEN", deadline_s=0.3,
                kinds=("task_ended",)),
    ))
    settings = default_settings().with_values("hooks", webhooks=hooks.webhooks,
                                              webhook_poll_s=0.05, close_timeout_s=2)
    monitor = Monitor([], database, SshOptions(), settings)  # no hosts: only the feed matters
    await monitor.start()
    try:
        task_id = _failed_task(database, seeded)
        records.finish(database, task_id, Ending("succeeded", 0, None, int(time.time()), 5.0))
        await wait_for(lambda: any(item.body["kind"] == "webhook_failed"
                                   for item in receiver.delivered))
    finally:
        await monitor.stop()
    kinds = [item.body["kind"] for item in receiver.delivered]
    assert kinds[0] == "task_ended" and receiver.delivered[0].body["severity"] == "info"
    assert receiver.delivered[0].body["task_id"] == task_id
    with database.reader() as reader:
        (stored,) = find_events(reader, kind="webhook_failed")
    assert stored.message.startswith(f"webhook http://127.0.0.1:{closed_port}/services/*** "
                                     "failed for event task_ended")
    assert "SECRETTOKEN" not in stored.message + str(stored.data)


@pytest.mark.postgresql_only  # SQLite writers take turns: ids are committed in their order
async def test_an_event_committed_after_a_newer_one_is_still_delivered(
        database: Database, receiver: Receiver) -> None:
    settings = HookSettings(webhooks=(Webhook(receiver.url()),), webhook_poll_s=3600)
    feed = WebhookFeed(database, settings, policy=FAST)
    await feed.start()
    assert feed.runner is not None
    try:
        with database.session() as late:  # takes the lower id, commits last
            add_event(late, ts=1, kind="gpu_hot", severity="warning", message="late")
            with database.session() as early:
                add_event(early, ts=2, kind="gpu_hot", severity="warning", message="early")
            await feed.poll()
            await asyncio.wait_for(feed.runner.wait_idle(), 10)
            assert [item.body["message"] for item in receiver.delivered] == ["early"]
        await feed.poll()
        await asyncio.wait_for(feed.runner.wait_idle(), 10)
    finally:
        await feed.close()
    assert [item.body["message"] for item in receiver.delivered] == ["early", "late"]


async def test_webhooks_alike_when_shown_are_still_told_apart(receiver: Receiver) -> None:
    failures: list[dict[str, object]] = []
    # Both show as http://127.0.0.1:PORT/services/***; only the failing one misses its failure.
    receiver.failing_paths = ("/services/T0/DEAD",)
    dead = Webhook(receiver.url("/services/T0/DEAD"), deadline_s=0.2)
    alive = Webhook(receiver.url("/services/T0/ALIVE"))
    assert dead.label == alive.label
    runner = WebhookRunner([dead, alive], on_failure=failures.append, policy=FAST)
    runner.submit({**EVENT, "kind": "host_down"})
    await wait_for(lambda: failures)
    assert runner.submit(failures[0]) == 1
    await wait_for(lambda: len(receiver.delivered) == 2)
    assert [item.body["kind"] for item in receiver.delivered] == ["host_down", "webhook_failed"]
    await runner.close(timeout_s=10)
