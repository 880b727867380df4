"""Instructions per host-sample of `fleet monitor` (and of the floor) under callgrind.

CPU time on this shared box moves ±10–20 % between windows, more than most single changes to
the monitor's path save. The instructions a window executes barely move (±1 %), so an A/B of
source trees by instruction count shows what a change removes; CPU time (monitor_ab, make
bench) still says what it is worth, cache misses included.

Each tree's `fleet --json monitor -q` (or the floor, `peer_monitor_floor.py`) runs under
`valgrind --tool=callgrind` with instrumentation off; after the warm-up it is switched on for
the window, then the count is dumped. Host-samples are counted from the database by reading
time, as the bench does (the floor: hosts × window, one line per host per second).

Needs root (namespace hosts) and valgrind (Debian: valgrind). Slow: everything runs ~50× slower
under callgrind, so keep to 16 hosts or fewer (at 64 the monitor no longer keeps up).

Run: python -m tests.bench.monitor_instructions [--hosts 16] [--rounds 2] floor TREE [TREE ...]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench.common import fleet_env, in_turns
from tests.bench.lab import HostSet, start_lab

FLOOR = "floor"
HERE = Path(__file__).resolve().parent
WARMUP_S = 60.0  # start-up, connections and the first readings, all ~50x slower
WINDOW_S = 20.0


def _command(tree: str, host_set: HostSet) -> list[str]:
    if tree == FLOOR:
        lab = host_set.lab
        return [sys.executable, str(HERE / "peer_monitor_floor.py"), str(host_set.hosts_json),
                str(lab.client_key), str(lab.known_hosts_file), "100000", "1"]
    return [sys.executable, "-m", "fleet.cli.main", "--json", "--inventory",
            str(host_set.fleet_inventory), "monitor", "-q"]


def _dumped_instructions(dump: Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals line in {dump}")


def _host_samples(db_path: Path, start_s: float, end_s: float) -> int:
    window = (int(start_s * 1000), int(end_s * 1000))
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as database:
        count, = database.execute(
            "SELECT count(*) FROM host_samples WHERE ts >= ? AND ts < ?", window).fetchone()
    return int(count)


def measure(tree: str, host_set: HostSet) -> float:
    """Instructions (thousands) per host-sample of one window of `tree`'s monitor or the floor."""
    out = host_set.workdir / "callgrind.out"
    env = {**fleet_env(host_set.home, host_set.db_path),
           "PYTHONPATH": str(HERE.parent.parent) if tree == FLOOR else tree}
    process = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         *_command(tree, host_set)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, cwd=HERE.parent.parent if tree == FLOOR else tree)
    try:
        time.sleep(WARMUP_S)
        control = ["callgrind_control"]
        subprocess.run([*control, "-i", "on", str(process.pid)], check=True, capture_output=True)
        started = time.time()
        time.sleep(WINDOW_S)
        ended = time.time()
        subprocess.run([*control, "-i", "off", str(process.pid)], check=True, capture_output=True)
        subprocess.run([*control, "-d", str(process.pid)], check=True, capture_output=True)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    dumps = sorted(host_set.workdir.glob("callgrind.out.*"))  # the dump; the exit's is `out`
    if not dumps:
        raise RuntimeError(f"callgrind wrote no dump for {tree}")
    instructions = _dumped_instructions(dumps[-1])
    for dump in [out, *dumps]:
        dump.unlink(missing_ok=True)
    samples = (host_set.count * round(ended - started) if tree == FLOOR
               else _host_samples(host_set.db_path, started, ended))
    if samples < host_set.count * WINDOW_S * 0.5:
        raise RuntimeError(f"{tree}: only {samples} host-samples in the window (not keeping up?)")
    return instructions / samples / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("trees", nargs="+", help=f"source trees, or '{FLOOR}'")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("monitor_instructions: valgrind is not installed (Debian: apt install valgrind)")
    trees = [tree if tree == FLOOR else str(Path(tree).resolve()) for tree in args.trees]
    lab = start_lab(args.hosts)
    work = Path(tempfile.mkdtemp(prefix="fleet-monitor-instructions-"))
    try:
        host_sets = {tree: HostSet(lab, args.hosts, work / f"run{n}").write()
                     for n, tree in enumerate(trees)}
        taken = in_turns(trees, args.rounds, lambda tree: measure(tree, host_sets[tree]),
                         "k instructions per host-sample")
        for tree, values in taken.items():
            print(f"{tree}: {statistics.median(values):.0f} k instructions per host-sample; "
                  f"rounds {[round(value) for value in values]}")
    finally:
        lab.close()
        shutil.rmtree(work, ignore_errors=True)  # each run's databases and inventories


if __name__ == "__main__":
    main()
