"""`fleet status` on a current SQLite file records through the stdlib driver: no SQLAlchemy.

The first run creates and migrates the file (through SQLAlchemy's engine); every later run
opens, probes and records with the stdlib sqlite3 driver alone (db.engine.Database.writer). The
same run against the same file named with a URL option goes through the engine and a session
instead, and must leave the same rows behind.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from tests.fixtures.module_report import REPORT_MODULES, packages, split_report

ROOT = Path(__file__).resolve().parents[2]


def _status(home: Path, db: str, env: dict[str, str]) -> tuple[int, dict[str, object], set[str]]:
    """Exit code, JSON output and top-level packages loaded by one `fleet --json status`."""
    run_env = {key: value for key, value in os.environ.items()
               if not key.startswith(("FLEET_", "XDG_"))}
    run_env.update({"HOME": str(home), "XDG_RUNTIME_DIR": str(home / ".run"),
                    "PYTHONPATH": str(ROOT), **env})
    done = subprocess.run([sys.executable, "-c", REPORT_MODULES, "--db", db, "--json", "status"],
                          cwd=home, env=run_env, capture_output=True, text=True, timeout=120,
                          check=False)
    stderr, loaded = split_report(done.stderr)
    assert done.stdout, stderr
    return done.returncode, json.loads(done.stdout), packages(loaded)


def _rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """What a status run leaves behind, without the times (the two runs differ in those)."""
    connection = sqlite3.connect(path)
    try:
        return {
            "hosts": connection.execute(
                "SELECT id, name, state, state_reason, driver_version, gpu_count, cpu_count "
                "FROM hosts ORDER BY id").fetchall(),
            "gpus": connection.execute(
                "SELECT id, host_id, idx, uuid, name, state, memory_total_bytes FROM gpus "
                "ORDER BY id").fetchall(),
            "events": connection.execute(
                "SELECT host_id, gpu_id, kind, severity FROM events ORDER BY id").fetchall(),
            "gpu_samples": connection.execute(
                "SELECT gpu_id, utilization_gpu_pct, memory_used_bytes, temperature_c, lost "
                "FROM gpu_samples ORDER BY id").fetchall(),
            "host_samples": connection.execute(
                "SELECT host_id FROM host_samples ORDER BY id").fetchall(),
        }
    finally:
        connection.close()


def test_status_on_a_current_file_records_without_sqlalchemy_as_the_engine_does(
        tmp_path: Path, sim_tools: SimTools) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "inventory.yaml").write_text("hosts:\n  workstation:\n    connection: local\n")
    config = home / "gpus.conf"
    write_config(config, scenarios.gpu_lost(4, lost_index=2, host="workstation"))
    env = sim_tools.env(config)
    through_stdlib = tmp_path / "stdlib.db"

    code, _, loaded = _status(home, str(through_stdlib), env)  # creates and migrates the file
    assert code == 0 and "sqlalchemy" in loaded
    through_engine = tmp_path / "engine.db"
    shutil.copy(through_stdlib, through_engine)

    code, shown, loaded = _status(home, str(through_stdlib), env)
    assert code == 0, shown
    assert "sqlalchemy" not in loaded
    code, _, loaded = _status(home, f"sqlite:///{through_engine}?timeout=30", env)
    assert code == 0 and "sqlalchemy" in loaded  # the comparison did use the other path

    stored = _rows(through_stdlib)
    assert stored == _rows(through_engine)
    assert len(stored["host_samples"]) == 2 and len(stored["gpu_samples"]) == 8
    assert [gpu[5] for gpu in stored["gpus"]] == ["ok", "ok", "lost", "ok"]
    assert [event[2] for event in stored["events"]] == ["gpu_lost"]
    assert stored["hosts"][0][1:3] == ("workstation", "up")
