"""Web view benchmark (not a pass/fail test): headless Chromium's time to first render of the
overview at 1,000 hosts × 8 GPUs, and the browser's CPU while it takes 1 Hz live updates.

    .venv/bin/python -m tests.bench.bench_web [--hosts 1000] [--seconds 10] [--changed 0.2]

The page is served by the real web view (fleet.web: templates, live rows, server-sent events)
in a child process fed pre-built synthetic snapshots at 1 Hz (the TUI benchmark's fleet, 20%
of hosts changing per tick), so only the page's own cost is measured. The first render's floor
is the same page's bytes saved as a file and served by aiohttp's static handler (another child,
with the same stylesheet and scripts), loaded by the same browser in turns with fleet's: what
the browser alone needs for that HTML. The CPU peer is the same page polled: reloaded every
second, the way a page without a live stream stays current. Browser CPU is user+system time of
every chromium process of the session, in percent of one core.
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
import urllib.request
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
    import msgspec

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
            fresh = {host.spec.name: msgspec.structs.replace(
                         host, last_seen=now,
                         report=msgspec.structs.replace(host.report, timestamp=now))
                     for host in frame.hosts if tick == 0 or host.spec.name in frame.changed}
            yield replace(frame, taken_at=now,
                          hosts=tuple(fresh.get(host.spec.name, host) for host in frame.hosts))
            tick += 1
            await asyncio.sleep(1.0)

    # Under the measuring process's scratch directory (the stats file's): this process is
    # ended by a signal, and that directory is removed by the one that made it.
    with tempfile.TemporaryDirectory(prefix="fleet-bench-web-", dir=stats.parent) as scratch:
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


async def serve_floor(port: int, root: Path) -> None:
    """Serve the files under `root` as they are (aiohttp's static handler), until killed."""
    from aiohttp import web

    app = web.Application()
    app.router.add_static("/", root)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


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


def _browser(scratch: Path) -> Any:
    """Headless Chromium through the system chromedriver; its temporary files (the
    singleton-socket directory it leaves behind when ended) go under `scratch`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1366,768", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    service = Service(CHROMEDRIVER, env={**os.environ, "TMPDIR": str(scratch)})
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    return driver


# Milliseconds from navigation start: first byte, last byte, DOM parsed, load event, paint;
# the body's bytes as sent (gzip'ed where the server compressed it).
FIRST_RENDER_JS = """
const nav = performance.getEntriesByType('navigation')[0];
const paint = performance.getEntriesByName('first-contentful-paint')[0];
return {load: nav.loadEventEnd, dom: nav.domContentLoadedEventEnd,
        first_byte: nav.responseStart, last_byte: nav.responseEnd,
        parsed: nav.domInteractive, paint: paint ? paint.startTime : null,
        wire: nav.encodedBodySize,
        rows: document.querySelectorAll('tbody[data-host]').length,
        gpus: document.querySelectorAll('tr[data-gpu]').length};
"""
# Loads of the page and of its floor, in turns, per run (after one warm load of each).
FIRST_LOADS = 5
TIMINGS = ("load", "paint", "first_byte", "last_byte", "parsed")


def _child(argv: list[str]) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-m", "tests.bench.bench_web", *argv], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError(f"web child {argv[:2]} did not start: {child.stderr.read()[-1500:]}")
    return child


def _stop(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=15)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(timeout=15)


def _floor_tree(url: str, root: Path) -> str:
    """The page at `url` saved (its bytes as served) under `root`, with the web view's static
    files beside it at the same paths; the path to load it from a server of `root`."""
    from fleet.web.site import STATIC_DIR

    with urllib.request.urlopen(url, timeout=30) as reply:
        page = reply.read()
    (root / "web").mkdir(parents=True)
    (root / "web" / "overview.html").write_bytes(page)
    shutil.copytree(STATIC_DIR, root / "web" / "static")
    return "/web/overview.html"


def first_renders(driver: Any, url: str, floor_url: str) -> dict[str, list[float]]:
    """FIRST_LOADS timed loads of the page and of its floor, in turns (seconds, by TIMINGS)."""
    taken: dict[str, list[float]] = {f"{who}_{key}": [] for who in ("fleet", "floor")
                                     for key in TIMINGS}
    driver.get(floor_url)  # warm: the static files in the browser's cache for both
    for _turn in range(FIRST_LOADS):
        for who, address in (("fleet", url), ("floor", floor_url)):
            driver.get(address)
            timing = driver.execute_script(FIRST_RENDER_JS)
            for key in TIMINGS:
                taken[f"{who}_{key}"].append((timing[key] or 0) / 1000)
    return taken


def measure(hosts: int, seconds: float, changed: float) -> dict[str, Any]:
    """One run: first renders (against the floor), then CPU while live (the page) and while
    polled (the peer)."""
    port, floor_port = _free_port(), _free_port()
    scratch = Path(tempfile.mkdtemp(prefix="fleet-bench-web-"))
    stats = scratch / "sent.json"
    driver = None
    children: list[subprocess.Popen[str]] = []
    try:
        children.append(_child(["--serve", str(port), "--stats", str(stats), "--hosts",
                                str(hosts), "--changed", str(changed)]))
        driver = _browser(scratch)
        url = f"http://127.0.0.1:{port}/web/"
        driver.get(url)  # warm: chromium's own start, the child's first rows
        floor_path = _floor_tree(url, scratch / "floor")
        children.append(_child(["--floor", str(scratch / "floor"), "--serve", str(floor_port)]))
        driver.get(url)
        timing = driver.execute_script(FIRST_RENDER_JS)
        renders = first_renders(driver, url, f"http://127.0.0.1:{floor_port}{floor_path}")
        driver.get(url)
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
        page_bytes = (scratch / "floor" / floor_path.lstrip("/")).stat().st_size
        return {**renders, "rows": timing["rows"], "gpu_rows": timing["gpus"],
                "wire_bytes": timing["wire"],
                "live_cpu_pct": live_cpu, "polled_cpu_pct": polled_cpu,
                "update_bytes": update_bytes, "page_bytes": page_bytes, "version": version}
    finally:
        if driver is not None:
            driver.quit()
        for child in children:
            _stop(child)
        shutil.rmtree(scratch, ignore_errors=True)


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
    busy_before = os.getloadavg()[0]
    measured = [measure(HOSTS, seconds, 0.2) for _ in range(runs)]
    busy = f"load average {busy_before:.1f} before, {os.getloadavg()[0]:.1f} after, on " \
           f"{os.cpu_count()} cores"
    note = (f"{measured[0]['rows']:.0f} host rows, {measured[0]['gpu_rows']:.0f} GPU rows; "
            f"page {measured[0]['page_bytes'] / 1e6:.2f} MB "
            f"({measured[0]['wire_bytes'] / 1e3:.0f} kB as sent), an update "
            f"{measured[0]['update_bytes'] / 1e3:.0f} kB (only changed cells)")

    def samples(key: str) -> list[float]:
        return [value for m in measured for value in m[key]]

    def median(key: str) -> float:
        return statistics.median(samples(key))

    split = ", ".join(f"{what} {median('fleet_' + key):.2f} s (floor {median('floor_' + key):.2f})"
                      for what, key in (("first byte", "first_byte"), ("last byte", "last_byte"),
                                        ("DOM parsed", "parsed")))
    for key, what in (("load", "load event"), ("paint", "first contentful paint")):
        fleet_s, floor_s = median(f"fleet_{key}"), median(f"floor_{key}")
        results.add(Figure(
            section="web", name=f"Web overview time to {what}, {HOSTS} hosts × 8 GPUs",
            unit="s", compares=f"headless Chromium: navigation start to the {what}; floor: the "
            "same bytes as a static file (aiohttp static handler), same browser, loads in turns",
            target="< 1 s" if key == "load" else "",
            fleet=Measured(f"fleet web ({what})", samples(f"fleet_{key}"), note=note),
            peers=[Measured("static file floor", samples(f"floor_{key}"))],
            notes=[split] if key == "load" else [],
            verdict=f"{fleet_s:.2f} s, {fleet_s / floor_s:.2f}× the floor's {floor_s:.2f} s"
                    + (f" ({'meets' if fleet_s < 1 else 'misses'} < 1 s)" if key == "load"
                       else "") + f"; {busy}"))
    cpu = statistics.median(m["live_cpu_pct"] for m in measured)
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
    parser.add_argument("--floor", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor and args.serve:
        asyncio.run(serve_floor(args.serve, args.floor))
        return 0
    if args.serve:
        asyncio.run(serve(args.serve, args.hosts, args.changed, args.stats))
        return 0
    why = missing()
    if why:
        print(f"skipped: {why}")
        return 0
    numbers = measure(args.hosts, args.seconds, args.changed)
    print(json.dumps({key: [round(v, 4) for v in value] if isinstance(value, list)
                      else round(value, 4) for key, value in numbers.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
