"""Fixtures for the health tests: a migrated SQLite file database with two hosts and their GPUs."""

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
    """Ids of the seeded hosts ("alpha" with 2 GPUs, "beta" with 1) and GPUs by (host, idx)."""

    host_ids: dict[str, int]
    gpu_ids: dict[tuple[str, int], int]


def seed_fleet(database: Database) -> Seeded:
    """Store hosts alpha (2 GPUs) and beta (1 GPU)."""
    with database.session() as session:
        host_ids = sync_hosts(
            session, [HostFacts("alpha", "10.0.0.1"), HostFacts("beta", "10.0.0.2")], now=1000
        )
        gpu_ids: dict[tuple[str, int], int] = {}
        for host, count in (("alpha", 2), ("beta", 1)):
            facts = [GpuFacts(i, f"GPU-{host}-{i}", "Sim H100", memory_total_bytes=80 << 30)
                     for i in range(count)]
            result = upsert_gpus(session, host_ids[host], facts, now=1000)
            gpu_ids.update({(host, idx): gpu_id for idx, gpu_id in result.ids.items()})
    return Seeded(host_ids, gpu_ids)


@pytest.fixture
def seeded(database: Database) -> Seeded:
    return seed_fleet(database)
