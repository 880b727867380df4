"""A/B of `fleet monitor`'s CPU per host-sample between source trees, in turns with the floor.

Each tree (a checkout of fleet, e.g. a `git worktree` of an older commit) runs the bench's own
monitor measurement on one namespace lab, with its own database; rounds alternate the order
(ABBA) so the box's drift hits every tree alike. Needs root (namespace hosts).

Run: python -m tests.bench.monitor_ab [--hosts 64] [--rounds 6] TREE [TREE ...]
Prints one line per measurement, then each tree's median and its ratio to the floor's.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from tests.bench import bench_monitor, common
from tests.bench.lab import HostSet, start_lab

FLOOR = "floor"
WARMUP_S = 8.0
WINDOW_S = 20.0


def _measure(tree: str, host_set: HostSet) -> float:
    """CPU ms per host-sample of one window: `tree`'s fleet monitor, or the floor."""
    if tree == FLOOR:
        floor = bench_monitor._floor(host_set, WARMUP_S, WINDOW_S)
        return float(floor["cpu_s"] / floor["lines"] * 1000)

    def env_of(home: Path, db_path: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**common.fleet_env(home, db_path, extra), "PYTHONPATH": tree}

    bench_monitor.fleet_env = env_of  # the measurement's fleet process imports fleet from `tree`
    fleet = bench_monitor._fleet_monitor(host_set, WARMUP_S, WINDOW_S)
    return float(fleet["cpu_s"] / fleet["host_samples"] * 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("trees", nargs="+", type=Path)
    args = parser.parse_args()
    trees = [str(tree.resolve()) for tree in args.trees]
    lab = start_lab(args.hosts)
    work = Path(tempfile.mkdtemp(prefix="fleet-monitor-ab-"))
    try:
        names = [FLOOR, *trees]
        host_sets = {name: HostSet(lab, args.hosts, work / f"run{n}").write()
                     for n, name in enumerate(names)}
        taken = common.in_turns(names, args.rounds,
                                lambda name: _measure(name, host_sets[name]), "ms")
        floor = statistics.median(taken[FLOOR])
        for name, values in taken.items():
            median = statistics.median(values)
            print(f"{name}: {median:.4f} ms per host-sample, {median / floor:.2f}x the floor; "
                  f"rounds {[round(value, 3) for value in values]}")
    finally:
        lab.close()
        shutil.rmtree(work, ignore_errors=True)  # each run's databases and inventories


if __name__ == "__main__":
    main()
