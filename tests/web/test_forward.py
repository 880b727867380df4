"""`fleet web`'s forwarder over a Unix socket (no root): only /web/ pages pass, each with the
run's token; streams pass as they are written; no server is exit 9."""

from __future__ import annotations

import asyncio
import gzip
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from fleet.errors import ServerUnavailable
from fleet.web.forward import Forwarder, forward
from tests.fixtures.cli import FleetCli

SECOND = web.AppKey("second", asyncio.Event)


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fwd-", dir="/tmp"))  # AF_UNIX paths are short
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def _stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b"event: rows\ndata: 1\n\n")
    await request.app[SECOND].wait()
    await response.write(b"event: rows\ndata: 2\n\n")
    return response


@pytest.fixture
async def upstream(socket_dir: Path) -> AsyncIterator[tuple[Path, asyncio.Event]]:
    """A stand-in for the server's socket: a page, a stylesheet, a stream, and /v1."""
    second = asyncio.Event()
    app = web.Application()
    app[SECOND] = second
    app.router.add_get("/web/", _overview)
    app.router.add_get("/web/static/fleet.css", _text("css"))
    app.router.add_get("/web/live", _stream)
    app.router.add_get("/web/packed", _packed)
    app.router.add_get("/v1/status", _text("the API"))
    runner = web.AppRunner(app)
    await runner.setup()
    path = socket_dir / "fleet.sock"
    await web.UnixSite(runner, str(path)).start()
    try:
        yield path, second
    finally:
        second.set()
        await runner.cleanup()


def _text(text: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(_request: web.Request) -> web.Response:
        return web.Response(text=text)

    return handler


async def _overview(request: web.Request) -> web.Response:
    return web.Response(text=f"overview {request.query.get('sort', '')}")


async def _packed(request: web.Request) -> web.Response:
    """A page gzip'ed when the request accepts it, as the web view's overview is."""
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        return web.Response(body=gzip.compress(b"packed page"),
                            headers={"Content-Encoding": "gzip"})
    return web.Response(text="packed page")


def _token(site: Forwarder) -> str:
    return site.url.split("token=", 1)[1]


async def test_pages_pass_with_the_token_and_nothing_else_does(
        upstream: tuple[Path, asyncio.Event]) -> None:
    socket_path, _second = upstream
    async with forward(socket_path, 0, "test") as site, aiohttp.ClientSession() as client:
        base = site.url.split("/web/", 1)[0]
        assert site.url.startswith("http://127.0.0.1:")
        async with client.get(f"{base}/web/") as refused:
            assert refused.status == 401
        auth = {"Authorization": f"Bearer {_token(site)}"}
        async with client.get(f"{base}/web/?sort=free", headers=auth) as page:
            assert page.status == 200 and await page.text() == "overview free"
            assert "Content-Security-Policy" in page.headers
        for path in ("/v1/status", "/web/%2e%2e/v1/status", "/web/../v1/status"):
            async with client.get(f"{base}{path}", headers=auth) as outside:
                assert outside.status in (401, 404), path
                assert "the API" not in await outside.text()
        async with client.post(f"{base}/web/", headers=auth) as posted:
            assert posted.status == 405


async def test_token_link_then_cookie_and_streams_pass_as_written(
        upstream: tuple[Path, asyncio.Event]) -> None:
    socket_path, second = upstream
    jar = aiohttp.CookieJar(unsafe=True)  # keeps cookies of IP-address hosts, as browsers do
    async with forward(socket_path, 0, "test") as site, \
            aiohttp.ClientSession(cookie_jar=jar) as client:
        async with client.get(site.url) as page:  # the printed link: redirect, then cookie
            assert page.status == 200 and await page.text() == "overview "
            assert "token" not in str(page.url)
        base = site.url.split("/web/", 1)[0]
        async with client.get(f"{base}/web/live") as stream:
            first = await asyncio.wait_for(stream.content.readuntil(b"\n\n"), 5)
            assert first == b"event: rows\ndata: 1\n\n"  # before the upstream wrote the rest
            second.set()
            assert await asyncio.wait_for(stream.content.readuntil(b"\n\n"), 5) == \
                b"event: rows\ndata: 2\n\n"


async def test_encoded_pages_pass_encoded_and_none_is_asked_for_unless_the_browser_does(
        upstream: tuple[Path, asyncio.Event]) -> None:
    socket_path, _second = upstream
    async with forward(socket_path, 0, "test") as site, \
            aiohttp.ClientSession(auto_decompress=False) as client:
        base = site.url.split("/web/", 1)[0]
        auth = {"Authorization": f"Bearer {_token(site)}"}
        async with client.get(f"{base}/web/packed",
                              headers={**auth, "Accept-Encoding": "gzip, br"}) as packed:
            assert packed.headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(await packed.read()) == b"packed page"
        async with client.get(f"{base}/web/packed", skip_auto_headers=["Accept-Encoding"],
                              headers=auth) as plain:
            assert "Content-Encoding" not in plain.headers
            assert await plain.read() == b"packed page"


async def test_no_server_on_the_socket_is_server_unavailable(socket_dir: Path) -> None:
    with pytest.raises(ServerUnavailable, match="no fleet serve answers"):
        async with forward(socket_dir / "absent.sock", 0, "test"):
            pass


async def test_fleet_web_without_any_server_exits_9(fleet_cli: FleetCli) -> None:
    result = await fleet_cli.run("--server", "local", "web", "--no-browser")
    assert result.returncode == 9
    assert "fleet web needs a fleet serve" in result.stderr
