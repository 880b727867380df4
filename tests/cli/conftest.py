"""Helpers to run the real `fleet` CLI in a subprocess with an isolated home and database."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CliResult:
    """Exit code and output of one `fleet` run."""

    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@dataclass
class FleetCli:
    """Runs `python -m fleet.cli.main` with HOME/XDG dirs under a temp dir (no user files)."""

    home: Path
    db_path: Path

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("FLEET_", "XDG_"))}
        env.update({
            "HOME": str(self.home),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "FLEET_DB": str(self.db_path),
        })
        env.update(extra or {})
        return env

    async def run(self, *args: str, env: Mapping[str, str] | None = None,
                  timeout: float = 60.0) -> CliResult:
        """Run the CLI without blocking the event loop (tests serve SSH on the same loop)."""
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "fleet.cli.main", *args, cwd=self.home,
            env=self.env(env), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise
        assert process.returncode is not None
        return CliResult(process.returncode, stdout.decode(), stderr.decode())


@pytest.fixture
def fleet_cli(tmp_path: Path) -> FleetCli:
    home = tmp_path / "home"
    home.mkdir()
    return FleetCli(home=home, db_path=tmp_path / "fleet.db")
