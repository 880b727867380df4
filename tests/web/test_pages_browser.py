"""The real `fleet serve --web` over namespace hosts, in real headless Chromium: the overview lists
every host and GPU, hostile text stays text under the CSP, host detail draws its charts, bad
parameters get 4xx pages, and a GPU made hot turns hot on the open page without a reload."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.netcluster import Cluster
from tests.web.conftest import (
    HOSTILE_GPU_NAME,
    WebServer,
    browser_errors,
    fetch,
    visit,
    wait_until,
)

pytestmark = [pytest.mark.root, pytest.mark.slow]
# Where to save screenshots for the README (unset: none are written).
SCREENSHOTS = os.environ.get("FLEET_WEB_SCREENSHOTS")
SCRIPTS_OF_OVERVIEW = ["/web/static/live.js"]


def screenshot(driver: Any, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SCREENSHOTS) / f"web-{name}.png"))


def expand(driver: Any, host: str, index: int = 0) -> Any:
    """Expand `host` with the keyboard (Enter on its button); its GPU row `index`, once filled."""
    driver.find_element("css selector", f'tbody[data-host="{host}"] button.expand').send_keys(
        "\n")
    return wait_until(lambda: next(row for row in driver.find_elements(
        "css selector", f'tr[data-gpu="{host}:{index}"]') if row.get_attribute("data-tone")
        and row.find_element("css selector", '[data-c="state"]').text), 5,
        f"{host}:{index} shown")


def open_page(driver: Any, url: str) -> None:
    visit(driver, url)
    wait_until(lambda: driver.find_element("id", "conn").text == "live", 10,
               "the page's live stream connects")


def test_overview_lists_every_host_and_gpu_and_expands(
        web_server: WebServer, web_lab: Cluster, browser: Any) -> None:
    open_page(browser, web_server.url)
    hosts = browser.find_elements("css selector", "tbody[data-host]")
    assert sorted(h.get_attribute("data-host") for h in hosts) == ["cpu1", "gpu-a", "gpu-b"]
    assert not browser.find_elements("css selector", "tr[data-gpu]")  # until a host is expanded

    # Keyboard only: "Show all GPUs" is a button; press it with the space bar.
    expand_all = browser.find_element("id", "expand-all")
    expand_all.send_keys(" ")
    wait_until(lambda: sorted(row.get_attribute("data-gpu") for row in browser.find_elements(
        "css selector", "tr[data-gpu]") if row.is_displayed()) == ["gpu-a:0", "gpu-a:1",
                                                                    "gpu-b:0"],
        5, "every GPU row shown")
    gpu_a = browser.find_element("css selector", 'tbody[data-host="gpu-a"] tr.host')
    assert "2/2" in gpu_a.text and "up" in gpu_a.text
    cpu1 = browser.find_element("css selector", 'tbody[data-host="cpu1"] tr.host')
    assert "0/0" in cpu1.text
    wait_until(lambda: "free" in browser.find_element("css selector",
                                                      'tr[data-gpu="gpu-a:0"]').text,
               3, "gpu-a:0 filled in")
    assert "NVIDIA A100" in browser.find_element("css selector", 'tr[data-gpu="gpu-a:0"]').text
    screenshot(browser, "overview")
    assert not [e for e in browser_errors(browser) if "favicon" not in e]


def test_hostile_gpu_name_is_text_no_script_runs_and_csp_is_sent(
        web_server: WebServer, browser: Any) -> None:
    status, headers, body = fetch(web_server.url + "hosts/gpu-b")
    assert status == 200
    policy = headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "<script>alert" not in body  # escaped by the template
    assert "&lt;script&gt;alert(&#34;gpu&#34;)&lt;/script&gt;" in body

    open_page(browser, web_server.url)  # the overview's GPU rows come from the live stream
    expand(browser, "gpu-b")
    name_cell = browser.find_element("css selector", 'tr[data-gpu="gpu-b:0"] [data-c="name"]')
    wait_until(lambda: name_cell.get_attribute("textContent") == HOSTILE_GPU_NAME, 5,
               "the hostile name shown as text")
    scripts = [s.get_attribute("src") for s in browser.find_elements("css selector", "script")]
    assert [src.split("/", 3)[3] for src in scripts] == [p.lstrip("/") for p in
                                                         SCRIPTS_OF_OVERVIEW]
    assert browser.execute_script("return document.querySelectorAll('script:not([src])').length"
                                  ) == 0
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 (reading it is the check)

    # Host detail: the same name inside its JSON chart data stays inert too.
    visit(browser, web_server.url + "hosts/gpu-b?window=5m")
    assert browser.find_element("css selector", '[data-c="name"]').get_attribute(
        "textContent") == HOSTILE_GPU_NAME
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018


def test_overview_is_a_table_to_assistive_technology(
        web_server: WebServer, browser: Any) -> None:
    # Its rows are laid out as grids (off-screen hosts skip layout): the semantics must stay.
    open_page(browser, web_server.url)
    browser.execute_cdp_cmd("Accessibility.enable", {})
    try:
        nodes = browser.execute_cdp_cmd("Accessibility.getFullAXTree", {})["nodes"]
    finally:
        browser.execute_cdp_cmd("Accessibility.disable", {})
    roles = [node.get("role", {}).get("value") for node in nodes if not node.get("ignored")]
    assert roles.count("table") == 1
    assert roles.count("columnheader") == 10
    assert roles.count("rowheader") == 3  # one per host, its name
    assert roles.count("row") == 4  # the header row and the hosts'


def test_host_detail_draws_history_charts_with_points(
        web_server: WebServer, web_lab: Cluster, browser: Any) -> None:
    time.sleep(1.5)  # a few 0.25 s samples reach the database (the monitor writes in batches)
    visit(browser, web_server.url + "hosts/gpu-a?window=5m")
    charts = browser.find_element("id", "charts")
    points = wait_until(lambda: int(charts.get_attribute("data-points") or 0), 10,
                        "the charts have points")
    assert points > 0
    canvases = browser.find_elements("css selector", "#charts canvas")
    assert len(canvases) == 3  # utilisation, temperature, memory
    painted = browser.execute_script(
        "const c = arguments[0]; const d = c.getContext('2d').getImageData(0, 0, c.width, "
        "c.height).data; let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; "
        "return n;", canvases[0])
    assert painted > 100
    assert "Facts" in browser.page_source and "Recent events" in browser.page_source

    # Live: a reading that changes adds points to the open charts, without a reload.
    from fleet.sim import scenarios

    busier = scenarios.idle(2, host="gpu-a")
    busier.gpus[0].utilization_gpu_pct = 55
    web_lab.host("gpu-a").set_gpus(busier)
    try:
        wait_until(lambda: int(charts.get_attribute("data-points") or 0) > points, 5,
                   "the charts take the live readings")
        util = browser.find_element("css selector", 'tr[data-gpu="gpu-a:0"] [data-c="util"]')
        wait_until(lambda: util.text == "55 %", 5, "the GPU row shows the new reading")
        screenshot(browser, "host-detail")
    finally:
        web_lab.host("gpu-a").set_gpus(scenarios.idle(2, host="gpu-a"))
    assert not [e for e in browser_errors(browser) if "favicon" not in e]


def plant_rollups(server: WebServer, host: str, index: int, days_ago: float,
                  util: float) -> None:
    """Half an hour of 1-minute rollups of one GPU, `days_ago` back, with no raw samples, and
    its minute of two minutes ago, where a running server's retention pass has rolled up to."""
    now_minute_ms = int(time.time()) // 60 * 60_000
    start_ms = now_minute_ms - int(days_ago * 86400) * 1000
    minutes = [start_ms + 60_000 * minute for minute in range(30)] + [now_minute_ms - 120_000]
    with contextlib.closing(sqlite3.connect(server.env["FLEET_DB"], timeout=10)) as db, db:
        [gpu_id] = db.execute("SELECT gpus.id FROM gpus JOIN hosts ON hosts.id = gpus.host_id "
                              "WHERE hosts.name = ? AND gpus.idx = ?", (host, index)).fetchone()
        db.executemany(
            "INSERT OR REPLACE INTO gpu_samples_1m (gpu_id, bucket_ts, samples, util_avg, "
            "util_max, mem_used_max, temp_avg, temp_max, power_avg, power_max) "
            "VALUES (?, ?, 60, ?, ?, NULL, 50, 50, 100, 100)",
            [(gpu_id, minute_ms, util, util) for minute_ms in minutes])


