"""A 10 MB probe line is dropped without buffering it, and the next good line still arrives.

The end-to-end case (garbage, a 6 MB line and truncated JSON from a real SSH host, the host
staying monitored) is tests/monitor/test_monitor_faults.py::
test_garbage_and_overlong_lines_are_skipped_and_host_stays_monitored; here the reader's memory
is measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tracemalloc

import pytest

from fleet.errors import ProbeError
from fleet.monitor.lines import CHUNK_BYTES, LineReader, OverlongLine
from fleet.probe.parse import MAX_LINE_BYTES, parse_probe_line

HUGE_BYTES = 10 * 1024 * 1024
MIB = 1024 * 1024


class GeneratedStream:
    """`size` bytes of 'x' then a newline and `tail`, produced chunk by chunk (never held)."""

    def __init__(self, size: int, tail: bytes) -> None:
        self.left = size
        self.tail = tail

    async def read(self, n: int = -1) -> bytes:
        if self.left > 0:
            count = min(n, self.left)
            self.left -= count
            return b"x" * count
        tail, self.tail = self.tail, b""
        return tail


async def test_ten_megabyte_line_is_dropped_with_bounded_buffering() -> None:
    reader = LineReader(GeneratedStream(HUGE_BYTES, b"\n{\"schema\": 1}\n"), MAX_LINE_BYTES)
    tracemalloc.start()
    try:
        first = await reader.next_line()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(first, OverlongLine) and first.size == HUGE_BYTES
    # The buffer never held more than the limit plus a chunk (bytearray growth doubles, so
    # allow 2x): far less than the 10 MB line.
    assert peak < 2 * (MAX_LINE_BYTES + CHUNK_BYTES) + MIB
    assert await reader.next_line() == b'{"schema": 1}'
    assert await reader.next_line() is None


def test_parse_rejects_a_ten_megabyte_line_before_decoding_it() -> None:
    with pytest.raises(ProbeError, match=f"{HUGE_BYTES} bytes"):
        parse_probe_line(b"[" * HUGE_BYTES, "big")


READER_RSS_SCRIPT = textwrap.dedent("""
    import asyncio, json, sys
    from fleet.monitor.lines import LineReader
    from tests.property.test_huge_lines import GeneratedStream

    def peak_kib():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])

    async def main(size, limit):
        reader = LineReader(GeneratedStream(size, b"\\nok\\n"), limit)
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets the peak RSS (VmHWM) to the current RSS
        before = peak_kib()
        first = await reader.next_line()
        second = await reader.next_line()
        print(json.dumps({"before_kib": before, "after_kib": peak_kib(),
                          "dropped": getattr(first, "size", -1), "next": second.decode()}))

    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
""")


def _peak_rss_growth(size: int, limit: int) -> dict[str, int | str]:
    result = subprocess.run([sys.executable, "-c", READER_RSS_SCRIPT, str(size), str(limit)],
                            capture_output=True, text=True, timeout=60, check=True)
    data: dict[str, int | str] = json.loads(result.stdout)
    return data


def test_reader_peak_rss_grows_by_less_than_the_line() -> None:
    figures = _peak_rss_growth(HUGE_BYTES, MAX_LINE_BYTES)
    growth_kib = int(figures["after_kib"]) - int(figures["before_kib"])
    # Control: the same reader with a limit above the line buffers all of it, which shows the
    # measurement sees a buffered line.
    control = _peak_rss_growth(HUGE_BYTES, 4 * HUGE_BYTES)
    control_kib = int(control["after_kib"]) - int(control["before_kib"])
    assert control["dropped"] == -1  # the control kept the line
    print(f"\nLineReader: 10 MiB line dropped, peak RSS growth {growth_kib} KiB "
          f"(limit {MAX_LINE_BYTES // MIB} MiB); unbounded control {control_kib} KiB")
    assert figures["dropped"] == HUGE_BYTES and figures["next"] == "ok"
    assert control_kib * 1024 >= HUGE_BYTES
    assert growth_kib * 1024 < HUGE_BYTES * 0.9
