"""Fixtures: per module, one namespace cluster, one real `fleet serve --web` over it and one
headless Chromium (Debian's chromium + chromium-driver, driven by selenium). Root only."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netcluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
START_DEADLINE_S = 40.0
STOP_DEADLINE_S = 15.0
# A GPU name a hostile or broken host might report: markup and quotes (the simulated library
# stores no control characters; terminal escapes are tested in task output).
HOSTILE_GPU_NAME = '<script>alert("gpu")</script>"q\'s&amp;'


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@dataclass
class WebServer:
    """A started `fleet serve --web`: its process (stopped by its pid), URL, socket and home."""

    process: subprocess.Popen[bytes]
    url: str  # ends with /web/
    socket_path: Path
    home: Path
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=STOP_DEADLINE_S)

    def cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """The real CLI, as a client of this server's socket."""
        return subprocess.run([sys.executable, "-m", "fleet.cli.main", "--server",
                               str(self.socket_path), *args], cwd=self.home, env=self.env,
                              capture_output=True, text=True, timeout=timeout, check=False)


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) of a GET, 4xx/5xx included."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def client_home(lab: Cluster, base: Path) -> tuple[Path, dict[str, str]]:
    """A HOME trusting the cluster's host keys, with a fast monitor; the env to run fleet in."""
    home = base / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    shutil.copy(lab.known_hosts_file, home / ".ssh" / "known_hosts")
    config = home / ".config" / "fleet" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("monitor:\n  interval: 0.25\n")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("FLEET_", "XDG_"))}
    env.update({"HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share"),
                "XDG_CONFIG_HOME": str(home / ".config"), "XDG_RUNTIME_DIR": str(base / "run"),
                "FLEET_DB": str(base / "fleet.db"), "FLEET_INVENTORY": str(lab.inventory_file),
                "PYTHONPATH": str(ROOT)})
    (base / "run").mkdir(mode=0o700)
    return home, env


def start_web_server(lab: Cluster, base: Path, web_address: str, *extra: str,
                     ready_headers: dict[str, str] | None = None,
                     socket_path: Path | None = None) -> WebServer:
    """`fleet serve --web ADDRESS` over `lab`; waits (bounded) until the page shows all hosts."""
    home, env = client_home(lab, base)
    socket_path = socket_path or base / "fleet.sock"
    log_path = base / "serve.log"
    argv = [sys.executable, "-m", "fleet.cli.main", "--inventory", str(lab.inventory_file),
            "serve", "--accept-new", "--socket", str(socket_path), "--web", web_address, *extra]
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(argv, cwd=home, env=env, stdin=subprocess.DEVNULL,
                                   stdout=log_file, stderr=log_file)
    host, _, port = web_address.rpartition(":")
    server = WebServer(process, f"http://{host}:{port}/web/", socket_path, home, log_path, env)
    try:
        wait_all_up(server, [host.name for host in lab.hosts], ready_headers)
    except BaseException:
        server.stop()
        raise
    return server


def restart_web_server(server: WebServer, names: Sequence[str]) -> None:
    """Start the (stopped) server again with the same arguments, port, socket and database."""
    assert server.process.poll() is not None
    with open(server.log_path, "ab") as log_file:
        server.process = subprocess.Popen(server.process.args, cwd=server.home, env=server.env,
                                          stdin=subprocess.DEVNULL, stdout=log_file,
                                          stderr=log_file)
    wait_all_up(server, names)


def wait_all_up(server: WebServer, names: Sequence[str],
                headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    last = ""
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"fleet serve exited {server.process.returncode}: {server.log()}")
        try:
            status, _headers, body = fetch(server.url + "?sort=name", headers)
        except OSError as exc:
            last = str(exc)
        else:
            last = f"{status}"
            if status == 200 and all(f'data-host="{name}"' in body for name in names) \
                    and 'data-fresh="unknown"' not in body:
                return
        time.sleep(0.2)
    raise AssertionError(f"web view not ready in {START_DEADLINE_S}s ({last}): {server.log()}")


@pytest.fixture(scope="module")
def module_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fw-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _chromium_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root: network namespaces, and Debian's chromium (make system-deps)"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            return f"{path} is missing: apt-get install chromium chromium-driver"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="module")
def browser(web_lab: Cluster) -> Iterator[Any]:
    """Headless Chromium at 1366×768, through the system chromedriver, both in a network
    namespace of their own that reaches loopback and the test bridge's address here."""
    missing = _chromium_missing()
    if missing:
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from tests.web.browser_netns import BrowserNetwork

    network = BrowserNetwork([web_lab.controller_address])
    scripts = Path(tempfile.mkdtemp(prefix="fb-", dir="/tmp"))
    try:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1366,768",
                         "--no-first-run", "--disable-extensions"):
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        # TMPDIR: Chromium's singleton-socket directory (org.chromium.Chromium.*), which it
        # leaves behind when chromedriver ends it, goes into `scripts`, removed below.
        service = Service(str(network.wrapper(scripts, CHROMEDRIVER)),
                          port=network.expose_inside(), env={**os.environ, "TMPDIR": str(scripts)})
        driver = webdriver.Chrome(options=options, service=service)
        driver.fleet_network = network  # visit() opens a forward for each server it goes to
        driver.set_page_load_timeout(30)
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        network.close()
        shutil.rmtree(scripts, ignore_errors=True)


def wait_until(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll `check` (bounded) until it returns something truthy; AssertionError naming `what`."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # the element may not exist yet
            last = exc
        else:
            if last:
                return last
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s}s (last: {last!r})")


def visit(driver: Any, url: str) -> None:
    """Open `url` in the browser (its namespace reaches the URL's server through a forward)."""
    driver.fleet_network.expose(url)
    driver.get(url)


def browser_errors(driver: Any) -> list[str]:
    """Console errors the page logged (a CSP violation shows up here)."""
    return [entry["message"] for entry in driver.get_log("browser")
            if entry.get("level") == "SEVERE"]


def json_of(text: str) -> Any:
    return json.loads(text)


@pytest.fixture(scope="module")
def web_lab(netns_cluster_module: Callable[[Sequence[ClusterHostSpec]], Cluster]) -> Cluster:
    """Three hosts: gpu-a (2 idle GPUs), gpu-b (one GPU with a hostile name), cpu1 (no driver)."""
    from fleet.sim import scenarios

    hostile = scenarios.idle(1, host="gpu-b")
    hostile.gpus[0].name = HOSTILE_GPU_NAME
    return netns_cluster_module([ClusterHostSpec("gpu-a", scenarios.idle(2, host="gpu-a")),
                                 ClusterHostSpec("gpu-b", hostile), ClusterHostSpec("cpu1")])


@pytest.fixture(scope="module")
def web_server(web_lab: Cluster, module_dir: Path) -> Iterator[WebServer]:
    """`fleet serve --web 127.0.0.1:PORT` over `web_lab` (loopback: no token)."""
    server = start_web_server(web_lab, module_dir, f"127.0.0.1:{free_port()}")
    try:
        yield server
    finally:
        server.stop()
