"""Lab mode costs `fleet --help` nothing (no aiohttp, msgspec, SQLAlchemy or asyncssh loaded),
and a client of `fleet serve` loads no SQLAlchemy."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from tests.fixtures.module_report import REPORT_MODULES, packages, split_report
from tests.server.conftest import ServeLabFactory
from tests.server.test_serve import _seed_tasks

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"aiohttp", "msgspec", "sqlalchemy", "asyncssh", "textual", "prometheus_client"}


def _loaded(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True, cwd=ROOT, timeout=60).stdout
    return {name.split(".")[0] for name in json.loads(out.splitlines()[-1])}


def test_help_and_serve_help_load_no_heavy_library() -> None:
    for argv in (["--help"], ["serve", "--help"]):
        loaded = _loaded("from fleet.cli.main import main\n"
                         f"assert main({argv!r}) == 0")
        assert not loaded & HEAVY, argv


def test_server_selection_loads_no_http_library() -> None:
    loaded = _loaded("from fleet.client.select import select_server\nselect_server()")
    assert not loaded & HEAVY


def test_the_server_side_never_loads_textual() -> None:
    loaded = _loaded("import fleet.server.serve, fleet.server.status_site, fleet.client.remote")
    assert "textual" not in loaded and "tui" not in loaded


async def test_read_commands_through_the_server_load_no_sqlalchemy(
        serve_lab: ServeLabFactory) -> None:
    """A client of `fleet serve` decodes its answers into the records without the storage
    layer: SQLAlchemy (~0.4 s of a cold process here) is never imported."""
    lab = await serve_lab(2)
    await _seed_tasks(lab)
    server = await lab.serve()
    held = await lab.run("reserve", "--gpus", "1", "--note", "imports")
    assert held.returncode == 0, held.stderr
    for args, rows in ((("tasks", "--all"), "tasks"), (("tasks", "1"), "tasks"),
                       (("events",), "events"), (("allocations", "--all"), "allocations"),
                       (("hosts",), "hosts"), (("status",), "hosts"), (("usage",), None)):
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", REPORT_MODULES, "--json", "--server",
            str(server.socket_path), *args, cwd=lab.cli.home, env=lab.cli.env(lab.env()),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, (args, stderr.decode())
        if rows is not None:
            assert json.loads(stdout)[rows], args  # something was decoded and shown
        assert "sqlalchemy" not in packages(split_report(stderr.decode())[1]), args
