"""`fleet serve --web` on the test bridge's (non-loopback) address: without the token a request is
refused with 401 and logged; the bearer header, or `?token=` once and then its cookie, let in."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.netcluster import Cluster
from tests.web.conftest import WebServer, fetch, free_port, start_web_server, wait_until

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture(scope="module")
def token() -> str:
    return secrets.token_urlsafe(24)


@pytest.fixture(scope="module")
def bridge_server(web_lab: Cluster, module_dir: Path, token: str) -> Iterator[WebServer]:
    """A server whose web view listens on this machine's address on the test bridge."""
    token_file = module_dir / "web-token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    address = web_lab.controller_address
    server = start_web_server(web_lab, module_dir, f"{address}:{free_port(address)}",
                              "--web-token-file", str(token_file),
                              ready_headers={"Authorization": f"Bearer {token}"})
    try:
        yield server
    finally:
        server.stop()


def test_without_the_token_the_answer_is_401_and_logged(bridge_server: WebServer) -> None:
    for path in ("", "live", "static/live.js", "hosts/gpu-a", "tasks"):
        status, headers, body = fetch(bridge_server.url + path)
        assert status == 401, path
        assert "token" in body and "gpu-a" not in body
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert "Content-Security-Policy" in headers
    wrong, _headers, _body = fetch(bridge_server.url, {"Authorization": "Bearer not-it"})
    assert wrong == 401
    bad_cookie, _headers, _body = fetch(bridge_server.url, {"Cookie": "fleet_web=forged"})
    assert bad_cookie == 401
    assert "web: refused GET /web/ from" in bridge_server.log()


def test_bearer_token_lets_in(bridge_server: WebServer, token: str) -> None:
    status, _headers, body = fetch(bridge_server.url, {"Authorization": f"Bearer {token}"})
    assert status == 200 and 'data-host="gpu-a"' in body


def test_token_link_sets_a_cookie_and_the_page_goes_live(
        bridge_server: WebServer, token: str, browser: Any) -> None:
    browser.delete_all_cookies()
    browser.get(f"{bridge_server.url}?sort=free&token={token}")
    assert "token=" not in browser.current_url  # redirected without it
    assert "sort=free" in browser.current_url
    wait_until(lambda: browser.find_element("id", "conn").text == "live", 10,
               "the live stream connects with the cookie")
    cookie = browser.get_cookie("fleet_web")
    assert cookie is not None and cookie["httpOnly"] and cookie["value"] != token
    browser.get(bridge_server.url + "hosts/gpu-a?window=5m")
    assert "History" in browser.page_source
