"""A/B of the fresh fan-out (`fleet --json status`) between source trees, beside the asyncssh
floor, with the whole box's CPU each run took.

Each run is timed as `make bench` times it (a whole process), and the box's busy CPU seconds
(/proc/stat, every process: controller, sshd, the hosts' probes) are read around it, which
says whether a run was CPU-bound (busy CPU ÷ wall near the core count) and what each host
costs in CPU beyond the floor. Trees (checkouts of fleet, e.g. a `git worktree` of an older
commit), the floor and the floor's client running this checkout's probe (the hosts' share
without fleet's controller) run in turns, so the box's drift hits all alike. Needs root (namespace
hosts).

Run: python -m tests.bench.fanout_ab [--hosts 16,32] [--rounds 5] TREE [TREE ...]
Prints, per host count and command: median wall, its ratio to the floor's, median busy CPU and
busy CPU ÷ wall.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tests.bench.bench_fanout import FLOOR, PROBE_PEER, floor_argv
from tests.bench.common import FLEET_CLI, fleet_env, host_counts
from tests.bench.lab import HostSet, start_lab

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def busy_cpu_s() -> float:
    """CPU seconds every core of the box has spent busy since boot (/proc/stat, all but idle
    and iowait)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / _TICKS_PER_S


def timed(argv: list[str], env: dict[str, str] | None) -> tuple[float, float]:
    """(wall seconds, busy CPU seconds of the box) of one whole-process run of `argv`."""
    busy_before = busy_cpu_s()
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, timeout=300, check=False)
    wall = time.perf_counter() - started
    busy = busy_cpu_s() - busy_before
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:4]}… exited {done.returncode}: "
                           f"{done.stderr.decode(errors='replace')[-800:]}")
    return wall, busy


Command = tuple[list[str], dict[str, str] | None]  # argv, environment (None: this one's)


def commands(host_set: HostSet, trees: list[str]) -> dict[str, Command]:
    """The floor's command, the floor's client running this checkout's probe, and each tree's
    `fleet --json status`, by label."""
    runs: dict[str, Command] = {
        FLOOR: (floor_argv(host_set), None),
        PROBE_PEER: (floor_argv(host_set, with_probe=True), None),
    }
    for tree in trees:
        env = {**fleet_env(host_set.home, host_set.db_path), "PYTHONPATH": tree}
        runs[tree] = ([*FLEET_CLI, "--json", "--inventory", str(host_set.fleet_inventory),
                       "status", "--timeout", "30s"], env)
    return runs


def _tree(text: str) -> str:
    """A checkout of fleet (a directory holding fleet/cli/main.py), as an absolute path."""
    tree = Path(text).resolve()
    if not (tree / "fleet" / "cli" / "main.py").is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a fleet checkout (no fleet/cli/main.py)")
    return str(tree)


def _rounds(text: str) -> int:
    try:
        rounds = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from exc
    if not 1 <= rounds <= 100:
        raise argparse.ArgumentTypeError(f"rounds must be 1 to 100, not {rounds}")
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.fanout_ab",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=_tree, metavar="TREE")
    parser.add_argument("--hosts", type=host_counts, default=[16, 32], help="host counts [16,32]")
    parser.add_argument("--rounds", type=_rounds, default=5, help="runs of each command [5]")
    args = parser.parse_args()
    counts: list[int] = args.hosts
    lab = start_lab(max(counts))
    try:
        with tempfile.TemporaryDirectory(prefix="fleet-fanout-ab-") as workdir:
            for count in counts:
                host_set = HostSet(lab, count, Path(workdir) / f"hosts{count}").write()
                runs = commands(host_set, args.trees)
                for argv, env in runs.values():
                    timed(argv, env)  # warm-up: page cache, bytecode, the hosts' code cache
                measured: dict[str, list[tuple[float, float]]] = {label: [] for label in runs}
                for _round in range(args.rounds):
                    for label, (argv, env) in runs.items():
                        measured[label].append(timed(argv, env))
                floor_wall = statistics.median(wall for wall, _ in measured[FLOOR])
                for label, pairs in measured.items():
                    wall = statistics.median(wall for wall, _ in pairs)
                    busy = statistics.median(cpu for _, cpu in pairs)
                    print(f"{count:3d} hosts  {label:30s} wall {wall:.3f} s "
                          f"({wall / floor_wall:.2f}× floor)  busy CPU {busy:.2f} s "
                          f"(÷ wall {busy / wall:.2f})", flush=True)
    finally:
        lab.close()


if __name__ == "__main__":
    main()
