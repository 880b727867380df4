"""`fleet serve` bounds every history reply: at most MAX_HISTORY_POINTS points, `truncated`
when the range holds more, a larger limit refused (400, exit 2); the CLI through it cuts and
says so as it does locally."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web

from db.gpus import upsert_gpus
from db.hosts import sync_hosts
from db.samples import record_samples
from db.types import GpuFacts, GpuSampleIn, HostFacts, HostSampleIn
from fleet.cli.main import main
from fleet.inventory import Inventory
from fleet.server.app import StatusSource, create_app
from fleet.server.identity import Identities
from fleet.server.jobs import Jobs
from fleet.server.routes import add_v1_routes
from fleet.server.stream import Broadcaster
from fleet.service import Fleet, open_database
from fleet.ssh.options import SshOptions
from fleet.wire import history

EMPTY = Inventory(hosts=(), path=None, groups={}, settings={}, settings_line=None)
T0 = 1_767_225_600  # 2026-01-01 00:00 UTC
SAMPLES = 12  # per GPU and host, 10 s apart
MAX = 5  # the server's MAX_HISTORY_POINTS in these tests


class Server:
    """The /v1 app on a Unix socket, on an event loop of its own thread (so that the CLI can
    run in the test's thread, as `fleet` would in its own process)."""

    def __init__(self, service: Fleet, socket_path: Path, staged: Path) -> None:
        self.service, self.socket_path, self.staged = service, socket_path, staged
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.AppRunner | None = None

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=30)

    async def _start(self) -> None:
        app = create_app(StatusSource(self.service.snapshot),
                         lambda app: add_v1_routes(app, self.service,
                                                   Identities((), os.getuid()),
                                                   Broadcaster(4), Jobs(self.staged)))
        self.runner = web.AppRunner(app, handle_signals=False, access_log=None,
                                    shutdown_timeout=2)
        await self.runner.setup()
        await web.UnixSite(self.runner, str(self.socket_path)).start()

    def get(self, path: str, **params: Any) -> tuple[int, Any]:
        async def call() -> tuple[int, Any]:
            connector = aiohttp.UnixConnector(path=str(self.socket_path))
            async with aiohttp.ClientSession(connector=connector) as session, \
                    session.get(f"http://fleet/v1/{path}", params={
                        key: str(value) for key, value in params.items()}) as reply:
                return reply.status, msgspec.json.decode(await reply.read())

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout=30)

    def stop(self) -> None:
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()


@pytest.fixture
def server(tmp_path: Path, short_dir: Path, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[Server]:
    """A server over a database of one host with two GPUs, each sampled SAMPLES times; the
    server's reply maximum lowered to MAX."""
    monkeypatch.setattr(history, "MAX_HISTORY_POINTS", MAX, raising=False)  # none before
    database = open_database(str(tmp_path / "fleet.db"))
    with database.session() as session:
        host_id = sync_hosts(session, [HostFacts("alpha", "10.0.0.1")], now=T0)["alpha"]
        gpus = upsert_gpus(session, host_id, [GpuFacts(i, f"GPU-{i}", "H100")
                                              for i in range(2)], now=T0).ids
        stamps = [(T0 + 10 * i) * 1000 for i in range(SAMPLES)]
        record_samples(session, [HostSampleIn(host_id, ts, load_1m=1.0) for ts in stamps],
                       [GpuSampleIn(gpu_id, ts, utilization_gpu_pct=5.0) for ts in stamps
                        for gpu_id in gpus.values()])
    service = Fleet(database, EMPTY, SshOptions())
    running = Server(service, short_dir / "s.sock", tmp_path / "staged")
    running.start()
    try:
        yield running
    finally:
        running.stop()
        service.close()


RANGE = {"since": T0, "until": T0 + 3600}


@pytest.mark.parametrize("path", ["history/gpu", "history/host"])
def test_a_reply_holds_at_most_the_maximum(server: Server, path: str) -> None:
    status, reply = server.get(path, **RANGE)  # no limit: the maximum, and the word
    assert status == 200 and len(reply["points"]) == MAX and reply["truncated"] is True
    status, reply = server.get(path, **RANGE, bucket_s=10)  # buckets too
    assert status == 200 and len(reply["points"]) == MAX and reply["truncated"] is True
    status, reply = server.get(path, **RANGE, limit=3)
    assert status == 200 and len(reply["points"]) == 3 and reply["truncated"] is True
    status, reply = server.get(path, **RANGE, limit=MAX + 1)  # what a client showing MAX asks
    assert status == 200 and len(reply["points"]) == MAX + 1
    status, reply = server.get(path, **RANGE, bucket_s=3600)  # all of it: one point per GPU
    assert status == 200 and reply["truncated"] is False
    assert len(reply["points"]) == (2 if path == "history/gpu" else 1)
    status, reply = server.get(path, **RANGE, limit=MAX + 2)
    assert status == 400, reply
    assert reply["error"]["exit_code"] == 2
    assert f"at most {MAX} points" in reply["error"]["message"]
    assert "bucket" in reply["error"]["message"]


def test_the_cli_through_the_server_cuts_and_says_so(
        server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("FLEET_DB", "FLEET_SERVER", "FLEET_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    through = ["--server", str(server.socket_path), "--json", "history"]
    times = ["--since", str(T0), "--until", str(T0 + 3600)]
    for kind in ("gpus", "hosts"):
        code = main([*through, kind, *times, "--limit", "3"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert len(json.loads(out)["points"]) == 3 and json.loads(out)["truncated"] is True
        assert "showing the first 3 samples; the range holds more" in err
        code = main([*through, kind, *times, "--limit", str(MAX)])  # asks MAX + 1: allowed
        out, err = capsys.readouterr()
        assert code == 0 and len(json.loads(out)["points"]) == MAX, err
        code = main([*through, kind, *times, "--limit", str(MAX + 1)])
        out, err = capsys.readouterr()
        assert (code, out) == (2, "")
        assert f"at most {MAX} points" in err and "--bucket" in err
