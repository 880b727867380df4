"""`fleet dispatch --notify` end to end: a real failing task, its task_ended as Slack JSON at a
loopback receiver (after a 500), and a task dispatched without --notify left out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from db.engine import open_database
from fleet.health.hooks import HookSettings
from fleet.health.webhook_delivery import RetryPolicy
from fleet.health.webhook_feed import WebhookFeed
from fleet.health.webhook_settings import Webhook
from tests.dispatch.conftest import DispatchLab
from tests.health.webhook_receiver import Receiver, wait_for

LabFactory = Callable[..., Awaitable[DispatchLab]]
FAILING = "import sys\nprint('boom')\nsys.exit(3)\n"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)


async def test_a_notified_failed_task_reaches_the_slack_webhook(dispatch_lab: LabFactory) -> None:
    lab = await dispatch_lab(1)
    script = lab.cli.home / "fails.py"
    script.write_text(FAILING)
    receiver = await Receiver(statuses=[500, 200]).start()
    database = open_database(lab.cli.db_url or f"sqlite:///{lab.cli.db_path}")
    settings = HookSettings(webhooks=(Webhook(receiver.url(), kinds=("task_*",), format="slack",
                                              only_notified=True),), webhook_poll_s=0.05)
    feed = WebhookFeed(database, settings, policy=RetryPolicy(first_wait_s=0.05, max_wait_s=0.1))
    await feed.start()
    try:
        quiet = await lab.cli.run("dispatch", str(script))  # not --notify: not delivered
        notified = await lab.cli.run("dispatch", "--notify", "--name", "train", str(script))
        assert (quiet.returncode, notified.returncode) == (3, 3), notified.stderr
        await wait_for(lambda: receiver.delivered, timeout=30)
        await feed.poll()
        assert feed.runner is not None
        await asyncio.wait_for(feed.runner.wait_idle(), 30)
    finally:
        await feed.close()
        await receiver.close()
        database.close()
    assert [item.status for item in receiver.received] == [500, 200]
    (delivered,) = receiver.delivered
    text = str(delivered.body["text"])
    assert text.startswith("[ERROR] task_ended on gpu1: task ")
    assert "(train) of " in text and "failed on gpu1 with exit code 3 after" in text
