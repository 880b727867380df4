"""Web view benchmark (not a pass/fail test): headless Chromium's time to first render of the
overview at 1,000 hosts × 8 GPUs, and the browser's CPU while it takes 1 Hz live updates.

    .venv/bin/python -m tests.bench.bench_web [--hosts 1000] [--seconds 10] [--changed 0.2]

The page is served by the real web view (fleet.web: templates, live rows, server-sent events)
in a child process fed pre-built synthetic snapshots at 1 Hz (the TUI benchmark's fleet, 20%
of hosts changing per tick), so only the page's own cost is measured. The peer is the same page
polled: reloaded every second, the way a page without a live stream stays current. Browser CPU
is user+system time of every chromium process of the session, in percent of one core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.bench.common import ROOT, Figure, Measured, Results, log

HOSTS = 1000
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ---- the child: the web view over synthetic snapshots ----

async def serve(port: int, hosts: int, changed: float, stats: Path) -> None:
    """Serve the web view on 127.0.0.1:`port`, one synthetic snapshot per second, until killed;
    `stats` says how many update frames went out, and their bytes, so far."""
    import fleet
    from fleet.web.site import WebView
    from tests.bench.bench_tui import synthetic_fleet

    frames = synthetic_fleet(hosts, changed)
    sent = {"frames": 0, "bytes": 0}

    async def snapshots() -> AsyncIterator[Any]:
        tick = 0
        while True:
            # The fake fleet's clock is fixed: keep each sample as fresh as the real monitor's.
            frame = frames[tick % len(frames)]
            now = time.time()
            fresh = {host.spec.name: replace(host, last_seen=now,
                                             report=replace(host.report, timestamp=now))
                     for host in frame.hosts if tick == 0 or host.spec.name in frame.changed}
            yield replace(frame, taken_at=now,
                          hosts=tuple(fresh.get(host.spec.name, host) for host in frame.hosts))
            tick += 1
            await asyncio.sleep(1.0)

    with tempfile.TemporaryDirectory(prefix="fleet-bench-web-") as scratch:
        inventory = Path(scratch) / "inventory.yaml"
        inventory.write_text("hosts: {}\n")
        async with fleet.open(str(Path(scratch) / "fleet.db"), inventory) as service:
            view = WebView(service, snapshots)
            publish = view.context.live.broadcaster.publish

            def counted(frame: bytes) -> None:
                sent["frames"] += 1
                sent["bytes"] += len(frame)
                publish(frame)

            view.context.live.broadcaster.publish = counted  # type: ignore[method-assign]
            await view.start(f"127.0.0.1:{port}")
            print("ready", flush=True)
            try:
                while True:
                    await asyncio.sleep(0.5)
                    stats.with_suffix(".tmp").write_text(json.dumps(sent))
                    stats.with_suffix(".tmp").replace(stats)
            finally:
                await view.close()


# ---- the parent: chromium against it ----

def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (chromedriver → chromium → its renderers and helpers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a helper that has gone
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICKS


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1366,768", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    return driver


FIRST_RENDER_JS = """
const nav = performance.getEntriesByType('navigation')[0];
const paint = performance.getEntriesByName('first-contentful-paint')[0];
return {load: nav.loadEventEnd, dom: nav.domContentLoadedEventEnd,
        paint: paint ? paint.startTime : null,
        rows: document.querySelectorAll('tbody[data-host]').length,
        gpus: document.querySelectorAll('tr[data-gpu]').length};
