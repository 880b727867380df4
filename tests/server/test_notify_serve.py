"""Lab mode notifications: `fleet dispatch --notify` through `fleet serve`, whose monitor sends
the task's end to a Slack webhook from its settings (a loopback receiver of the test)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.health.webhook_receiver import Receiver, wait_for
from tests.server.conftest import ServeLabFactory

FAILING = "import sys\nsys.exit(4)\n"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    started = await Receiver(statuses=[503, 200]).start()
    yield started
    await started.close()


async def test_a_notified_task_through_the_server_reaches_the_webhook(
        serve_lab: ServeLabFactory, receiver: Receiver) -> None:
    settings = ("hooks:\n  webhook_poll_s: 100ms\n  webhooks:\n"
                f"    - url: {receiver.url()}\n      format: slack\n"
                "      kinds: [task_ended]\n      only_notified: true\n")
    lab = await serve_lab(1, settings=settings)
    await lab.serve()
    script = lab.cli.home / "fails.py"
    script.write_text(FAILING)
    plain = await lab.run("dispatch", "--name", "plain", str(script))
    notified = await lab.run("dispatch", "--notify", "--name", "mine", str(script))
    assert (plain.returncode, notified.returncode) == (4, 4), notified.stderr
    await wait_for(lambda: receiver.delivered, timeout=30)
    assert [item.status for item in receiver.received] == [503, 200]
    text = str(receiver.delivered[0].body["text"])
    assert text.startswith("[ERROR] task_ended on gpu1: task ") and "(mine) of " in text
    assert "failed on gpu1 with exit code 4" in text
