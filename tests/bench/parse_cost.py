"""CPU of reading one probe line in process: fleet's parse against the monitor floor's json.loads.

The line is the probe's own compact JSON for one host with N GPUs (one process each), as
tests/unit/test_probe_parse.py builds it. Timed in a tight loop, so caches stay warm: a live
monitor pays several times this per line (see docs/bench/README.md).

Run: python -m tests.bench.parse_cost [--gpus 8] [--loops 20000] [--repeats 5]
Prints one JSON line: microseconds per line (median of the repeats) for each way of reading it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from fleet.probe.parse import parse_probe_line, parse_probe_line_lenient
from fleet.probe.typed import typed_report
from tests.unit.test_probe_parse import _gpu, _line


def _microseconds(read: Callable[[], object], loops: int, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        started = time.process_time()
        for _ in range(loops):
            read()
        runs.append((time.process_time() - started) / loops * 1e6)
    return round(statistics.median(runs), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--loops", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    line = json.dumps(_line(gpus=[_gpu(index) for index in range(args.gpus)]),
                      separators=(",", ":")).encode()
    assert parse_probe_line(line, "h") == parse_probe_line_lenient(line, "h")
    assert typed_report(line) is not None, "the probe's own line must take the typed path"
    ways: dict[str, Callable[[], object]] = {
        "parse_probe_line (fleet, typed path)": lambda: parse_probe_line(line, "h"),
        "parse_probe_line_lenient (field by field)": lambda: parse_probe_line_lenient(line, "h"),
        "json.loads (the monitor floor)": lambda: json.loads(line),
    }
    print(json.dumps({"gpus": args.gpus, "line_bytes": len(line), "us_per_line": {
        name: _microseconds(read, args.loops, args.repeats) for name, read in ways.items()}}))


if __name__ == "__main__":
    main()
