"""The CLI's HTTP client (fleet.client.transport on fleet.client.http) against real servers on a
Unix socket: aiohttp's, as `fleet serve` runs it, and raw sockets for broken replies."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import msgspec
import pytest
from aiohttp import web

from fleet.client import transport as transport_module
from fleet.client.transport import Transport
from fleet.errors import ConfigError, PermissionDenied, ServerUnavailable
from fleet.wire.codec import encode
from fleet.wire.errors import error_to_wire

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
EVENT_STREAM = {"Content-Type": "text/event-stream"}


class Blob(msgspec.Struct, frozen=True):
    data: bytes
    sha256: str = ""


class Query(msgspec.Struct, frozen=True):
    pairs: list[tuple[str, str]]


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # AF_UNIX paths must fit in 108 bytes: pytest's tmp_path can be longer.
    directory = Path(tempfile.mkdtemp(prefix="fct-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@contextlib.asynccontextmanager
async def serving(socket_dir: Path, routes: dict[str, Handler]) -> AsyncIterator[Path]:
    """An aiohttp server on a Unix socket answering /v1/NAME with routes[NAME] (any method)."""
    app = web.Application(client_max_size=64 << 20)
    for name, handler in routes.items():
        app.router.add_route("*", f"/v1/{name}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    path = socket_dir / "fleet.sock"
    await web.UnixSite(runner, str(path)).start()
    try:
        yield path
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def raw_server(socket_dir: Path, reply: bytes) -> AsyncIterator[Path]:
    """A server that reads the request head, writes `reply` as it is, and hangs up."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)
        await writer.drain()
        writer.close()

    path = socket_dir / "raw.sock"
    server = await asyncio.start_unix_server(answer, str(path))
    try:
        yield path
    finally:
        server.close()
        await server.wait_closed()


def frame(event: str, data: bytes) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


async def collect(transport: Transport, path: str) -> list[tuple[str, bytes]]:
    return [item async for item in transport.events(path)]


async def test_events_split_anywhere_in_chunks_arrive_whole(socket_dir: Path) -> None:
    big = b"x" * (1 << 20)
    stream = (frame("submitted", b'{"task_id":7}') + b": keepalive\n\n"
              + frame("output", big) + b"event: two\ndata: a\ndata: b\n\n"
              + frame("ended", b"{}"))

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=EVENT_STREAM)
        await response.prepare(request)
        # cut inside a field name, between the two newlines of a separator, one byte at a
        # time, and in the middle of a 1 MiB event
        separator = stream.index(b"\n\n")
        cuts = [0, 5, separator + 1, separator + 2, separator + 3, 500_000, len(stream) - 3,
                len(stream) - 1, len(stream)]
        for start, end in itertools.pairwise(cuts):
            await response.write(stream[start:end])
            await asyncio.sleep(0)
        return response

    async with serving(socket_dir, {"stream": handler}) as path:
        transport = Transport(path)
        events = await collect(transport, "stream")
        await transport.close()
    assert events == [("submitted", b'{"task_id":7}'), ("output", big), ("two", b"a\nb"),
                      ("ended", b"{}")]


async def test_large_bodies_both_ways(socket_dir: Path) -> None:
    payload = bytes(range(256)) * (32 << 10)  # 8 MiB

    async def echo(request: web.Request) -> web.Response:
        sent = msgspec.json.decode(await request.read(), type=Blob)
        reply = Blob(sent.data[::-1], hashlib.sha256(sent.data).hexdigest())
        return web.Response(body=encode(reply), content_type="application/json")

    async with serving(socket_dir, {"echo": echo}) as path:
        transport = Transport(path)
        reply = await transport.post("echo", Blob(payload), Blob)
    assert reply.sha256 == hashlib.sha256(payload).hexdigest()
    assert reply.data == payload[::-1]


async def test_a_missing_or_refusing_socket_is_exit_9_naming_it(socket_dir: Path) -> None:
    missing = socket_dir / "nobody.sock"
    with pytest.raises(ServerUnavailable) as raised:
        await Transport(missing).get("status", Blob)
    assert raised.value.exit_code == 9
    assert str(raised.value) == (f"cannot reach fleet serve at {missing}: "
                                 "No such file or directory")
    refusing = socket_dir / "dead.sock"  # a crashed server's socket file: bound, not listening
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(refusing))
    try:
        with pytest.raises(ServerUnavailable, match="Connection refused"):
            await collect(Transport(refusing), "stream")
    finally:
        dead.close()


