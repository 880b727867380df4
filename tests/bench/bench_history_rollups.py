"""Figure 4c: the 24 h bucketed history read from the 1-minute rollups beside the raw query.

The history databases of the storage figures (SQLite, and PostgreSQL in bench_storage_pg) are
rolled up to 10 minutes before their last sample, as the monitor's retention pass leaves them
(it runs every 5 minutes, 2 minutes behind); then db.rollup_history.gpu_history_with_rollups
and db.history.gpu_history answer the same query in turns, and their points are compared.

    python -m tests.bench.bench_history_rollups [--runs 15]

measures both paths on the cached SQLite databases of 1 M and 10 M samples alone (building and
rolling them up first if needed), without the rest of the storage section.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from tests.bench.bench_storage import END_MS, HISTORY_GPU
from tests.bench.common import Figure, Measured, Results, log

ROLLED_UNTIL_MS = END_MS - 10 * 60_000
SINCE_MS = END_MS - 86_400_000
EXACT = ("gpu_id", "ts_ms", "samples", "util_max", "mem_used_max", "temp_max", "power_max")
MEANS = ("util_avg", "mem_used_avg", "temp_avg", "power_avg")


def ensure_rolled_up(url: str) -> float:
    """Roll the database at `url` up to ROLLED_UNTIL_MS, minutes and then 5-minute periods as
    the retention pass does, unless it is; the seconds it took."""
    from db.engine import open_database
    from db.retention import rollup_gpu_five_minutes, rollup_gpu_minutes, rollup_watermark_ms

    database = open_database(url)
    try:
        started = time.monotonic()
        with database.session() as session:
            if rollup_watermark_ms(session) is None:
                rollup_gpu_minutes(session, until_ms=ROLLED_UNTIL_MS)
            periods = rollup_gpu_five_minutes(session).buckets
        rolled_s = time.monotonic() - started
        if periods and database.engine.dialect.name == "postgresql":
            # What autovacuum does after a big insert; the raw table was analysed when filled.
            with database.engine.connect() as connection:
                connection.exec_driver_sql("ANALYZE gpu_samples_1m")
                connection.exec_driver_sql("ANALYZE gpu_samples_5m")
                connection.commit()
        return rolled_s if periods else 0.0
    finally:
        database.close()


def _same(rolled: list[Any], raw: list[Any]) -> bool:
    """Exact counts and maxima, means within a relative 1e-9 (see tests/db/test_rollup_history)."""
    if [[getattr(p, n) for n in EXACT] for p in rolled] != [
            [getattr(p, n) for n in EXACT] for p in raw]:
        return False
    for got, want in zip(rolled, raw, strict=True):
        for name in MEANS:
            a, b = getattr(got, name), getattr(want, name)
            if (a is None) != (b is None) or (b is not None and abs(a - b) > 1e-9 * abs(b)):
                return False
    return True


def history_paths_ms(url: str, runs: int) -> tuple[list[float], list[float]]:
    """(raw path ms, rollup path ms) per run, one after the other in each run."""
    from db.engine import open_database
    from db.history import gpu_history
    from db.rollup_history import gpu_history_with_rollups
    from db.sql import SessionReader

    database = open_database(url)
    raw_ms: list[float] = []
    rolled_ms: list[float] = []
    try:
        for run in range(runs + 1):
            answers = []
            for query, times in ((gpu_history, raw_ms), (gpu_history_with_rollups, rolled_ms)):
                started = time.perf_counter()
                with database.sessionmaker() as session:
                    answers.append(query(SessionReader(session), since_ms=SINCE_MS, until_ms=END_MS,
                                         gpu=HISTORY_GPU, bucket_s=300))
                if run:  # the first run warms caches and compiled SQL
                    times.append((time.perf_counter() - started) * 1000)
            if len(answers[0]) != 288 or not _same(answers[1], answers[0]):
                raise RuntimeError(f"{url}: the rollup path's 288 points differ from raw")
    finally:
        database.close()
    return raw_ms, rolled_ms


def add_rollup_figure(results: Results, backend: str, sizes: list[tuple[int, str, int]]) -> None:
    """The figure for `backend` from (samples, url, runs) per database size, largest last."""
    measured = []
    for rows, url, runs in sizes:
        rolled_s = ensure_rolled_up(url)
        if rolled_s:
            log(f"{backend}: rolled {rows:,} samples up in {rolled_s:.0f} s")
        measured.append((rows, *history_paths_ms(url, runs)))
    rows, raw_ms, rolled_ms = measured[-1]
    figure = Figure(
        section="storage", name=f"24 h history from rollups, one GPU, {rows / 1e6:.1f} M "
                                f"samples, {backend}", unit="ms",
        compares="db.rollup_history.gpu_history_with_rollups (whole 5-minute periods from "
                 "gpu_samples_5m, the last 10 unrolled minutes from raw) vs "
                 "db.history.gpu_history over raw samples, one GPU over 24 h in 5 min buckets "
                 "(288 points, checked equal), in turns in each run",
        fleet=Measured("rollups + raw tail", rolled_ms),
        peers=[Measured("raw samples (gpu_history)", raw_ms, note="same runs")],
        extra=[Measured(f"rollups + raw tail, {small / 1e6:.1f} M samples", small_rolled,
                        note=f"raw {Measured('', small_raw).median or 0:.1f} ms")
               for small, small_raw, small_rolled in measured[:-1]],
        target="≤ 10 ms, flat from 1 M to 10 M samples")
    median = figure.fleet.median if figure.fleet else None
    if median is not None:
        figure.verdict = f"{median:.1f} ms: {'meets' if median <= 10 else 'misses'} ≤10 ms"
    results.add(figure)


def main() -> None:
    from tests.bench.bench_storage import _history_db

    parser = argparse.ArgumentParser(description="24 h history: rollups beside raw, SQLite")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for wanted in (1_000_000, 10_000_000):
        path, rows, _, _ = _history_db(wanted)
        url = f"sqlite:///{path}"
        ensure_rolled_up(url)
        raw_ms, rolled_ms = history_paths_ms(url, args.runs)
        print(f"{rows:,} samples: rollups + raw tail median {statistics.median(rolled_ms):.1f} ms "
              f"(min {min(rolled_ms):.1f}), raw median {statistics.median(raw_ms):.1f} ms "
              f"(min {min(raw_ms):.1f}), {args.runs} runs", flush=True)


if __name__ == "__main__":
    main()