@pytest.mark.parametrize(("window", "span_s", "shows_rollups"), [
    ("1d", 86400, False), ("7d", 7 * 86400, True)])
def test_long_windows_span_their_days_and_draw_rolled_up_history(
        web_server: WebServer, browser: Any, window: str, span_s: int,
        shows_rollups: bool) -> None:
    plant_rollups(web_server, "gpu-a", 0, days_ago=3, util=77.0)  # raw samples long pruned
    visit(browser, web_server.url + f"hosts/gpu-a?window={window}")
    data = json.loads(browser.find_element("id", "chart-data").get_attribute("textContent"))
    assert data["until"] - data["since"] == span_s
    [gpu0] = [gpu for gpu in data["gpus"] if gpu["index"] == 0]
    old = [util for ts, util in zip(gpu0["ts"], gpu0["util"], strict=True)
           if ts < data["until"] - 2 * 86400]
    assert old == ([77.0] * len(old) if shows_rollups else [])
    assert bool(old) is shows_rollups
    charts = browser.find_element("id", "charts")
    wait_until(lambda: int(charts.get_attribute("data-points") or 0), 10, "the charts have points")
    assert len(browser.find_elements("css selector", "#charts canvas")) == 3
    current = browser.find_element("css selector", '.windows a[aria-current="page"]')
    assert current.text == window
    assert not [e for e in browser_errors(browser) if "favicon" not in e]


