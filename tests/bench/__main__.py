"""Runs the benchmark suite and writes docs/bench/latest.{md,json}: `python -m tests.bench`.

    python -m tests.bench            # full: 16/32/64 namespace hosts, 5 runs (as root; ~20 min)
    python -m tests.bench --quick    # development: 8/16 hosts, 2 runs
    python -m tests.bench --only storage --only startup --out /tmp/b

Namespace parts (fan-out, monitoring, dispatch, serve, discovery) need root; without it they are
skipped and the table says so. A missing peer tool (parallel-ssh, ansible) is skipped, never a
failure. Timings are medians of repeated runs; nothing here passes or fails on absolute time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from tests.bench.bench_monitor import CURVE_HOSTS
from tests.bench.common import (
    ROOT,
    Results,
    compile_bytecode,
    host_counts,
    load_average,
    log,
    machine,
)
from tests.bench.report import write_reports

SECTIONS = ("startup", "storage", "fanout", "dispatch", "serve", "monitor", "discovery", "tui",
            "web")


def _guarded(results: Results, name: str, work: Callable[[], None]) -> None:
    """A section that breaks is reported (with its error) and the suite goes on."""
    started = time.monotonic()
    try:
        work()
    except Exception as exc:
        traceback.print_exc()
        results.skip(name, f"failed: {type(exc).__name__}: {str(exc)[:300]}")
    log(f"section {name} took {time.monotonic() - started:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="8/16 hosts, 2 runs, small DBs")
    parser.add_argument("--only", action="append", choices=SECTIONS,
                        help="run only this section (repeatable)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench",
                        help="where latest.md / latest.json go [default: docs/bench]")
    parser.add_argument("--runs", type=int, help="override the number of runs per figure")
    parser.add_argument("--hosts", type=host_counts,
                        help="host counts for the namespace sections, e.g. 16,32,64")
    parser.add_argument("--monitor-hosts", type=host_counts,
                        help="host counts for the monitor section only [default: --hosts, "
                             "else the curve's 16,64,256; --quick: 8,16]")
    args = parser.parse_args(argv)
    sections = args.only or list(SECTIONS)
    quick = args.quick
    runs = args.runs or (2 if quick else 5)
    counts = args.hosts or ([8, 16] if quick else [16, 32, 64])
    monitor_counts = args.monitor_hosts or args.hosts or (
        [8, 16] if quick else list(CURVE_HOSTS))
    results = Results()
    started = time.monotonic()
    started_at = datetime.now(UTC)
    load_before = load_average()
    log(f"{'quick' if quick else 'full'} run: sections {sections}, runs {runs}, hosts {counts}, "
        f"monitor hosts {monitor_counts}, "
        f"load average {load_before}")
    is_root = os.geteuid() == 0
    log(compile_bytecode())  # before any section: every fleet process loads .pyc, as installed
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        workdir = Path(tmp)
        if "startup" in sections:
            from tests.bench.bench_startup import startup

            _guarded(results, "startup", lambda: startup(results, workdir / "startup", runs * 2))
        if "startup" in sections or "fanout" in sections:  # the fan-out's host-CPU bound
            from tests.bench.bench_startup import host_probe_cost

            _guarded(results, "host probe cost",
                     lambda: host_probe_cost(results, workdir / "probe", runs * 2))
        if "storage" in sections:
            from tests.bench.bench_storage import storage

            _guarded(results, "storage", lambda: storage(results, workdir / "storage", quick))
        if "tui" in sections:
            from tests.bench.suite_tui import tui

            _guarded(results, "tui", lambda: tui(results, quick))
        if "web" in sections:
            from tests.bench.bench_web import web

            _guarded(results, "web", lambda: web(results, quick))
        netns_sections = [s for s in ("fanout", "dispatch", "serve", "monitor", "discovery")
                          if s in sections]
        if netns_sections and not is_root:
            for section in netns_sections:
                results.skip(section, "needs root: namespace hosts with OpenSSH sshd "
                                      "(run `sudo make bench`)")
        elif netns_sections:
            _netns_sections(results, netns_sections, counts, monitor_counts, runs,
                            quick, workdir)
    elapsed = time.monotonic() - started
    run_info = {
        "date": started_at.isoformat(timespec="seconds"),
        "mode": "quick" if quick else "full",
        "machine": machine(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "elapsed_s": round(elapsed, 1),
        "sections": sections,
    }
    md_path, json_path = write_reports(results, run_info, args.out)
    log(f"done in {elapsed:.0f} s: {md_path} {json_path}")
    return 0


def _netns_sections(results: Results, sections: list[str], counts: list[int],
                    monitor_counts: list[int], runs: int, quick: bool, workdir: Path) -> None:
    from tests.bench.lab import HostSet, start_lab

    needed = max(counts + monitor_counts) if "monitor" in sections else max(counts)
    log(f"starting {needed} namespace hosts")
    lab = start_lab(needed)
    try:
        log(f"{len(lab.hosts)} hosts up in {lab.setup_seconds:.1f} s")
        if "fanout" in sections:
            from tests.bench.bench_fanout import fresh_fanout, reuse_round, status_phases

            for count in counts:
                host_set = HostSet(lab, count, workdir / f"fanout{count}").write()
                # Ansible takes seconds per run: fewer runs for it
                _guarded(results, f"fan-out {count}",
                         partial(fresh_fanout, results, host_set, runs, max(2, runs - 2)))
                _guarded(results, f"reuse round {count}",
                         partial(reuse_round, results, host_set, runs))
                _guarded(results, f"status phases {count}",
                         partial(status_phases, results, host_set, runs))
        if "dispatch" in sections:
            from tests.bench.bench_dispatch import dispatch

            host_set = HostSet(lab, 1, workdir / "dispatch").write()
            _guarded(results, "dispatch", lambda: dispatch(results, host_set, runs * 2))
        if "serve" in sections:
            from tests.bench.bench_serve import serve_dispatch, serve_status

            host_set = HostSet(lab, 1, workdir / "serve1").write()
            _guarded(results, "serve dispatch",
                     lambda: serve_dispatch(results, host_set, runs * 2))
            for count in counts:
                status_set = HostSet(lab, count, workdir / f"serve{count}h").write()
                _guarded(results, f"serve status {count}",
                         partial(serve_status, results, status_set, runs * 2))
        if "monitor" in sections:
            from tests.bench.bench_monitor import cost_curve, marginal_cost, monitoring

            measured: dict[int, dict[str, float]] = {}

            def monitor_one(count: int) -> None:
                measured[count] = monitoring(results, lab, count, workdir / f"mon{count}", quick)

            for count in monitor_counts:
                _guarded(results, f"monitor {count}", partial(monitor_one, count))
            marginal_cost(results, measured)
            cost_curve(results, measured)
        if "discovery" in sections:
            from tests.bench.bench_discovery import discovery

            _guarded(results, "discovery",
                     lambda: discovery(results, lab, min(32, len(lab.hosts)),
                                       workdir / "discovery", runs))
    finally:
        lab.close()


if __name__ == "__main__":
    sys.exit(main())
