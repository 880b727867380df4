"""Inventory load time vs PyYAML's C loader on a generated 20,000-host file, block and flow style.

    .venv/bin/python -m tests.bench.bench_inventory [--hosts 20000] [--runs 3]

Prints, per style, the file size, fleet's load_inventory() time, yaml.load(CSafeLoader)'s time
as is and with the garbage collector off (fleet pauses it while loading), best of --runs, and
fleet's ratio to the faster of the two. Not a timed test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from fleet.inventory import load_inventory

STYLES = ("block", "flow")


def inventory_text(hosts: int, style: str) -> str:
    """A fleet-format inventory of `hosts` hosts, each with an address, port, user and labels."""
    lines = ["version: 1", "vars:", "  user: lab", "hosts:"]
    for index in range(hosts):
        name = f"node{index:05d}"
        address = f"10.{index // 65536}.{index // 256 % 256}.{index % 256}"
        rack = f"r{index % 40:02d}"
        if style == "block":
            lines += [
                f"  {name}:",
                f"    address: {address}",
                f"    port: {22 + index % 3}",
                "    labels:",
                f"      rack: {rack}",
            ]
        else:
            body = f"address: {address}, port: {22 + index % 3}, labels: {{rack: {rack}}}"
            lines.append(f"  {name}: {{{body}}}")
    return "\n".join(lines) + "\n"


def _timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def _c_load_without_gc(text: str) -> object:
    gc.disable()
    try:
        return yaml.load(text, Loader=yaml.CSafeLoader)
    finally:
        gc.enable()


def best_of(runs: int, contenders: dict[str, Callable[[], object]]) -> dict[str, float]:
    """The fastest of `runs` wall-clock timings of each contender, in seconds.

    The contenders take turns within each run, so a burst of load from other processes on the
    machine slows all of them rather than one.
    """
    timings: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(runs):
        for name, work in contenders.items():
            timings[name].append(_timed(work))
    return {name: min(values) for name, values in timings.items()}


def main(argv: list[str] | None = None) -> int:
    """Generate the files, time both loaders, print one line per style."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"libyaml available: {yaml.__with_libyaml__}; {args.hosts} hosts, best of {args.runs}")
    with tempfile.TemporaryDirectory(prefix="fleet-bench-inv-") as workdir:
        for style in STYLES:
            path = Path(workdir) / f"inventory-{style}.yaml"
            path.write_text(inventory_text(args.hosts, style), encoding="utf-8")
            size_kib = path.stat().st_size / 1024
            count = len(load_inventory(path).hosts)
            assert count == args.hosts, f"loaded {count} hosts, expected {args.hosts}"
            text = path.read_text(encoding="utf-8")
            best = best_of(args.runs, {
                "fleet": lambda p=path: load_inventory(p),
                "c": lambda t=text: yaml.load(t, Loader=yaml.CSafeLoader),
                "c_no_gc": lambda t=text: _c_load_without_gc(t),
            })
            fleet_s, c_loader_s, c_loader_no_gc_s = best["fleet"], best["c"], best["c_no_gc"]
            ratio = fleet_s / min(c_loader_s, c_loader_no_gc_s)
            print(
                f"{style:5s} {size_kib:5.0f} KiB  fleet {fleet_s:6.3f} s  "
                f"yaml.load(CSafeLoader) {c_loader_s:6.3f} s, GC off {c_loader_no_gc_s:6.3f} s  "
                f"fleet/best {ratio:4.2f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