@pytest.mark.parametrize(("path", "status", "words"), [
    ("hosts/no-such-host", 404, "no host named"),
    ("hosts/gpu-a?window=3w", 400, "unknown window"),
    ("?sort=bogus", 400, "unknown sort"),
    ("events?severity=loud", 400, "unknown severity"),
    ("events?host=no-such-host", 400, "no-such-host"),
    ("tasks?state=sleeping", 400, "unknown task state"),
    ("tasks/999999", 400, "999999"),
    ("usage?by=planet", 400, "unknown grouping"),
    ("usage?window=1y", 400, "unknown window"),
    ("nothing-here", 404, "Not Found"),
])
def test_bad_parameters_get_a_clear_4xx_page(web_server: WebServer, path: str, status: int,
                                             words: str) -> None:
    got, headers, body = fetch(web_server.url + path)
    assert got == status, body
    assert headers["Content-Type"].startswith("text/html")
    assert words in body
    assert "Traceback" not in body
    assert "Content-Security-Policy" in headers


def test_filter_uses_the_hosts_pattern_syntax(web_server: WebServer) -> None:
    _status, _headers, body = fetch(web_server.url + "?hosts=gpu-*,!gpu-b")
    assert 'data-host="gpu-a"' in body
    assert 'data-host="gpu-b"' not in body and 'data-host="cpu1"' not in body


def test_gpu_made_hot_turns_hot_on_the_open_page_within_3s(
        web_server: WebServer, web_lab: Cluster, browser: Any) -> None:
    from fleet.sim import scenarios

    open_page(browser, web_server.url)
    row = expand(browser, "gpu-a", 1)
    assert row.get_attribute("data-tone") == "ok"
    browser.execute_script("window.fleetNotReloaded = true")

    web_lab.host("gpu-a").set_gpus(scenarios.hot_gpu(2, 1, temperature_c=95, host="gpu-a"))
    started = time.monotonic()
    wait_until(lambda: row.get_attribute("data-tone") == "hot", 3.0, "gpu-a:1 shown hot")
    elapsed = time.monotonic() - started
    state = row.find_element("css selector", '[data-c="state"]').get_attribute("textContent")
    assert state == "hot"
    assert browser.execute_script("return window.fleetNotReloaded") is True
    host = browser.find_element("css selector", 'tbody[data-host="gpu-a"]')
    wait_until(lambda: host.get_attribute("data-hot") == "hot", 3.0, "gpu-a marked hot")
    assert "95 °C" in host.find_element("css selector", "tr.host").get_attribute("textContent")
    print(f"hot on the page {elapsed:.2f}s after the simulated config changed")


