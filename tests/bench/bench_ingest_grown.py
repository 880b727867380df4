"""GPU sample ingest once the database has grown: fleet's SQLite settings against SQLite's
defaults on the same grown file, and against a fresh file, in one run."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

from tests.bench.bench_storage import END_MS, GPUS_PER_HOST, HOSTS, fill_hosts_and_gpus
from tests.bench.common import Figure, Measured, Results, log

# SQLite's own defaults: a checkpoint per 1,000 WAL pages, 2,000 KiB of page cache.
SQLITE_DEFAULT_AUTOCHECKPOINT = 1000
SQLITE_DEFAULT_CACHE_KIB = 2000
READING_MS = 1000  # every host and GPU read once a second (monitor.interval's default)


def grown_ingest(results: Results, workdir: Path, quick: bool) -> None:
    """The monitor's flushes into a file that already holds minutes of every GPU's history."""
    from fleet.monitor.settings import MonitorSettings

    per_flush = round(MonitorSettings().flush_interval * 1000 / READING_MS)  # the default
    history_s = 5 * 60 if quick else 20 * 60
    seconds, runs = (20, 2) if quick else (60, 3)
    workdir.mkdir(parents=True, exist_ok=True)
    fresh, gpu_ids, host_ids = _fresh_db(workdir)
    grown = _grown_db(workdir, fresh, len(gpu_ids), history_s)
    cost: dict[str, list[float]] = {"fleet": [], "defaults": [], "fresh": [], "1s": []}
    written: dict[str, list[float]] = {variant: [] for variant in cost}
    variants = (("fleet", grown, per_flush), ("defaults", grown, per_flush),
                ("fresh", fresh, per_flush), ("1s", grown, 1))
    for _ in range(runs):  # variants interleaved, so drifting load hits all alike
        for variant, source, readings in variants:
            with _sqlite_settings(default=variant == "defaults"):
                cpu_us, written_kib = _flush_cost(source, workdir / f"{variant}.db", gpu_ids,
                                                  host_ids, seconds, readings)
            cost[variant].append(cpu_us)
            written[variant].append(written_kib)
    samples = len(gpu_ids)

    def kib(variant: str) -> str:
        return f"writes {statistics.median(written[variant]) / 1024:.2f} MiB a second"

    figure = Figure(
        section="storage", name="GPU sample ingest into a grown database", unit="µs CPU/sample",
        compares=f"db.samples.record_samples, {seconds} s of readings at 1 s ({HOSTS} hosts × "
                 f"{GPUS_PER_HOST} GPUs = {samples} GPU samples a second), {per_flush} s of "
                 "readings per transaction (the monitor's default flush), into a file already "
                 f"holding {history_s // 60} min of every GPU's history at 1 s: there every "
                 "GPU's newest (gpu_id, ts) index entries sit on a page of their own, so each "
                 "flush dirties a 4 KiB page per GPU. fleet's SQLite settings (db/sqlite.py) vs "
                 "SQLite's defaults on the same file, and vs a fresh file (the cost before the "
                 "index spreads out); CPU of the process (user+sys), the closing checkpoint "
                 "included; bytes the process wrote (WAL and checkpoint, /proc/self/io wchar) "
                 "per second of readings",
        fleet=Measured("fleet's settings, grown file", cost["fleet"], note=kib("fleet")),
        peers=[Measured("SQLite's defaults, grown file", cost["defaults"],
                        note=f"wal_autocheckpoint {SQLITE_DEFAULT_AUTOCHECKPOINT}, cache_size "
                             f"-{SQLITE_DEFAULT_CACHE_KIB}; {kib('defaults')}"),
               Measured("fleet's settings, fresh file", cost["fresh"],
                        note=f"the floor: the same flushes before the history exists; "
                             f"{kib('fresh')}")],
        extra=[Measured("fleet's settings, grown file, 1 s flushes", cost["1s"],
                        note=f"monitor.flush_interval: 1s; {kib('1s')}")],
        target="cheaper than SQLite's defaults on the same grown file")
    ours, defaults, floor, each_second = (statistics.median(cost[key]) for key in (
        "fleet", "defaults", "fresh", "1s"))
    if ours and defaults and floor:
        figure.verdict = (
            f"{ours:.1f} µs per GPU sample: {defaults / ours:.2f}× cheaper than SQLite's "
            f"defaults ({defaults:.1f} µs), {ours / floor:.1f}× a fresh file's {floor:.1f} µs; "
            f"at {GPUS_PER_HOST} GPUs per host {GPUS_PER_HOST * (ours - floor) / 1000:.3f} ms of "
            "writer CPU per host-sample more than the fresh file the monitor figures start from; "
            f"1 s flushes: {each_second:.1f} µs and "
            f"{statistics.median(written['1s']) / statistics.median(written['fleet']):.1f}× "
            f"the bytes written ({kib('fleet')} with {per_flush} s flushes)")
    results.add(figure)


def _fresh_db(workdir: Path) -> tuple[Path, list[int], list[int]]:
    """A migrated file with the hosts and GPUs and no samples; returns it and their ids."""
    path = workdir / "ingest-fresh.db"
    for stale in workdir.glob(f"{path.name}*"):
        stale.unlink()
    gpu_ids = fill_hosts_and_gpus(path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        host_ids = [row[0] for row in conn.execute("SELECT id FROM hosts ORDER BY id")]
    return path, gpu_ids, host_ids


def _grown_db(workdir: Path, fresh: Path, gpus: int, history_s: int) -> Path:
    """`fresh` plus history_s seconds of every GPU at 1 s, inserted in time order with the
    indexes in place (the page layout a running monitor leaves behind)."""
    path = workdir / "ingest-grown.db"
    for stale in workdir.glob(f"{path.name}*"):
        stale.unlink()
    shutil.copy(fresh, path)
    started = time.monotonic()
    first_ts = END_MS - history_s * READING_MS
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA cache_size=-400000")
        conn.execute("BEGIN")
        conn.execute(
            "WITH RECURSIVE k(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM k WHERE n < ?) "
            "INSERT INTO gpu_samples (gpu_id, ts, utilization_gpu_pct, memory_used_bytes, "
            "temperature_c, power_draw_w, process_count, lost) "
            "SELECT g.id, ? + k.n * ?, (k.n * 7 + g.id * 13) % 101, ((k.n + g.id) % 80) * 1024, "
            "30 + (k.n + g.id) % 50, 100 + (k.n * 11) % 600, (k.n + g.id) % 3, 0 "
            "FROM k CROSS JOIN (SELECT id FROM gpus ORDER BY id) AS g ORDER BY k.n, g.id",
            (history_s - 1, first_ts, READING_MS))
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    log(f"grown ingest database: {history_s * gpus:,} GPU samples in "
        f"{time.monotonic() - started:.1f} s")
    return path


@contextlib.contextmanager
def _sqlite_settings(*, default: bool) -> Iterator[None]:
    """fleet's SQLite settings, or SQLite's own defaults in their place, for connections
    opened inside (db.sqlite.apply_pragmas reads them at each connect)."""
    import db.sqlite

    kept = db.sqlite.WAL_AUTOCHECKPOINT_PAGES, db.sqlite.WRITER_CACHE_KIB
    if default:
        db.sqlite.WAL_AUTOCHECKPOINT_PAGES = SQLITE_DEFAULT_AUTOCHECKPOINT
        db.sqlite.WRITER_CACHE_KIB = SQLITE_DEFAULT_CACHE_KIB
    try:
        yield
    finally:
        db.sqlite.WAL_AUTOCHECKPOINT_PAGES, db.sqlite.WRITER_CACHE_KIB = kept


def _flush_cost(source: Path, path: Path, gpu_ids: list[int], host_ids: list[int],
                seconds: int, readings_per_flush: int) -> tuple[float, float]:
    """CPU µs per GPU sample, and KiB written per second of readings, of `seconds` of 1 s
    readings of every host and GPU into a copy of source, `readings_per_flush` seconds of them
    per transaction (as the monitor's flushes)."""
    from db.engine import open_database
    from db.samples import record_samples
    from db.types import GpuSampleIn, HostSampleIn

    for stale in path.parent.glob(f"{path.name}*"):
        stale.unlink()
    shutil.copy(source, path)
    batches: list[tuple[list[HostSampleIn], list[GpuSampleIn]]] = []
    for second in range(seconds):
        if second % readings_per_flush == 0:
            batches.append(([], []))
        ts = END_MS + (second + 1) * READING_MS
        host_samples, gpu_samples = batches[-1]
        host_samples += [HostSampleIn(host_id=h, ts=ts, load_1m=1.0, cpu_busy_pct=12.5)
                         for h in host_ids]
        gpu_samples += [GpuSampleIn(gpu_id=g, ts=ts, utilization_gpu_pct=float((g + second) % 100),
                                    memory_used_bytes=g * 1024, temperature_c=55.0,
                                    power_draw_w=300.0, process_count=1) for g in gpu_ids]
    database = open_database(str(path))
    try:
        started, written_before = time.process_time(), _bytes_written()
        for host_samples, gpu_samples in batches:
            with database.sessionmaker() as session:
                record_samples(session, host_samples, gpu_samples)
        # The checkpoint the larger spacing defers is counted too: every variant ends with its
        # WAL copied into the file.
        with database.engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
        spent, written = time.process_time() - started, _bytes_written() - written_before
    finally:
        database.close()
    return 1e6 * spent / (seconds * len(gpu_ids)), written / 1024 / seconds


def _bytes_written() -> int:
    """Bytes this process has passed to write calls so far (/proc/self/io wchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("no wchar line in /proc/self/io")
