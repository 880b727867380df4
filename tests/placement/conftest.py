"""Fixtures for placement tests: a fresh SQLite database seeded with hosts and GPUs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from db.engine import Database, open_database
from db.gpus import upsert_gpus
from db.hosts import sync_hosts
from db.types import GpuFacts, HostFacts


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    """A migrated database of its own (SQLite file or PostgreSQL database), closed after."""
    opened = open_database(db_url)
    yield opened
    opened.close()


@dataclass(frozen=True)
class Seeded:
    """Ids of seeded hosts and of their GPUs by (host, idx)."""

    host_ids: dict[str, int]
    gpu_ids: dict[tuple[str, int], int]


def seed(database: Database, gpus_per_host: dict[str, int], now: int = 1000) -> Seeded:
    """Hosts named by `gpus_per_host` (addresses 10.0.0.N), each with that many GPUs."""
    with database.session() as session:
        host_ids = sync_hosts(
            session,
            [HostFacts(name, f"10.0.0.{n + 1}") for n, name in enumerate(gpus_per_host)],
            now=now,
        )
        gpu_ids: dict[tuple[str, int], int] = {}
        for host, count in gpus_per_host.items():
            facts = [GpuFacts(i, f"GPU-{host}-{i}", "Sim H100", memory_total_bytes=80 << 30)
                     for i in range(count)]
            result = upsert_gpus(session, host_ids[host], facts, now=now)
            gpu_ids.update({(host, idx): gpu_id for idx, gpu_id in result.ids.items()})
    return Seeded(host_ids, gpu_ids)


@pytest.fixture
def seeded(database: Database) -> Seeded:
    """Two hosts: "alpha" with 2 GPUs and "beta" with 1."""
    return seed(database, {"alpha": 2, "beta": 1})
