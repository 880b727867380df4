"""Lab mode costs `fleet --help` nothing: no aiohttp, msgspec, SQLAlchemy or asyncssh loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
