"""Figure 4: GPU sample ingest rate, the 24 h bucketed history query on a big database, and
allocation claims per second from 16 concurrent processes (no conflict lost)."""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import shutil
import sqlite3
import threading
import time
from pathlib import Path

from tests.bench.common import (
    CACHE_DIR,
    FLEET_CLI,
    Figure,
    Measured,
    Results,
    fleet_env,
    log,
    time_command,
)

HOSTS = 64
GPUS_PER_HOST = 8
BATCH_HOSTS = 64  # one monitor flush at 1 s: 64 hosts × 8 GPUs
INTERVAL_MS = 5000
END_MS = 1_767_225_600_000  # 2026-01-01T00:00Z: fixed so the cached database stays valid
CLAIM_PROCESSES = 16
SAMPLES_PER_GPU = 27 * 3600 * 1000 // INTERVAL_MS
HISTORY_GPU = "gpu01:3"


def fill_hosts_and_gpus(db_path: Path, hosts: int = HOSTS) -> list[int]:
    """A migrated database at db_path with `hosts` × 8 GPUs; returns the GPU ids."""
    from db.engine import open_database

    open_database(str(db_path)).close()
    with contextlib.closing(sqlite3.connect(db_path)) as conn, conn:
        for index in range(hosts):
            conn.execute(
                "INSERT INTO hosts (name, address, port, user, connection, source, groups_json, "
                "labels_json, state, drained, first_seen, last_seen) VALUES "
                "(?, ?, 22, 'root', 'ssh', 'inventory', '[]', '[]', 'up', 0, 0, 0)",
                (f"gpu{index + 1:02d}", f"10.9.{index // 250}.{index % 250 + 1}"))
        host_ids = [row[0] for row in conn.execute("SELECT id FROM hosts ORDER BY id")]
        for host_id in host_ids:
            for idx in range(GPUS_PER_HOST):
                conn.execute(
                    "INSERT INTO gpus (host_id, idx, uuid, name, memory_total_bytes, state, "
                    "drained, first_seen, last_seen) VALUES (?, ?, ?, 'NVIDIA H100 80GB HBM3', "
                    "85899345920, 'ok', 0, 0, 0)",
                    (host_id, idx, f"GPU-bench-{host_id:04d}-{idx}"))
        return [row[0] for row in conn.execute("SELECT id FROM gpus ORDER BY id")]