"""


def measure(hosts: int, seconds: float, changed: float) -> dict[str, float]:
    """One run: first render, then CPU while live (the page) and while polled (the peer)."""
    port = _free_port()
    stats = Path(tempfile.mkdtemp(prefix="fleet-bench-web-")) / "sent.json"
    child = subprocess.Popen([sys.executable, "-m", "tests.bench.bench_web", "--serve",
                              str(port), "--stats", str(stats), "--hosts", str(hosts),
                              "--changed", str(changed)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    driver = None
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"web child did not start: {child.stderr.read()[-1500:]}")
        driver = _browser()
        url = f"http://127.0.0.1:{port}/web/"
        driver.get(url)  # warm: chromium's own start, the child's first rows
        driver.get(url)
        timing = driver.execute_script(FIRST_RENDER_JS)
        deadline = time.monotonic() + 30
        while driver.find_element("id", "conn").text != "live" and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = _descendants(driver.service.process.pid)
        sent_before = json.loads(stats.read_text())
        time.sleep(2.0)
        cpu0, wall0 = _cpu_seconds(pids), time.monotonic()
        time.sleep(seconds)
        live_cpu = 100 * (_cpu_seconds(pids) - cpu0) / (time.monotonic() - wall0)
        sent_after = json.loads(stats.read_text())
        frames = max(1, sent_after["frames"] - sent_before["frames"])
        update_bytes = (sent_after["bytes"] - sent_before["bytes"]) / frames
        version = int(driver.find_element("id", "overview").get_attribute("data-version"))

        pids = _descendants(driver.service.process.pid)
        cpu0, wall0 = _cpu_seconds(pids), time.monotonic()
        while time.monotonic() - wall0 < seconds:  # the peer: reload once a second
            started = time.monotonic()
            driver.refresh()
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        polled_cpu = 100 * (_cpu_seconds(_descendants(driver.service.process.pid)) - cpu0) / (
            time.monotonic() - wall0)
        page_bytes = len(driver.page_source.encode())
        return {"load_s": timing["load"] / 1000, "dom_s": timing["dom"] / 1000,
                "paint_s": (timing["paint"] or 0) / 1000, "rows": timing["rows"],
                "gpu_rows": timing["gpus"], "live_cpu_pct": live_cpu,
                "polled_cpu_pct": polled_cpu, "update_bytes": update_bytes,
                "page_bytes": page_bytes, "version": version}
    finally:
        if driver is not None:
            driver.quit()
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=15)
        shutil.rmtree(stats.parent, ignore_errors=True)


def missing() -> str | None:
    """Why the browser figures cannot be measured here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


def web(results: Results, quick: bool) -> None:
    """The web section of `python -m tests.bench`."""
    why = missing()
    if why:
        results.skip("web", why)
        return
    runs, seconds = (1, 5.0) if quick else (2, 10.0)
    log(f"web: {HOSTS} hosts × 8 GPUs at 1 Hz, {runs} runs of a {seconds:g} s window")
    measured = [measure(HOSTS, seconds, 0.2) for _ in range(runs)]
    note = (f"{measured[0]['rows']:.0f} host rows, {measured[0]['gpu_rows']:.0f} GPU rows; "
            f"page {measured[0]['page_bytes'] / 1e6:.1f} MB, an update "
            f"{measured[0]['update_bytes'] / 1e3:.0f} kB (only changed cells)")
    load_s = statistics.median(m["load_s"] for m in measured)
    paint_s = statistics.median(m["paint_s"] for m in measured)
    cpu = statistics.median(m["live_cpu_pct"] for m in measured)
    busy = os.getloadavg()[0]
    results.add(Figure(
        section="web", name=f"Web overview time to first render, {HOSTS} hosts × 8 GPUs",
        unit="s", compares="headless Chromium: navigation start to the load event (page drawn, "
        "scripts run); first contentful paint as extra", target="< 1 s",
        fleet=Measured("fleet web (load)", [m["load_s"] for m in measured], note=note),
        extra=[Measured("first contentful paint", [m["paint_s"] for m in measured])],
        verdict=f"loaded in {load_s:.2f} s, first paint {paint_s:.2f} s "
                f"({'meets' if load_s < 1 else 'misses'} < 1 s; load average {busy:.1f} on "
                f"{os.cpu_count()} cores)"))
    results.add(Figure(
        section="web", name=f"Web overview browser CPU, {HOSTS} hosts at 1 Hz", unit="%",
        compares="CPU of all chromium processes (percent of one core) over a steady window; "
        "peer: the same page reloaded every second (polling)", target="< 15 %",
        fleet=Measured("fleet web (live cells)", [m["live_cpu_pct"] for m in measured],
                       note="20% of hosts change per tick"),
        peers=[Measured("page reload every 1 s", [m["polled_cpu_pct"] for m in measured])],
        verdict=f"{cpu:.1f} % of one core ({'meets' if cpu < 15 else 'misses'} < 15 %)"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=HOSTS)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--changed", type=float, default=0.2)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stats", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.hosts, args.changed, args.stats))
        return 0
    why = missing()
    if why:
        print(f"skipped: {why}")
        return 0
    numbers = measure(args.hosts, args.seconds, args.changed)
    print(json.dumps({key: round(value, 4) for key, value in numbers.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