async def test_error_replies_raise_the_same_fleet_errors(socket_dir: Path) -> None:
    async def refuse(request: web.Request) -> web.Response:
        error: ConfigError = (PermissionDenied("not yours") if request.method == "POST"
                              else ConfigError("no task 4"))
        status, body = error_to_wire(error)
        return web.Response(status=status, body=encode(body), content_type="application/json")

    async with serving(socket_dir, {"refuse": refuse}) as path:
        transport = Transport(path)
        with pytest.raises(ConfigError, match="no task 4") as bad_input:
            await transport.get("refuse", Blob)
        with pytest.raises(PermissionDenied, match="not yours") as refused:
            await transport.post("refuse", {}, Blob)
        with pytest.raises(PermissionDenied):  # a stream refused before it starts
            [item async for item in transport.events("refuse", body={})]
    assert (bad_input.value.exit_code, refused.value.exit_code) == (2, 8)


async def test_a_server_gone_mid_stream_is_exit_9_after_what_it_sent(socket_dir: Path) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=EVENT_STREAM)
        await response.prepare(request)
        await response.write(frame("started", b"{}") + b"event: output\ndata: hal")
        assert request.transport is not None
        request.transport.abort()  # killed: the chunked body never ends
        return response

    received: list[tuple[str, bytes]] = []
    async with serving(socket_dir, {"stream": handler}) as path:
        with pytest.raises(ServerUnavailable, match="cannot reach fleet serve at") as raised:
            async for item in Transport(path).events("stream"):
                received.append(item)
    assert received == [("started", b"{}")]
    assert raised.value.exit_code == 9


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"data\": ",  # body cut short
    b"SSH-2.0-OpenSSH_9.2\r\n\r\n",  # not HTTP at all
    b"",  # hung up without a word
], ids=["short-body", "not-http", "silent"])
async def test_broken_replies_are_exit_9(socket_dir: Path, reply: bytes) -> None:
    async with raw_server(socket_dir, reply) as path:
        with pytest.raises(ServerUnavailable, match="cannot reach fleet serve at"):
            await Transport(path).get("status", Blob)


async def test_deadlines_silent_reply_and_idle_stream(socket_dir: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    released = asyncio.Event()  # the handlers stay silent until the test is done

    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.wait_for(released.wait(), 30)
        return web.Response()

    async def idle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=EVENT_STREAM)
        await response.prepare(request)
        await response.write(frame("submitted", b"{}"))
        await asyncio.wait_for(released.wait(), 30)
        return response

    monkeypatch.setattr(transport_module, "STREAM_IDLE_TIMEOUT_S", 0.3)
    async with serving(socket_dir, {"slow": slow, "idle": idle}) as path:
        transport = Transport(path)
        try:
            with pytest.raises(ServerUnavailable, match=r"no answer to GET slow within 0\.2s"):
                await transport.get("slow", Blob, timeout_s=0.2)
            with pytest.raises(ServerUnavailable, match=r"nothing from the server for 0\.3s"):
                await collect(transport, "idle")
        finally:
            released.set()


async def test_closing_a_stream_hangs_up_so_the_server_sees_the_client_go(
        socket_dir: Path) -> None:
    gone = asyncio.Event()

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=EVENT_STREAM)
        await response.prepare(request)
        try:
            with contextlib.suppress(ConnectionError):  # the write after the hang-up
                while True:  # as fleet.server.relay does: write, and look at the connection
                    await response.write(frame("output", b"{}"))
                    if request.transport is None or request.transport.is_closing():
                        break
                    await asyncio.sleep(0.02)
        finally:
            gone.set()
        return response

    async with serving(socket_dir, {"endless": endless}) as path:
        transport = Transport(path)
        async with contextlib.aclosing(transport.events("endless")) as stream:
            async for _event in stream:
                break
        await asyncio.wait_for(gone.wait(), 5)


async def test_query_parameters_arrive_as_sent(socket_dir: Path) -> None:
    async def echo(request: web.Request) -> web.Response:
        pairs = [(key, value) for key, value in request.query.items()]
        return web.Response(body=encode(Query(pairs)), content_type="application/json")

    async with serving(socket_dir, {"echo": echo}) as path:
        reply = await Transport(path).get("echo", Query, {
            "hosts": "gpu* @rack b&c=d+e", "states": ["running", "queued"], "follow": True,
            "limit": None, "since": 1.5})
    assert reply.pairs == [("hosts", "gpu* @rack b&c=d+e"), ("states", "running"),
                           ("states", "queued"), ("follow", "true"), ("since", "1.5")]
