"""`fleet serve --web` on the test bridge's (non-loopback) address: without the token a request is
refused with 401 and logged; the bearer header, or `?token=` once and then its cookie, let in.
`fleet web` shows the same pages on a local port, through the socket or over SSH."""

from __future__ import annotations

import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.netcluster import Cluster
from tests.web.conftest import (
    WebServer,
    fetch,
    free_port,
    start_web_server,
    visit,
    wait_until,
)

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
    # Under /run, which namespace hosts share (their /tmp is their own): `fleet web` reaches it
    # over SSH through gpu-a as through a head node.
    run_dir = Path(tempfile.mkdtemp(prefix="fleet-web-", dir="/run"))
    server = start_web_server(web_lab, module_dir, f"{address}:{free_port(address)}",
                              "--web-token-file", str(token_file),
                              ready_headers={"Authorization": f"Bearer {token}"},
                              socket_path=run_dir / "fleet.sock")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


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
    visit(browser, f"{bridge_server.url}?sort=free&token={token}")
    assert "token=" not in browser.current_url  # redirected without it
    assert "sort=free" in browser.current_url
    wait_until(lambda: browser.find_element("id", "conn").text == "live", 10,
               "the live stream connects with the cookie")
    cookie = browser.get_cookie("fleet_web")
    assert cookie is not None and cookie["httpOnly"] and cookie["value"] != token
    visit(browser, bridge_server.url + "hosts/gpu-a?window=5m")
    assert "History" in browser.page_source


@dataclass
class WebCommand:
    """A running `fleet web`: its process (stopped by pid) and the link it printed."""

    process: subprocess.Popen[str]
    url: str

    def stop(self) -> tuple[int, str]:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=15)
        assert self.process.stderr is not None
        return self.process.returncode, self.process.stderr.read()


def start_fleet_web(server: WebServer, target: str) -> WebCommand:
    """`fleet --server TARGET web --no-browser`; waits (bounded) for the link it prints."""
    process = subprocess.Popen(
        [sys.executable, "-m", "fleet.cli.main", "--server", target, "web", "--no-browser"],
        cwd=server.home, env=server.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    ready, _w, _x = select.select([process.stdout], [], [], 30)
    line = process.stdout.readline().strip() if ready else ""
    command = WebCommand(process, line)
    if not line.startswith("http://127.0.0.1:"):
        code, stderr = command.stop()
        raise AssertionError(f"fleet web printed {line!r}, exit {code}: {stderr}")
    return command


def _through_fleet_web(browser: Any, command: WebCommand) -> None:
    browser.delete_all_cookies()
    visit(browser, command.url)
    assert "token=" not in browser.current_url
    wait_until(lambda: browser.find_element("id", "conn").text == "live", 10,
               "the page through fleet web goes live")
    hosts = browser.find_elements("css selector", "tbody[data-host]")
    assert sorted(h.get_attribute("data-host") for h in hosts) == ["cpu1", "gpu-a", "gpu-b"]
    base = command.url.split("/web/", 1)[0]
    assert fetch(base + "/web/")[0] == 401  # the link's token, not the server's, opens it
    visit(browser, base + "/v1/status")
    assert "gpu-a" not in browser.page_source  # only the web view's pages are forwarded


def test_fleet_web_forwards_the_servers_socket_on_a_local_port(
        bridge_server: WebServer, browser: Any) -> None:
    command = start_fleet_web(bridge_server, str(bridge_server.socket_path))
    try:
        _through_fleet_web(browser, command)
    finally:
        code, stderr = command.stop()
    assert code == 0, stderr
    assert "web view closed" in stderr


def test_fleet_web_reaches_a_head_node_socket_over_ssh(
        bridge_server: WebServer, web_lab: Cluster, browser: Any) -> None:
    # The namespace hosts share this machine's /run: the socket is there for gpu-a's sshd too.
    ssh_dir = bridge_server.home / ".ssh"
    shutil.copy(web_lab.client_key, ssh_dir / "id_ed25519")
    (ssh_dir / "id_ed25519").chmod(0o600)
    head = web_lab.host("gpu-a")
    command = start_fleet_web(bridge_server,
                              f"ssh://root@{head.address}{bridge_server.socket_path}")
    try:
        _through_fleet_web(browser, command)
    finally:
        code, stderr = command.stop()
    assert code == 0, stderr


def test_a_web_address_in_use_is_exit_2_before_any_host_is_read(
        bridge_server: WebServer, module_dir: Path) -> None:
    address = bridge_server.url.split("/web/", 1)[0].removeprefix("http://")
    other = module_dir / "second"
    other.mkdir()
    env = {**bridge_server.env, "FLEET_DB": str(other / "fleet.db")}
    token_file = module_dir / "web-token"
    result = subprocess.run(
        [sys.executable, "-m", "fleet.cli.main", "serve", "--socket", str(other / "s.sock"),
         "--web", address, "--web-token-file", str(token_file)],
        cwd=bridge_server.home, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert f"--web: cannot listen on {address}" in result.stderr
    assert "connected to" not in result.stderr  # no host was contacted
