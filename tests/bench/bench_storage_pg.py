"""Figure 4b: GPU sample ingest and the 24 h history query on PostgreSQL, beside SQLite.

A throwaway PostgreSQL server with its default (durable) settings, started and removed here;
the same prepared batches go through db.samples.record_samples on both backends, and the
history query runs over the same generated samples on both.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.bench.bench_history_rollups import add_rollup_figure
from tests.bench.bench_storage import (
    BATCH_HOSTS,
    END_MS,
    GPUS_PER_HOST,
    HISTORY_GPU,
    INTERVAL_MS,
    SAMPLES_PER_GPU,
    _history_db,
)
from tests.bench.common import Figure, Measured, Results, log


def _fleet_rows(database: Any, hosts: int) -> tuple[list[int], list[int]]:
    """`hosts` hosts named gpu01… with 8 GPUs each, as the SQLite figures have; (host, GPU ids)."""
    from db.gpus import upsert_gpus
    from db.hosts import sync_hosts
    from db.types import GpuFacts, HostFacts

    with database.session() as session:
        host_ids = sync_hosts(session, [
            HostFacts(f"gpu{index + 1:02d}", f"10.9.{index // 250}.{index % 250 + 1}")
            for index in range(hosts)], now=0)
        gpu_ids: list[int] = []
        for host_id in host_ids.values():
            facts = [GpuFacts(idx, f"GPU-bench-{host_id:04d}-{idx}", "NVIDIA H100 80GB HBM3",
                              memory_total_bytes=85899345920) for idx in range(GPUS_PER_HOST)]
            gpu_ids += list(upsert_gpus(session, host_id, facts, now=0).ids.values())
    return list(host_ids.values()), gpu_ids


def _batches(host_ids: list[int], gpu_ids: list[int], count: int, ts: int) -> list[Any]:
    from db.types import GpuSampleIn, HostSampleIn

    prepared = []
    for step in range(count):
        at = ts + step * 1000
        prepared.append((
            [HostSampleIn(host_id=h, ts=at, load_1m=1.0, cpu_busy_pct=12.5) for h in host_ids],
            [GpuSampleIn(gpu_id=g, ts=at, utilization_gpu_pct=float(g % 100),
                         memory_used_bytes=g * 1024, temperature_c=55.0, power_draw_w=300.0,
                         process_count=1) for g in gpu_ids]))
    return prepared


def _ingest_rate(url: str, runs: int, batches: int, *, executemany: bool = False) -> list[float]:
    """GPU samples/s of record_samples (or, with `executemany`, the pre-COPY path) per run."""
    import db.samples
    from db.engine import open_database

    database = open_database(url)
    copy_rows = db.samples._copy_rows
    if executemany:  # what PostgreSQL got before COPY: one executemany per table
        db.samples._copy_rows = db.samples._execute_many
    rates = []
    try:
        host_ids, gpu_ids = _fleet_rows(database, BATCH_HOSTS)
        ts = END_MS
        for run in range(runs + 1):
            prepared = _batches(host_ids, gpu_ids, batches, ts)
            ts += batches * 1000
            started = time.perf_counter()
            for host_samples, gpu_samples in prepared:
                with database.sessionmaker() as session:
                    db.samples.record_samples(session, host_samples, gpu_samples)
            if run:  # the first run warms caches and compiled SQL
                rates.append(batches * len(gpu_ids) / (time.perf_counter() - started))
    finally:
        db.samples._copy_rows = copy_rows
        database.close()
    return rates


def _fill_history(server: Any, name: str, samples_wanted: int) -> tuple[int, float]:
    """The SQLite history database's samples, generated server-side; (rows, seconds)."""
    import psycopg

    from db.engine import open_database

    hosts = max(1, round(samples_wanted / (SAMPLES_PER_GPU * GPUS_PER_HOST)))
    gpus = hosts * GPUS_PER_HOST
    per_gpu = -(-samples_wanted // gpus)
    started = time.monotonic()
    database = open_database(server.url(name))
    try:
        _fleet_rows(database, hosts)
    finally:
        database.close()
    with psycopg.connect(server.dsn(name)) as connection:
        indexes = connection.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'gpu_samples' "
            "AND indexname <> 'pk_gpu_samples'").fetchall()
        for index_name, _ in indexes:
            connection.execute(f"DROP INDEX {index_name}")
        # The same values as the SQLite database's recursive CTE, in the monitor's write order.
        connection.execute(
            "INSERT INTO gpu_samples (gpu_id, ts, utilization_gpu_pct, utilization_memory_pct, "
            "memory_used_bytes, temperature_c, power_draw_w, process_count, lost) "
            "SELECT g.id, %(first)s + k.n * %(step)s, (k.n * 7 + g.id * 13) %% 101, "
            "(k.n * 3 + g.id) %% 101, ((k.n + g.id) %% 80)::bigint * 1073741824, "
            "30 + (k.n + g.id) %% 50, 100 + (k.n * 11) %% 600, (k.n + g.id) %% 3, false "
            "FROM generate_series(0, %(last)s) AS k(n) CROSS JOIN (SELECT id FROM gpus) AS g "
            "ORDER BY k.n, g.id",
            {"first": END_MS - per_gpu * INTERVAL_MS, "step": INTERVAL_MS, "last": per_gpu - 1})
        for _, definition in indexes:
            connection.execute(definition)
        connection.commit()
        connection.autocommit = True
        connection.execute("VACUUM ANALYZE gpu_samples")
    return per_gpu * gpus, time.monotonic() - started