def test_gpu_gone_from_its_host_leaves_the_open_page_and_comes_back(
        web_server: WebServer, web_lab: Cluster, browser: Any) -> None:
    from fleet.sim import scenarios

    def shown() -> list[str]:
        return [row.get_attribute("data-gpu") for row in browser.find_elements(
            "css selector", 'tbody[data-host="gpu-a"] tr[data-gpu]')]

    open_page(browser, web_server.url)
    expand(browser, "gpu-a", 1)
    browser.execute_script("window.fleetNotReloaded = true")
    web_lab.host("gpu-a").set_gpus(scenarios.idle(1, host="gpu-a"))  # GPU 1 fell off the bus
    try:
        wait_until(lambda: shown() == ["gpu-a:0"], 5, "gpu-a:1's row leaves the page")
        free = browser.find_element("css selector", 'tbody[data-host="gpu-a"] [data-c="free"]')
        wait_until(lambda: free.text.endswith("/1"), 5, "gpu-a counts one GPU")
    finally:
        web_lab.host("gpu-a").set_gpus(scenarios.idle(2, host="gpu-a"))
    wait_until(lambda: shown() == ["gpu-a:0", "gpu-a:1"], 5, "gpu-a:1's row comes back")
    assert browser.execute_script("return window.fleetNotReloaded") is True


def test_page_says_reconnecting_while_the_server_is_gone_and_catches_up(
        web_server: WebServer, web_lab: Cluster, browser: Any) -> None:
    from fleet.sim import scenarios
    from tests.web.conftest import restart_web_server

    open_page(browser, web_server.url)
    browser.execute_script("window.fleetNotReloaded = true")
    row = expand(browser, "gpu-b", 0)
    assert row.get_attribute("data-tone") == "ok"
    conn = browser.find_element("id", "conn")

    web_server.stop()
    wait_until(lambda: conn.text == "reconnecting…", 5, "the page says it lost the server")
    hot = scenarios.hot_gpu(1, 0, temperature_c=96, host="gpu-b")
    hot.gpus[0].name = HOSTILE_GPU_NAME
    web_lab.host("gpu-b").set_gpus(hot)  # changes while no server watches
    restart_web_server(web_server, [host.name for host in web_lab.hosts])

    wait_until(lambda: conn.text == "live", 20, "the page reconnects by itself")
    wait_until(lambda: row.get_attribute("data-tone") == "hot", 5, "it catches up: gpu-b:0 hot")
    assert browser.execute_script("return window.fleetNotReloaded") is True


def test_phone_width_and_dark_preference(web_server: WebServer, browser: Any) -> None:
    browser.set_window_size(390, 844)
    try:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {
            "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        open_page(browser, web_server.url)
        # The page itself never scrolls sideways: the wide table scrolls in its own box.
        assert browser.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth") is True
        scroller = browser.find_element("css selector", ".scroll")
        assert browser.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth",
                                      scroller) is True
        background = browser.execute_script(
            "return getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(17, 20, 24)"  # the dark palette's --bg
        screenshot(browser, "overview-phone-dark")
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        browser.set_window_size(1366, 768)


def test_the_browser_sees_no_link_this_machine_adds(browser: Any) -> None:
    """Chromium and chromedriver run in a namespace with only loopback, so namespace links that
    other tests add here are no network change to them (ERR_NETWORK_CHANGED aborts requests)."""
    from tests.cluster.netns import namespace_pids, run_ip

    network = browser.fleet_network
    inside = namespace_pids([network.name])
    names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in inside}
    assert "chromedriver" in names and any(name.startswith("chrom") and name != "chromedriver"
                                           for name in names), names
    links = run_ip(["-n", network.name, "-o", "link", "show"], capture=True).splitlines()
    assert [line.split(":")[1].strip() for line in links] == ["lo"]
