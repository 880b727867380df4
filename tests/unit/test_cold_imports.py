"""Cold commands load only what they use: no SSH library, and on a current SQLite file no
SQLAlchemy (reads go through the stdlib driver, see db.sql)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.module_report import REPORT_MODULES, split_report

REPO = Path(__file__).resolve().parents[2]


def _modules_after(argv: list[str], tmp_path: Path) -> set[str]:
    """The modules a whole `fleet ...` process had loaded when it exited, on a database that
    an earlier run created and migrated (creating one runs Alembic)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "XDG_"))}
    env.update(HOME=str(tmp_path), FLEET_DB=str(tmp_path / "fleet.db"), PYTHONPATH=str(REPO))
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", REPORT_MODULES, *argv],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    return split_report(done.stderr)[1]


def test_fleet_tasks_without_running_tasks_loads_no_ssh_or_sqlalchemy(tmp_path: Path) -> None:
    loaded = _modules_after(["tasks"], tmp_path)
    assert "db.task_reads" in loaded  # it did read the database
    assert not {"asyncssh", "sqlalchemy", "alembic", "yaml"} & loaded


def test_fleet_history_gpus_loads_no_ssh_or_sqlalchemy(tmp_path: Path) -> None:
    loaded = _modules_after(["history", "gpus"], tmp_path)
    assert "db.history" in loaded
    assert not {"asyncssh", "sqlalchemy", "alembic"} & loaded
