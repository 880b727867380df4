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
from collections.abc import Iterator

import pytest

from fleet.errors import ProbeError
from fleet.monitor.lines import LineSplitter, OverlongLine
from fleet.probe.parse import MAX_LINE_BYTES, parse_probe_line

HUGE_BYTES = 10 * 1024 * 1024
MIB = 1024 * 1024


# The largest chunk an SSH channel delivers at once is a packet (32 KiB); a pipe's is 64 KiB.
CHUNK_BYTES = 65536


def generated_chunks(size: int, tail: bytes) -> Iterator[bytes]:
    """`size` bytes of 'x' then a newline and `tail`, produced chunk by chunk (never held)."""
    while size > 0:
        count = min(CHUNK_BYTES, size)
        size -= count
        yield b"x" * count
    yield b"\n" + tail


def test_ten_megabyte_line_is_dropped_with_bounded_buffering() -> None:
    splitter = LineSplitter(MAX_LINE_BYTES)
    lines: list[bytes | OverlongLine] = []
    tracemalloc.start()
    try:
        for chunk in generated_chunks(HUGE_BYTES, b'{"schema": 1}\n'):
            lines += splitter.feed(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(lines[0], OverlongLine) and lines[0].size == HUGE_BYTES
    # The buffer never held more than the limit plus a chunk (bytearray growth doubles, so
    # allow 2x): far less than the 10 MB line.
    assert peak < 2 * (MAX_LINE_BYTES + CHUNK_BYTES) + MIB
    assert lines[1:] == [b'{"schema": 1}']
    assert splitter.finish() is None and splitter.partial == b""


def test_parse_rejects_a_ten_megabyte_line_before_decoding_it() -> None:
    with pytest.raises(ProbeError, match=f"{HUGE_BYTES} bytes"):
        parse_probe_line(b"[" * HUGE_BYTES, "big")


READER_RSS_SCRIPT = textwrap.dedent("""
    import json, sys
    from fleet.monitor.lines import LineSplitter
    from tests.property.test_huge_lines import generated_chunks

    def peak_kib():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])

    def main(size, limit):
        splitter = LineSplitter(limit)
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets the peak RSS (VmHWM) to the current RSS
        before = peak_kib()
        lines = []
        for chunk in generated_chunks(size, b"ok\\n"):
            lines += splitter.feed(chunk)
        first, second = lines
        print(json.dumps({"before_kib": before, "after_kib": peak_kib(),
                          "dropped": getattr(first, "size", -1), "next": second.decode()}))

    main(int(sys.argv[1]), int(sys.argv[2]))
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
    print(f"\nLineSplitter: 10 MiB line dropped, peak RSS growth {growth_kib} KiB "
          f"(limit {MAX_LINE_BYTES // MIB} MiB); unbounded control {control_kib} KiB")
    assert figures["dropped"] == HUGE_BYTES and figures["next"] == "ok"
    assert control_kib * 1024 >= HUGE_BYTES
    assert growth_kib * 1024 < HUGE_BYTES * 0.9
