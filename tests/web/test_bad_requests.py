"""Hostile and broken requests on `--web`'s token-guarded TCP port: bytes that are not UTF-8 in
the token's headers, `?token=` links that would redirect off the site, paths outside /web/,
connections that send nothing or half a request, and more connections than the port takes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from fleet.server import app as server_app
from fleet.snapshot import FleetSnapshot
from fleet.web import listen
from fleet.web.site import WebView

if TYPE_CHECKING:
    from fleet.service import Fleet

TOKEN = "s3cret-token-of-enough-length"
READ_TIMEOUT_S = 5.0


async def _no_snapshots() -> AsyncIterator[FleetSnapshot]:
    await asyncio.Event().wait()  # a monitor that never publishes (the view is closed first)
    yield cast(FleetSnapshot, None)


@pytest.fixture
async def port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    """A real `--web 127.0.0.1:0` listener with a token; its deadlines 0.5 s, its cap 4."""
    monkeypatch.setattr(server_app, "IDLE_TIMEOUT_S", 0.5, raising=False)
    monkeypatch.setattr(listen, "MAX_CONNECTIONS", 4)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    view = WebView(cast("Fleet", object()), snapshots=_no_snapshots)
    await view.start("127.0.0.1:0", token_file)
    assert view.url is not None
    try:
        yield int(view.url.rsplit(":", 1)[1].split("/", 1)[0])
    finally:
        await view.close()


async def _exchange(port: int, data: bytes) -> bytes:
    """What the server sends back to `data` until it closes (bounded in time)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        return await asyncio.wait_for(reader.read(), READ_TIMEOUT_S)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _head(reply: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split(" ")[1]), headers, body


def _get(path: str, *headers: bytes) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
            + b"".join(header + b"\r\n" for header in headers) + b"\r\n")


@pytest.mark.parametrize("header", [b"Authorization: Bearer \xe9", b"Cookie: fleet_web=\xff",
                                    b"Authorization: Bearer \xff\xfe" + TOKEN.encode()])
async def test_auth_headers_that_are_not_utf8_are_refused_401(
        port: int, header: bytes, caplog: pytest.LogCaptureFixture) -> None:
    status, headers, body = _head(await _exchange(port, _get("/web/", header)))
    assert status == 401, body
    assert headers["Content-Type"].startswith("text/html")
    assert "Traceback" not in caplog.text and "Error handling request" not in caplog.text


@pytest.mark.parametrize(("target", "location"), [
    ("//evil.example/", "/web/"),
    ("/\\evil.example/", "/web/"),
    ("///evil.example/x?a=1", "/web/"),
    ("/%2F/evil.example/", "/%2F/evil.example/"),  # one '/', then an escaped one: a path here
    ("/web/?sort=free", "/web/?sort=free"),
    ("/web/hosts/gpu-a", "/web/hosts/gpu-a"),
])
async def test_the_token_link_redirects_only_within_this_site(port: int, target: str,
                                                              location: str) -> None:
    joiner = "&" if "?" in target else "?"
    status, headers, _body = _head(await _exchange(port, _get(f"{target}{joiner}token={TOKEN}")))
    assert status == 303
    assert headers["Location"] == location
    assert headers["Set-Cookie"].startswith("fleet_web=")


@pytest.mark.parametrize("path", ["/v1/whoami", "/metrics", "/status", "/web/static/nope.js"])
async def test_paths_outside_web_are_the_sites_html_404(port: int, path: str) -> None:
    bearer = f"Authorization: Bearer {TOKEN}".encode()
    status, headers, body = _head(await _exchange(port, _get(path, bearer)))
    inside = _head(await _exchange(port, _get("/web/no/such/page", bearer)))
    assert status == inside[0] == 404
    assert headers["Content-Type"] == inside[1]["Content-Type"] == "text/html; charset=utf-8"
    assert b"<h1>404 Not Found</h1>" in body and headers["Content-Security-Policy"]


@pytest.mark.parametrize("sent", [b"", b"GET /web/ HTTP/1.1\r\nHost: x\r\n"])
async def test_connections_that_send_no_whole_request_are_closed(port: int, sent: bytes) -> None:
    started = time.monotonic()
    reply = await _exchange(port, sent)  # READ_TIMEOUT_S: TimeoutError if left open
    assert reply == b""
    assert time.monotonic() - started < 3


async def test_connections_over_the_cap_get_503_and_the_port_serves_again_after(
        port: int) -> None:
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
    try:
        status, headers, body = _head(await _exchange(port, _get("/web/")))
        assert status == 503 and headers["Connection"] == "close"
        assert body == b"too many open connections\n"
    finally:
        for _reader, writer in idle:
            writer.close()
    deadline = time.monotonic() + READ_TIMEOUT_S  # until the server has seen them close
    status = 503
    while status == 503 and time.monotonic() < deadline:
        status = _head(await _exchange(port, _get("/web/")))[0]
        await asyncio.sleep(0.05)
    assert status == 401
