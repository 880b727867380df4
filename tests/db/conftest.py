"""Fixtures for the storage tests: a fresh SQLite file database and a small seeded fleet."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from db.engine import Database, open_database
from db.gpus import upsert_gpus
from db.hosts import sync_hosts
from db.types import GpuFacts, HostFacts

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where a test's database file goes (inside a not-yet-existing directory)."""
    return tmp_path / "data" / "fleet" / "fleet.db"


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    """A migrated database of its own (SQLite file or PostgreSQL database), closed after."""
    opened = open_database(db_url)
    yield opened
    opened.close()


@dataclass(frozen=True)
class SeededFleet:
    """Ids of the seeded hosts ("alpha" with 2 GPUs, "beta" with 1) and GPUs by (host, idx)."""

    host_ids: dict[str, int]
    gpu_ids: dict[tuple[str, int], int]


@pytest.fixture
def seeded(database: Database) -> SeededFleet:
    """Two hosts and three GPUs."""
    with database.session() as session:
        host_ids = sync_hosts(
            session,
            [HostFacts("alpha", "10.0.0.1"), HostFacts("beta", "10.0.0.2", port=2222)],
            now=1000,
        )
        gpu_ids: dict[tuple[str, int], int] = {}
        for host, count in (("alpha", 2), ("beta", 1)):
            facts = [
                GpuFacts(i, f"GPU-{host}-{i}", "Sim H100", memory_total_bytes=80 << 30)
                for i in range(count)
            ]
            result = upsert_gpus(session, host_ids[host], facts, now=1000)
            gpu_ids.update({(host, idx): gpu_id for idx, gpu_id in result.ids.items()})
    return SeededFleet(host_ids, gpu_ids)


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter (argv[1:] = args); fails the test on a non-zero exit."""
    env = {key: value for key, value in os.environ.items() if key != "FLEET_DB"}
    completed = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, f"subprocess failed:\n{completed.stdout}\n{completed.stderr}"
    return completed


# Prepended to racing subprocesses: `ready_then_wait_for_go(go_path)` prints "ready" and
# returns once the parent has created go_path, so all racers start their critical step together.
READY_GO_PRELUDE = """
import os, sys, time
def ready_then_wait_for_go(go_path):
    print("ready", flush=True)
    deadline = time.monotonic() + 30
    while not os.path.exists(go_path):
        if time.monotonic() > deadline:
            raise SystemExit("no go signal within 30 s")
        time.sleep(0.005)
"""


def race(code: str, go_path: Path, argument_lists: list[list[str]]) -> list[str]:
    """Start one process per argument list, release them together, return each one's stdout.

    `code` must call ready_then_wait_for_go(sys.argv[1]) before its racing step.
    """
    racers = [start_python(READY_GO_PRELUDE + code, str(go_path), *args) for args in argument_lists]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready", racer.communicate(timeout=30)
        go_path.touch()
        outputs = []
        for racer in racers:
            stdout, stderr = racer.communicate(timeout=60)
            assert racer.returncode == 0, stderr
            outputs.append(stdout.strip())
        return outputs
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.wait(timeout=10)


def start_python(code: str, *args: str) -> subprocess.Popen[str]:
    """Start `code` in a fresh interpreter without waiting (caller waits with a deadline)."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
