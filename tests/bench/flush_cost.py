"""CPU of the monitor writer's steady 1 s flush, in process, on a fresh SQLite file.

Each flush holds one reading of every host (8 GPUs each, facts unchanged, hosts up), as a
steady `fleet monitor` writes; the first flushes (which write the facts) are not counted.

Run: python -m tests.bench.flush_cost [--hosts 1 16 64] [--flushes 200] [--repeats 3]
Prints one JSON line per size: CPU ms per flush (median of the repeats) and per host-sample.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from db.engine import open_database
from fleet.model import HostSpec
from fleet.monitor.batch import HostOutcomeIn
from fleet.monitor.writer import SampleWriter
from fleet.reports import GpuReport, HostReport, ProbeReport

GPUS_PER_HOST = 8
WARMUP_FLUSHES = 5


def _report(host: str, at: float, tick: int) -> ProbeReport:
    gpus = tuple(
        GpuReport(index=i, uuid=f"GPU-{host}-{i}", name="NVIDIA H100 80GB HBM3",
                  memory_total_bytes=80 << 30, memory_used_bytes=(tick % 7) << 30,
                  utilization_gpu_pct=float((tick + i) % 100), temperature_c=40.0 + i,
                  power_draw_w=120.5, power_limit_w=700.0, performance_state=0)
        for i in range(GPUS_PER_HOST)
    )
    host_report = HostReport(hostname=host, cpu_count=64, load_1m=1.5)
    return ProbeReport(schema=1, timestamp=at, host=host_report, gpus=gpus)


async def _flush_cpu(directory: Path, hosts: int, flushes: int) -> float:
    """CPU seconds (the whole process) per flush, after the warm-up flushes."""
    database = open_database(f"sqlite:///{directory / 'fleet.db'}")
    try:
        writer = SampleWriter(database, flush_rows=1 << 30)
        names = [f"node{n:03d}" for n in range(hosts)]
        await writer.register_hosts([HostSpec(name, f"10.0.0.{n}")
                                     for n, name in enumerate(names)])
        started_at = time.time()
        cpu_started = 0.0
        for tick in range(WARMUP_FLUSHES + flushes):
            if tick == WARMUP_FLUSHES:
                cpu_started = time.process_time()
            at = started_at + tick
            for name in names:
                writer.add_report(name, _report(name, at, tick))
                writer.add_host_outcome(HostOutcomeIn(name, "up", None, 0, at))
            await writer.flush()
        return (time.process_time() - cpu_started) / flushes
    finally:
        database.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--flushes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-flush-") as tmp:
        for hosts in args.hosts:
            runs = []
            for repeat in range(args.repeats):
                directory = Path(tmp) / f"{hosts}-{repeat}"
                directory.mkdir()
                runs.append(asyncio.run(_flush_cpu(directory, hosts, args.flushes)))
            per_flush = statistics.median(runs)
            print(json.dumps({
                "hosts": hosts, "gpus_per_host": GPUS_PER_HOST, "flushes": args.flushes,
                "cpu_ms_per_flush": round(per_flush * 1e3, 3),
                "cpu_ms_per_host_sample": round(per_flush * 1e3 / hosts, 4),
                "runs_ms": [round(run * 1e3, 3) for run in runs],
            }), flush=True)


if __name__ == "__main__":
    main()
