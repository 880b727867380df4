"""Tasks, allocations and events pages in headless Chromium over a real `fleet serve --web`: a task
dispatched through the server has its log streamed onto the open page as it is written, its
hostile output and name shown as text."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import WebServer, browser_errors, visit, wait_until
from tests.web.test_pages_browser import screenshot

pytestmark = [pytest.mark.root, pytest.mark.slow]
HOSTILE_TASK_NAME = "<img src=x onerror=alert(1)>job"
# Prints a line every 0.4 s, then markup, a terminal escape and bytes that are not UTF-8.
TALKER = """
import sys, time
for i in range(8):
    print(f"line {i}", flush=True)
    time.sleep(0.4)
sys.stdout.buffer.write(b"<script>alert('log')</script> \\x1b[31mred\\x1b[0m \\xff\\xfe end\\n")
sys.stdout.flush()
"""


def dispatch(server: WebServer, tmp_path: Path) -> int:
    script = tmp_path / "talker.py"
    script.write_text(TALKER)
    # Just after the server starts, its database may not have every host's first outcome and
    # GPUs yet (the monitor writes in batches), and a detached dispatch needs them there.
    deadline = time.monotonic() + 15
    while True:
        result = server.cli("--json", "dispatch", "--detach", "--name", HOSTILE_TASK_NAME,
                            str(script))
        not_recorded_yet = ("host is unknown" in result.stderr
                            or "in the database" in result.stderr)
        if result.returncode == 0 or not not_recorded_yet or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert result.returncode == 0, result.stderr
    return int(json.loads(result.stdout)["task_id"])


def test_task_log_streams_onto_the_open_page(web_server: WebServer, browser: Any,
                                             tmp_path: Path) -> None:
    task_id = dispatch(web_server, tmp_path)
    visit(browser, f"{web_server.url}tasks/{task_id}")
    log = browser.find_element("id", "log")
    # Lines arrive while the task runs: an early line is shown before the last one is written.
    early = wait_until(lambda: "line 1" in log.get_attribute("textContent")
                       and log.get_attribute("textContent"), 20, "the first lines stream in")
    assert "line 7" not in early
    status = browser.find_element("id", "log-status")
    wait_until(lambda: status.text.startswith("ended:"), 20, "the stream reports the end")
    assert status.text == "ended: succeeded (exit 0)"
    text = log.get_attribute("textContent")
    assert [f"line {i}" for i in range(8)] == text.splitlines()[:8]
    assert "<script>alert('log')</script> ?[31mred?[0m \ufffd\ufffd end" in text
    assert browser.execute_script("return document.querySelectorAll('#log *').length") == 0
    heading = browser.find_element("css selector", "h1 small")
    assert heading.get_attribute("textContent") == HOSTILE_TASK_NAME
    assert not browser.find_elements("css selector", "main img")
    assert browser.find_element("id", "task-state").text == "succeeded"
    assert browser.find_element("id", "task-ended").text.startswith("20")  # its end time
    screenshot(browser, "task-log")
    assert not [e for e in browser_errors(browser) if "favicon" not in e]

    visit(browser, f"{web_server.url}tasks")
    row = browser.find_element("css selector", "table.tasks tbody tr")
    assert row.get_attribute("data-state") == "succeeded"
    assert HOSTILE_TASK_NAME in row.get_attribute("textContent")
    screenshot(browser, "tasks")

    visit(browser, f"{web_server.url}usage?window=1d&by=user")
    cells = [cell.text for cell in browser.find_elements("css selector",
                                                         "table.usage tbody tr td")]
    headers = [cell.text for cell in browser.find_elements("css selector", "table.usage th")]
    assert cells[0] == "root" and cells[headers.index("tasks")] == "1"
    assert float(cells[headers.index("gpu-h")]) > 0  # the task held a GPU for seconds


def test_allocations_and_events_pages(web_server: WebServer, browser: Any) -> None:
    reserved = web_server.cli("reserve", "--gpus", "1", "--for", "10m", "--note", "<b>demo</b>")
    assert reserved.returncode == 0, reserved.stderr
    try:
        visit(browser, f"{web_server.url}allocations")
        table = browser.find_element("css selector", "main table")
        assert "reservation" in table.text and "<b>demo</b>" in table.text
        screenshot(browser, "allocations")
    finally:
        released = web_server.cli("release", "--all-mine")
        assert released.returncode == 0, released.stderr
    drained = web_server.cli("drain", "gpu-b", "--reason", "<i>maintenance</i>")
    assert drained.returncode == 0, drained.stderr
    try:
        rows = wait_until(lambda: _event_rows(browser, f"{web_server.url}events?kind=host_drained"),
                          10, "the drain event is listed")
    finally:
        undrained = web_server.cli("undrain", "gpu-b")
        assert undrained.returncode == 0, undrained.stderr
    assert "<i>maintenance</i>" in rows[0].text and "gpu-b" in rows[0].text
    severity = rows[0].get_attribute("data-severity")
    screenshot(browser, "events")
    levels = ["info", "warning", "error", "critical"]
    kept = _event_rows(browser, f"{web_server.url}events?severity={severity}")
    assert kept and all(levels.index(r.get_attribute("data-severity")) >= levels.index(severity)
                        for r in kept)  # that level and worse, as `fleet events --severity`
    assert all(r.get_attribute("data-severity") == "critical"
               for r in _event_rows(browser, f"{web_server.url}events?severity=critical"))
    globbed = _event_rows(browser, f"{web_server.url}events?kind=host_*drained")
    assert {r.get_attribute("data-kind") for r in globbed} == {"host_drained", "host_undrained"}


def _event_rows(browser: Any, url: str) -> list[Any]:
    visit(browser, url)
    return list(browser.find_elements("css selector", "table.events tbody tr"))
