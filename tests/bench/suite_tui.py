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


def tui(results: Results, quick: bool) -> None:
    if not (ROOT / "tests" / "bench" / "bench_tui.py").exists():
        results.skip("tui", "tests/bench/bench_tui.py (the TUI helper's benchmark) is missing")
        return
    runs, seconds = (1, 5.0) if quick else (2, 10.0)
    log(f"tui: {HOSTS} hosts × 8 GPUs at 1 Hz, {runs} runs of a {seconds:g} s window")
    cpu, first_frame, rows = [], [], []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-m", "tests.bench.bench_tui", "--child", str(HOSTS),
             "--seconds", str(seconds), "--changed", "0.2"],
            cwd=ROOT, capture_output=True, text=True, check=False, timeout=seconds + 300)
        if done.returncode != 0:
            raise RuntimeError(f"bench_tui exited {done.returncode}: {done.stderr[-1500:]}")
        numbers = json.loads(done.stdout.strip().splitlines()[-1])
        cpu.append(float(numbers["cpu_pct"]))
        first_frame.append(float(numbers["first_frame_s"]))
        rows.append(int(numbers["rows"]))
    note = f"headless 160×45, 20% of hosts change per tick; table rows {rows}"
    results.add(Figure(
        section="tui", name=f"TUI CPU, {HOSTS} hosts × 8 GPUs at 1 Hz", unit="%",
        compares="CPU of the TUI process (percent of one core) over a steady window; "
                 "snapshots pre-built (tests/bench/bench_tui.py by the TUI helper)",
        fleet=Measured("fleet TUI", cpu, note=note)))
    results.add(Figure(
        section="tui", name=f"TUI time to first frame, {HOSTS} hosts", unit="s",
        compares="app start (in a fresh process) to the first rendered frame",
        fleet=Measured("fleet TUI", first_frame)))
