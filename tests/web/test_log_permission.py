"""A task's log on the web view follows the API's rule on the socket (`fleet web`): the owner or
an admin only, the caller named by the socket's peer credentials; `--web`'s port has no caller."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

import fleet
from fleet.server.identity import Identities
from fleet.web.live import LiveRows
from fleet.web.site import WebContext, web_app


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fwl-", dir="/tmp"))  # AF_UNIX paths are short
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def service(short_dir: Path) -> AsyncIterator[fleet.Fleet]:
    inventory = short_dir / "inventory.yaml"
    inventory.write_text("hosts: {}\n")
    async with fleet.open(str(short_dir / "fleet.db"), inventory) as opened:
        from db.tasks import create_task

        with opened.database.session() as session:
            create_task(session, name="theirs", script="x.py", args=(), gpus_requested=1,
                        owner="someone-else", now=1, state="succeeded")
            session.commit()
        yield opened


async def _end_of_log(service: fleet.Fleet, identities: Identities | None,
                      socket_path: Path) -> dict[str, object]:
    """The `end` event of GET /web/tasks/1/log over a Unix socket."""
    app = web.Application()
    app.add_subapp("/web/", web_app(WebContext(service, LiveRows(), identities)))
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, str(socket_path)).start()
    try:
        connector = aiohttp.UnixConnector(path=str(socket_path))
        async with aiohttp.ClientSession(connector=connector) as client, \
                client.get("http://fleet/web/tasks/1/log") as reply:
            assert reply.status == 200
            text = (await reply.read()).decode()
    finally:
        await runner.cleanup()
    event, data = text.strip().split("\n\n")[-1].splitlines()[:2]
    assert event == "event: end"
    return json.loads(data.removeprefix("data: "))  # type: ignore[no-any-return]


async def test_someone_elses_log_is_refused_on_the_socket_for_a_non_admin(
        service: fleet.Fleet, short_dir: Path) -> None:
    not_admin = Identities(["fleet-web-test-no-such-group"], server_uid=-1)
    refused = await _end_of_log(service, not_admin, short_dir / "a.sock")
    assert "belongs to someone-else" in str(refused["error"])


async def test_without_a_caller_the_log_is_shown(service: fleet.Fleet,
                                                  short_dir: Path) -> None:
    shown = await _end_of_log(service, None, short_dir / "b.sock")
    assert shown["state"] == "succeeded" and "error" not in shown