def _history_ms(url: str, runs: int) -> list[float]:
    from db.engine import open_database
    from db.history import gpu_history
    from db.sql import SessionReader

    database = open_database(url)
    times = []
    try:
        for run in range(runs + 1):
            started = time.perf_counter()
            with database.sessionmaker() as session:
                points = gpu_history(SessionReader(session), since_ms=END_MS - 86_400_000,
                                     until_ms=END_MS, gpu=HISTORY_GPU, bucket_s=300)
            if len(points) != 288:
                raise RuntimeError(f"24 h at 5 min buckets should give 288 points: {len(points)}")
            if run:
                times.append((time.perf_counter() - started) * 1000)
    finally:
        database.close()
    return times


def storage_postgresql(results: Results, workdir: Path, quick: bool) -> None:
    """Ingest and history figures, PostgreSQL beside SQLite (skipped without a server)."""
    from tests.fixtures.pgcluster import ClusterUnavailable, start_cluster

    try:
        import psycopg
    except ImportError:
        results.skip("storage on PostgreSQL", "psycopg is not installed")
        return
    try:
        server = start_cluster(durable=True)
    except ClusterUnavailable as exc:
        results.skip("storage on PostgreSQL", str(exc))
        return
    runs, batches = (3, 10) if quick else (5, 40)
    samples_wanted = 1_000_000 if quick else 10_000_000
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            for name in ("ingest", "ingest_many", "history", "history_small"):
                admin.execute(f"CREATE DATABASE {name}")
            version = admin.execute("SHOW server_version").fetchone()
        workdir.mkdir(parents=True, exist_ok=True)
        log("storage on PostgreSQL: ingest (COPY, executemany) and SQLite in the same run")
        copy_rates = _ingest_rate(server.url("ingest"), runs, batches)
        many_rates = _ingest_rate(server.url("ingest_many"), runs, batches, executemany=True)
        sqlite_rates = _ingest_rate(f"sqlite:///{workdir / 'ingest-side.db'}", runs, batches)
        batch_gpus = BATCH_HOSTS * GPUS_PER_HOST
        figure = Figure(
            section="storage", name="GPU sample ingest, PostgreSQL", unit="samples/s",
            better="higher",
            compares=f"db.samples.record_samples on PostgreSQL {version[0] if version else ''} "
                     f"(default settings, fsync on; binary COPY, each batch committed with "
                     f"synchronous_commit off) vs SQLite (WAL, synchronous="
                     f"NORMAL): the same batches of {batch_gpus} GPU + {BATCH_HOSTS} host "
                     f"samples, one transaction each, {batches} batches per run",
            fleet=Measured("PostgreSQL COPY", copy_rates),
            peers=[Measured("SQLite record_samples", sqlite_rates, note="same run, same rows"),
                   Measured("PostgreSQL executemany", many_rates,
                            note="the path before COPY")],
            target="≥ 50,000 GPU samples/s")
        median = figure.fleet.median if figure.fleet else None
        if median:
            verdict = "meets" if median >= 50_000 else "misses"
            figure.verdict = f"{median:,.0f}/s: {verdict} ≥50,000/s"
        results.add(figure)

        log(f"storage on PostgreSQL: history over {samples_wanted:,} samples")
        rows, fill_s = _fill_history(server, "history", samples_wanted)
        log(f"generated {rows:,} samples on PostgreSQL in {fill_s:.0f} s")
        sqlite_path, sqlite_rows, _, _ = _history_db(samples_wanted)
        figure = Figure(
            section="storage", name=f"24 h history, one GPU, {rows / 1e6:.1f} M samples, "
                                    "PostgreSQL", unit="ms",
            compares="db.history.gpu_history, one GPU over 24 h in 5 min buckets (288 points), "
                     f"on PostgreSQL and on SQLite over the same {rows:,} generated samples",
            fleet=Measured("PostgreSQL", _history_ms(server.url("history"), runs)),
            peers=[Measured("SQLite", _history_ms(f"sqlite:///{sqlite_path}", runs),
                            note=f"{sqlite_rows:,} samples")],
            target="< 100 ms")
        median = figure.fleet.median if figure.fleet else None
        if median is not None:
            figure.verdict = f"{median:.1f} ms: {'meets' if median < 100 else 'misses'} <100 ms"
        results.add(figure)

        log("storage on PostgreSQL: history from rollups beside raw")
        sizes = [(rows, server.url("history"), runs)]
        if samples_wanted > 1_000_000:
            small_rows, _ = _fill_history(server, "history_small", 1_000_000)
            sizes.insert(0, (small_rows, server.url("history_small"), runs))
        add_rollup_figure(results, "PostgreSQL", sizes)
    finally:
        server.stop()
