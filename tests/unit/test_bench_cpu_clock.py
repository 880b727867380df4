"""The benchmarks' CPU time of another process: its CPU-time clock agrees with /proc/PID/stat
to within a clock tick, counts ended threads, and is finer than a tick."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.bench.common import cpu_seconds_of, stat_cpu_seconds_of

# Spins 0.3 s of CPU in a thread that then ends, and waits to be read.
BUSY_THEN_WAIT = """
import sys, threading, time
def spin():
    end = time.thread_time() + 0.3
    while time.thread_time() < end:
        pass
worker = threading.Thread(target=spin)
worker.start()
worker.join()
print("spun", flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux CPU-time clocks")
def test_a_process_cpu_time_is_read_from_its_clock_and_agrees_with_stat() -> None:
    child = subprocess.Popen([sys.executable, "-c", BUSY_THEN_WAIT], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "spun\n"
        precise, ticks = cpu_seconds_of(child.pid), stat_cpu_seconds_of(child.pid)
        ticks_per_s = os.sysconf("SC_CLK_TCK")
        assert precise >= 0.3  # the ended thread's time is counted
        assert abs(precise - ticks) <= 2 / ticks_per_s
        in_ticks = precise * ticks_per_s
        assert abs(in_ticks - round(in_ticks)) > 1e-6  # finer than whole ticks
    finally:
        child.communicate("", timeout=10)