def _ingest(results: Results, workdir: Path, runs: int, batches: int) -> None:
    from db.engine import open_database
    from db.samples import record_samples
    from db.types import GpuSampleIn, HostSampleIn

    db_path = workdir / "ingest.db"
    gpu_ids = fill_hosts_and_gpus(db_path)
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        host_ids = [row[0] for row in conn.execute("SELECT id FROM hosts ORDER BY id")]
    database = open_database(str(db_path))
    fleet_rates, floor_rates = [], []
    ts = END_MS
    try:
        for _ in range(runs + 1):
            prepared = []
            for _ in range(batches):
                ts += 1000
                prepared.append((
                    [HostSampleIn(host_id=h, ts=ts, load_1m=1.0, cpu_busy_pct=12.5)
                     for h in host_ids],
                    [GpuSampleIn(gpu_id=g, ts=ts, utilization_gpu_pct=float(g % 100),
                                 memory_used_bytes=g * 1024, temperature_c=55.0,
                                 power_draw_w=300.0, process_count=1) for g in gpu_ids]))
            started = time.perf_counter()
            for host_samples, gpu_samples in prepared:
                with database.sessionmaker() as session:
                    record_samples(session, host_samples, gpu_samples)
            fleet_rates.append(batches * len(gpu_ids) / (time.perf_counter() - started))
        fleet_rates = fleet_rates[1:]  # first run warms the page cache and compiled SQL
    finally:
        database.close()
    # The floor: the same rows through the bare sqlite3 module, one transaction per batch.
    floor_path = workdir / "floor.db"
    shutil.copy(db_path, floor_path)
    with contextlib.closing(sqlite3.connect(floor_path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        for _ in range(runs):
            rows_by_batch = []
            for _ in range(batches):
                ts += 1000
                rows_by_batch.append([(g, ts, float(g % 100), g * 1024, 55.0, 300.0, 1, 0)
                                      for g in gpu_ids])
            started = time.perf_counter()
            for rows in rows_by_batch:
                conn.execute("BEGIN")
                conn.executemany(
                    "INSERT INTO gpu_samples (gpu_id, ts, utilization_gpu_pct, memory_used_bytes,"
                    " temperature_c, power_draw_w, process_count, lost) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
                conn.execute("COMMIT")
            floor_rates.append(batches * len(gpu_ids) / (time.perf_counter() - started))
    figure = Figure(
        section="storage", name="GPU sample ingest", unit="samples/s", better="higher",
        compares=f"db.samples.record_samples, batches of {len(gpu_ids)} GPU + {len(host_ids)} "
                 f"host samples (one 1 s flush of {HOSTS}×{GPUS_PER_HOST}), one transaction "
                 f"each, SQLite WAL synchronous=NORMAL; {batches} batches per run",
        fleet=Measured("record_samples", fleet_rates),
        peers=[Measured("bare sqlite3 executemany", floor_rates,
                        note="same GPU rows, no host rows, no SQLAlchemy: the disk's floor")],
        target="≥ 50,000 GPU samples/s")
    median = figure.fleet.median if figure.fleet else None
    floor = figure.peers[0].median
    if median and floor:
        figure.verdict = (f"{median:,.0f}/s: {'meets' if median >= 50_000 else 'misses'} "
                          f"≥50,000/s; {100 * median / floor:.0f}% of what bare sqlite3 "
                          "reached on this disk in the same run")
    results.add(figure)


def _history_db(samples_wanted: int) -> tuple[Path, int, int, float]:
    """The cached big database: (path, rows, rows per GPU, generation seconds or 0 if reused)."""
    from db.migrate import HEAD_REVISION

    # Every GPU holds ~27 h at 5 s, so the 24 h query reads the same rows at every size;
    # smaller databases have fewer GPUs (query time against database size = the scaling).
    hosts = max(1, round(samples_wanted / (SAMPLES_PER_GPU * GPUS_PER_HOST)))
    gpus = hosts * GPUS_PER_HOST
    per_gpu = -(-samples_wanted // gpus)
    rows = per_gpu * gpus
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / f"history-{rows}-g{gpus}-i{INTERVAL_MS}-rev{HEAD_REVISION}.db"
    if path.exists():
        return path, rows, per_gpu, 0.0
    for stale in CACHE_DIR.glob(f"history-{rows}-g{gpus}-i{INTERVAL_MS}-rev*.db"):
        stale.unlink()  # the same size for an older schema revision: 10 M samples ≈ 750 MB
    started = time.monotonic()
    building = path.with_suffix(".building")
    for stale in CACHE_DIR.glob(f"{building.name}*"):
        stale.unlink()
    fill_hosts_and_gpus(building, hosts)
    first_ts = END_MS - per_gpu * INTERVAL_MS
    with contextlib.closing(sqlite3.connect(building, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-400000")
        index_sql = [row[0] for row in conn.execute(
            "SELECT sql FROM sqlite_master WHERE type='index' AND tbl_name='gpu_samples' "
            "AND sql IS NOT NULL")]
        for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='gpu_samples' "
                "AND sql IS NOT NULL").fetchall():
            conn.execute(f'DROP INDEX "{name}"')
        conn.execute("BEGIN")
        # In time order, every GPU per timestamp: the order the monitor writes in.
        conn.execute(
            "WITH RECURSIVE k(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM k WHERE n < ?) "
            "INSERT INTO gpu_samples (gpu_id, ts, utilization_gpu_pct, utilization_memory_pct, "
            "memory_used_bytes, temperature_c, power_draw_w, process_count, lost) "
            "SELECT g.id, ? + k.n * ?, (k.n * 7 + g.id * 13) % 101, (k.n * 3 + g.id) % 101, "
            "((k.n + g.id) % 80) * 1073741824, 30 + (k.n + g.id) % 50, 100 + (k.n * 11) % 600, "
            "(k.n + g.id) % 3, 0 FROM k CROSS JOIN (SELECT id FROM gpus ORDER BY id) AS g",
            (per_gpu - 1, first_ts, INTERVAL_MS))
        conn.execute("COMMIT")
        for sql in index_sql:
            conn.execute(sql)
        conn.execute("ANALYZE")
    building.rename(path)
    return path, rows, per_gpu, time.monotonic() - started


def _history(results: Results, workdir: Path, runs: int, samples_wanted: int) -> None:
    from db.engine import open_database
    from db.history import gpu_history
    from db.sql import SessionReader

    log(f"history database: {samples_wanted:,} GPU samples (cached under {CACHE_DIR})")
    path, rows, per_gpu, generated_s = _history_db(samples_wanted)
    if generated_s:
        log(f"generated {rows:,} samples in {generated_s:.0f} s")
    since_ms, until_ms = END_MS - 86_400_000, END_MS
    database = open_database(str(path))
    in_process = []
    points = 0
    try:
        for index in range(runs + 1):
            started = time.perf_counter()
            with database.sessionmaker() as session:
                result = gpu_history(SessionReader(session), since_ms=since_ms, until_ms=until_ms,
                                     gpu=HISTORY_GPU, bucket_s=300)
            elapsed = time.perf_counter() - started
            points = len(result)
            if index:
                in_process.append(elapsed * 1000)
    finally:
        database.close()
    if points != 288:
        raise RuntimeError(f"24 h at 5 min buckets should give 288 points, got {points}")
    home = workdir / "history-home"
    home.mkdir(exist_ok=True)
    cli = time_command(
        [*FLEET_CLI, "--json", "history", "gpus", "--gpu", HISTORY_GPU,
         "--since", str(since_ms // 1000), "--until", str(until_ms // 1000), "--bucket", "5m"],
        runs=runs, env=fleet_env(home, path))
    figure = Figure(
        section="storage", name=f"24 h history, one GPU, {rows / 1e6:.1f} M samples", unit="ms",
        compares="db.history.gpu_history one GPU over 24 h in 5 min buckets (288 points) on a "
                 f"database of {rows:,} GPU samples ({rows // per_gpu} GPUs, "
                 f"{INTERVAL_MS // 1000} s interval); and the whole `fleet history gpus` process",
        fleet=Measured("query (in process)", in_process),
        extra=[Measured("`fleet --json history gpus --bucket 5m` process",
                        [s * 1000 for s in cli], note="whole CLI process incl. start-up")],
        target="< 100 ms")
    median = figure.fleet.median if figure.fleet else None
    if median is not None:
        figure.verdict = f"{median:.1f} ms: {'meets' if median < 100 else 'misses'} <100 ms"
    if samples_wanted < 10_000_000:
        figure.notes.append(f"{rows:,} samples (quick mode or budget), not 10 M")
    results.add(figure)


def _claim_worker(db_path: str, gpu_ids: list[int], seconds: float, seed: int,
                  queue: multiprocessing.Queue[tuple[int, int, list[str]]],
                  ready: threading.Barrier) -> None:
    from db.allocations import active_gpu_ids, claim_gpus, release_allocations
    from db.engine import open_database
    from db.errors import AllocationConflict

    rng = random.Random(seed)
    database = open_database(db_path, migrate=False)
    claimed = conflicts = 0
    other: list[str] = []
    with database.session() as session:  # connect + pragmas before the clock starts
        active_gpu_ids(session, gpu_ids[:1])
    ready.wait(timeout=120)  # every process is imported and connected: start together
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        gpu = rng.choice(gpu_ids)
        try:
            with database.session() as session:
                ids = claim_gpus(session, [gpu], kind="reservation", owner=f"bench{seed}",
                                 now=int(time.time()))
            claimed += 1
            with database.session() as session:
                release_allocations(session, now=int(time.time()), reason="bench",
                                    allocation_ids=ids)
        except AllocationConflict:
            conflicts += 1
        except Exception as exc:
            other.append(f"{type(exc).__name__}: {exc}"[:200])
    database.close()
    queue.put((claimed, conflicts, other))


def _claims(results: Results, workdir: Path, runs: int, seconds: float) -> None:
    db_path = workdir / "claims.db"
    gpu_ids = fill_hosts_and_gpus(db_path, hosts=4)  # 32 GPUs: 16 processes collide often
    rates, conflict_counts, lost, claimed_total = [], [], 0, 0
    context = multiprocessing.get_context("fork")
    for run in range(runs):
        queue: multiprocessing.Queue[tuple[int, int, list[str]]] = context.Queue()
        ready = context.Barrier(CLAIM_PROCESSES)
        workers = [context.Process(target=_claim_worker,
                                   args=(str(db_path), gpu_ids, seconds, run * 100 + i, queue,
                                         ready))
                   for i in range(CLAIM_PROCESSES)]
        for worker in workers:
            worker.start()
        outcomes = [queue.get(timeout=seconds + 180) for _ in workers]
        for worker in workers:
            worker.join(timeout=30)
        claimed = sum(o[0] for o in outcomes)
        conflicts = sum(o[1] for o in outcomes)
        errors = [e for o in outcomes for e in o[2]]
        claimed_total += claimed
        with contextlib.closing(sqlite3.connect(db_path)) as conn:
            rows = conn.execute("SELECT count(*) FROM allocations").fetchone()[0]
            active = conn.execute(
                "SELECT count(*) FROM allocations WHERE released_at IS NULL").fetchone()[0]
        missing = claimed_total - rows  # claims a process counted that the database lacks
        lost += len(errors) + active + abs(missing)
        rates.append(claimed / seconds)
        conflict_counts.append(conflicts)
        if errors:
            results.notes.append(f"claims run {run}: {len(errors)} non-conflict errors, e.g. "
                                 f"{errors[0]}")
        log(f"claims run {run}: {claimed} claimed, {conflicts} conflicts, {len(errors)} errors, "
            f"{rows} rows so far, {active} left active")
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        total_rows = conn.execute("SELECT count(*) FROM allocations").fetchone()[0]
    figure = Figure(
        section="storage", name=f"allocation claims, {CLAIM_PROCESSES} processes",
        unit="claims/s", better="higher",
        compares=f"db.allocations.claim_gpus + release, {CLAIM_PROCESSES} processes on one "
                 f"SQLite file, random GPU of {len(gpu_ids)}, {seconds:g} s per run",
        fleet=Measured("claim_gpus (committed claims)", rates),
        target="zero conflicts lost")
    figure.verdict = (f"{sum(conflict_counts):,} conflicts all reported as AllocationConflict; "
                      f"{lost} lost (non-conflict errors or claims left active); "
                      f"{total_rows:,} rows = committed claims")
    results.add(figure)


def storage(results: Results, workdir: Path, quick: bool) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    runs = 3 if quick else 5
    log("storage: ingest")
    _ingest(results, workdir, runs, batches=10 if quick else 40)
    log("storage: ingest into a grown database")
    from tests.bench.bench_ingest_grown import grown_ingest

    grown_ingest(results, workdir / "grown", quick)
    log("storage: history query")
    _history(results, workdir, runs, 1_000_000 if quick else 10_000_000)
    log("storage: history query from rollups")
    from tests.bench.bench_history_rollups import add_rollup_figure

    sizes = []
    for wanted in [1_000_000] if quick else [1_000_000, 10_000_000]:
        path, rows, _, _ = _history_db(wanted)
        sizes.append((rows, f"sqlite:///{path}", runs))
    add_rollup_figure(results, "SQLite", sizes)
    log("storage: allocation claims")
    _claims(results, workdir, 2 if quick else 3, 3.0 if quick else 5.0)
    log("storage: PostgreSQL beside SQLite")
    from tests.bench.bench_storage_pg import storage_postgresql

    storage_postgresql(results, workdir / "postgresql", quick)
