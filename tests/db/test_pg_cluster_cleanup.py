"""The suite's PostgreSQL server never outlives its process: a SIGKILLed starter's watchdog
stops the server by its recorded PID and removes its directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.pgcluster import ClusterUnavailable, find_bindir

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTER = """
from tests.fixtures.pgcluster import start_cluster
import sys, time
cluster = start_cluster()
print(cluster.pid, cluster.base_dir, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_killed_test_run_leaves_no_server_and_no_data_directory() -> None:
    try:
        find_bindir()
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    if os.geteuid() == 0 and subprocess.run(["id", "postgres"], capture_output=True).returncode:
        pytest.skip("running as root but there is no `postgres` user")
    starter = subprocess.Popen([sys.executable, "-c", STARTER], cwd=REPO_ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        line = starter.stdout.readline()
        if not line:  # the starter could not start a server: say why
            starter.kill()
            pytest.skip(f"no PostgreSQL server: {starter.communicate(timeout=10)[1][-300:]}")
        pid_text, base = line.split()
        postmaster, base_dir = int(pid_text), Path(base)
        assert _alive(postmaster) and (base_dir / "data" / "PG_VERSION").exists()
    finally:
        starter.send_signal(signal.SIGKILL)
        starter.communicate(timeout=10)
    deadline = time.monotonic() + 15
    while (_alive(postmaster) or base_dir.exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(postmaster), "the server outlived the killed run"
    assert not base_dir.exists(), "the data directory outlived the killed run"
