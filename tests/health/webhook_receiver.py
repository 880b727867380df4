"""A local HTTP receiver for webhook tests: aiohttp on 127.0.0.1, answers from a script."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Received:
    """One request the receiver got: its path, headers and JSON body, and what it answered."""

    path: str
    content_type: str
    body: dict[str, object]
    status: int


@dataclass
class Receiver:
    """Answers each POST with the next of `statuses` (the last one repeats), or 500 on one of
    `failing_paths`, and records it; from request number `silent_from` (0-based) on it reads
    the request and never answers, until closed."""

    statuses: list[int] = field(default_factory=lambda: [200])
    failing_paths: tuple[str, ...] = ()
    headers: dict[str, str] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    silent_from: int | None = None
    port: int = 0
    _runner: web.AppRunner | None = None
    _closing: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def delivered(self) -> list[Received]:
        """The requests answered 2xx."""
        return [item for item in self.received if 200 <= item.status < 300]

    def url(self, path: str = "/services/T000/B000/SECRETTOKEN") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        listening = socket.socket()
        listening.bind(("127.0.0.1", 0))  # loopback only, a free port
        self.port = listening.getsockname()[1]
        await web.SockSite(self._runner, listening).start()
        return self

    async def close(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        index = min(len(self.received), len(self.statuses) - 1)
        status = 500 if request.path in self.failing_paths else self.statuses[index]
        body = json.loads(await request.read())
        if self.silent_from is not None and len(self.received) >= self.silent_from:
            self.received.append(Received(request.path, request.content_type, body, 0))
            await self._closing.wait()
            raise web.HTTPServiceUnavailable()
        self.received.append(Received(request.path, request.content_type, body, status))
        return web.Response(status=status, headers=self.headers if status >= 400 else None)


async def wait_for(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    """Return once `predicate()` is true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)
