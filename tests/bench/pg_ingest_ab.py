"""PostgreSQL sample ingest of two source trees, interleaved on one durable throwaway server.

    python -m tests.bench.pg_ingest_ab BEFORE_TREE [AFTER_TREE] [--rounds 3]

Each round runs bench_storage_pg._ingest_rate (5 runs x 40 batches of 512 GPU + 64 host
samples, as the storage bench does) once per tree, each in its own process and fresh database,
so a change (e.g. a migration) is compared with the code before it under the same load. A tree
is a checkout, e.g. `git archive HEAD | tar -x -C /tmp/before`; AFTER_TREE defaults to this one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from tests.fixtures.pgcluster import start_cluster

HERE = Path(__file__).resolve().parents[2]
MEASURE = """
import json, sys
from tests.bench.bench_storage_pg import _ingest_rate
print(json.dumps(_ingest_rate(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
"""


def _rates(tree: Path, url: str, runs: int, batches: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", MEASURE, url, str(runs), str(batches)],
                          cwd=tree, env=env, capture_output=True, text=True, check=False,
                          timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: measuring failed:\n{done.stderr[-3000:]}")
    rates: list[float] = json.loads(done.stdout.splitlines()[-1])
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path, nargs="?", default=HERE)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args()
    import psycopg

    server = start_cluster(durable=True)
    found: dict[str, list[float]] = {"before": [], "after": []}
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            for round_number in range(args.rounds):
                for label in ("before", "after"):
                    name = f"{label}_{round_number}"
                    admin.execute(f"CREATE DATABASE {name}")
                    tree = args.before if label == "before" else args.after
                    rates = _rates(tree.resolve(), server.url(name), args.runs, args.batches)
                    found[label] += rates
                    print(f"round {round_number + 1} {label}: "
                          + " ".join(f"{rate:,.0f}" for rate in rates), flush=True)
    finally:
        server.stop()
    for label, rates in found.items():
        print(f"{label}: median {statistics.median(rates):,.0f} GPU samples/s "
              f"(min {min(rates):,.0f}, max {max(rates):,.0f}, {len(rates)} runs)")


if __name__ == "__main__":
    main()
