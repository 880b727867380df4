"""Figure 6: the TUI's CPU with 1,000 synthetic hosts at 1 Hz and its time to first frame.

Folds in the TUI helper's benchmark (tests/bench/bench_tui.py, one child process per scale,
headless Textual at 160×45, 20% of hosts changing per tick) and runs it `runs` times.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.bench.common import ROOT, Figure, Measured, Results, log

HOSTS = 1000
FLOOR_HOSTS = 1  # the same app and harness with one host: Textual's own start-up


def _child(hosts: int, seconds: float, *, prebuilt: bool = False) -> dict[str, float]:
    """One run of the benchmark's child process at `hosts` hosts: its JSON numbers."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.bench_tui", "--child", str(hosts),
         "--seconds", str(seconds), "--changed", "0.2", *(["--prebuilt"] if prebuilt else [])],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=seconds + 300)
    if done.returncode != 0:
        raise RuntimeError(f"bench_tui exited {done.returncode}: {done.stderr[-1500:]}")
    numbers: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return numbers


def tui(results: Results, quick: bool) -> None:
    if not (ROOT / "tests" / "bench" / "bench_tui.py").exists():
        results.skip("tui", "tests/bench/bench_tui.py (the TUI helper's benchmark) is missing")
        return
    runs, seconds = (1, 5.0) if quick else (3, 10.0)
    log(f"tui: {HOSTS} hosts × 8 GPUs at 1 Hz, {runs} runs of a {seconds:g} s window, "
        f"each beside the same app on {FLOOR_HOSTS} host")
    cpu, first_frame, rows, floor_frame, prebuilt_frame = [], [], [], [], []
    for _ in range(runs):  # in turns, so all three see the same moments of a shared machine
        numbers = _child(HOSTS, seconds)
        cpu.append(float(numbers["cpu_pct"]))
        first_frame.append(float(numbers["first_frame_s"]))
        rows.append(int(numbers["rows"]))
        floor_frame.append(float(_child(FLOOR_HOSTS, 0.5)["first_frame_s"]))
        prebuilt_frame.append(float(_child(HOSTS, 0.5, prebuilt=True)["first_frame_s"]))
    note = f"headless 160×45, 20% of hosts change per tick; table rows {rows}"
    cpu_figure = Figure(
        section="tui", name=f"TUI CPU, {HOSTS} hosts × 8 GPUs at 1 Hz", unit="%",
        compares="CPU of the TUI process (percent of one core) over a steady window; "
                 "snapshots built before the window (tests/bench/bench_tui.py)",
        fleet=Measured("fleet TUI", cpu, note=note), target="≤ 12 % of a core")
    if cpu_figure.fleet and cpu_figure.fleet.median is not None:
        met = "meets" if cpu_figure.fleet.median <= 12 else "misses"
        cpu_figure.verdict = f"{cpu_figure.fleet.median:.1f} %: {met} ≤ 12 %"
    results.add(cpu_figure)
    frame_figure = Figure(
        section="tui", name=f"TUI time to first frame, {HOSTS} hosts", unit="s",
        compares="app start (in a fresh process, textual imported) to the first rendered frame "
                 "with the fleet on it, the first snapshot made after start-up as a live one "
                 "is; floor: the same app showing one host, run in turns",
        fleet=Measured("fleet TUI", first_frame),
        extra=[Measured("all 8 snapshots made before start (the harness until 2026-12-02)",
                        prebuilt_frame, note="its first frame's full collections also walk "
                                             "7 fleets of objects no live TUI holds")],
        peers=[Measured(f"same app, {FLOOR_HOSTS} host", floor_frame,
                        note="Textual's start-up, CSS and compose: what any fleet size pays")],
        target="≤ 0.5 s")
    if frame_figure.fleet and frame_figure.fleet.median is not None:
        median = frame_figure.fleet.median
        frame_figure.verdict = f"{median:.2f} s: {'meets' if median <= 0.5 else 'misses'} ≤ 0.5 s"
    results.add(frame_figure)
