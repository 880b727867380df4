"""The web view's token rule: loopback needs none; elsewhere a token file (0600) must exist, and
requests show it as a bearer header or a signed cookie (set by one `?token=` visit)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from fleet.errors import ConfigError
from fleet.web.auth import COOKIE, cookie_value, read_token, token_middleware, web_bind
from fleet.web.errors import security_headers
from tests.fixtures.cli import FleetCli

TOKEN = "s3cret-token-of-enough-length"


def token_file(tmp_path: Path, text: str = TOKEN, mode: int = 0o600) -> Path:
    path = tmp_path / "token"
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


def test_loopback_needs_no_token_other_addresses_do(tmp_path: Path) -> None:
    assert web_bind("127.0.0.1:8080", None).token is None
    assert web_bind("[::1]:0", None).host == "::1"
    with pytest.raises(ConfigError, match=r"not a loopback address.*--web-token-file"):
        web_bind("0.0.0.0:8080", None)
    assert web_bind("0.0.0.0:8080", token_file(tmp_path)).token == TOKEN


@pytest.mark.parametrize(("text", "mode", "words"), [
    (TOKEN, 0o644, "readable by others"),
    ("short", 0o600, "expected one token"),
    ("two words are not one token", 0o600, "expected one token"),
])
def test_unusable_token_files_are_refused(tmp_path: Path, text: str, mode: int,
                                          words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        read_token(token_file(tmp_path, text, mode))
    with pytest.raises(ConfigError, match="No such file"):
        read_token(tmp_path / "missing")


@pytest.fixture
async def client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=f"page {request.query.get('sort', '')}")

    app = web.Application(middlewares=[security_headers, token_middleware(TOKEN)])
    app.router.add_get("/web/", page)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        yield test_client


async def test_requests_without_the_token_get_401_and_are_logged(
        client: TestClient[web.Request, web.Application],
        caplog: pytest.LogCaptureFixture) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": f"{COOKIE}=forged"}):
        reply = await client.get("/web/", headers=headers)
        assert reply.status == 401
        assert "Content-Security-Policy" in reply.headers
    assert (await client.get("/web/?token=wrong")).status == 401
    assert "web: refused GET /web/ from 127.0.0.1: no valid token" in caplog.text


async def test_bearer_and_cookie_let_in_and_the_token_link_redirects_without_it(
        client: TestClient[web.Request, web.Application]) -> None:
    reply = await client.get("/web/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert reply.status == 200
    link = await client.get(f"/web/?sort=free&token={TOKEN}", allow_redirects=False)
    assert link.status == 303
    assert link.headers["Location"] == "/web/?sort=free"
    cookie = link.cookies[COOKIE]
    assert cookie.value == cookie_value(TOKEN) != TOKEN
    assert cookie["httponly"] and cookie["samesite"] == "Strict"
    followed = await client.get("/web/?sort=free", headers={"Cookie": f"{COOKIE}={cookie.value}"})
    assert followed.status == 200 and await followed.text() == "page free"


async def test_serve_refuses_a_non_loopback_web_address_without_a_token_before_starting(
        fleet_cli: FleetCli) -> None:
    started = time.monotonic()
    result = await fleet_cli.run("serve", "--web", "192.0.2.10:8080")
    assert result.returncode == 2
    assert "not a loopback address" in result.stderr and "--web-token-file" in result.stderr
    assert time.monotonic() - started < 20  # refused at once, no host probed
