"""A database and inventory of idle simulated hosts with fresh samples, for API-level tests."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from db.engine import open_database
from db.gpus import upsert_gpus
from db.hosts import sync_hosts, update_host_state
from db.samples import record_samples
from db.types import GpuFacts, GpuSampleIn, HostFacts

GIB = 1 << 30


@dataclass(frozen=True)
class SeededFiles:
    """The database file and the inventory naming its hosts."""

    db_path: Path
    inventory_path: Path
    db: str


def seed_fresh_fleet(directory: Path, gpus_per_host: dict[str, int],
                     now: float | None = None, db_url: str | None = None) -> SeededFiles:
    """Hosts on 127.0.0.N:1 (never contacted: their samples are fresh) with idle GPUs, in
    `db_url` if given, else in directory/fleet.db (`db` is the one to open either way)."""
    moment = now if now is not None else time.time()
    names = list(gpus_per_host)
    inventory = directory / "inventory.yaml"
    inventory.write_text("hosts:\n" + "".join(
        f"  {name}:\n    address: 127.0.0.{n + 2}\n    port: 1\n" for n, name in enumerate(names)))
    db_path = directory / "fleet.db"
    database = open_database(db_url or str(db_path))
    try:
        with database.session() as session:
            host_ids = sync_hosts(session, [HostFacts(name, f"127.0.0.{n + 2}", port=1)
                                            for n, name in enumerate(names)], int(moment))
            samples = []
            for name, count in gpus_per_host.items():
                update_host_state(session, host_ids[name], "up", None, int(moment))
                facts = [GpuFacts(i, f"GPU-{name}-{i}", "Sim H100", memory_total_bytes=80 * GIB)
                         for i in range(count)]
                ids = upsert_gpus(session, host_ids[name], facts, int(moment)).ids
                samples += [GpuSampleIn(gpu_id, int(moment * 1000), utilization_gpu_pct=0.0,
                                        memory_used_bytes=0, temperature_c=35.0, process_count=0)
                            for gpu_id in ids.values()]
            record_samples(session, [], samples)
    finally:
        database.close()
    return SeededFiles(db_path, inventory, db_url or str(db_path))
