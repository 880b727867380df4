"""The dependency direction db <- fleet <- tui holds, and the CLI never loads textual."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imported_top_levels(package: str) -> dict[str, set[str]]:
    """Top-level module names each file of `package` imports (statically, any nesting)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("db", {"fleet", "tui", "asyncssh", "zeroconf", "textual", "pynvml"}),
        ("fleet", {"tui", "textual"}),
    ],
)
def test_package_does_not_import_upper_layers(package: str, forbidden: set[str]) -> None:
    offenders = {
        path: sorted(names & forbidden)
        for path, names in _imported_top_levels(package).items()
        if names & forbidden
    }
    assert offenders == {}


def test_tui_talks_only_to_fleet_service_api() -> None:
    offenders = {
        path: sorted(names & {"db", "asyncssh", "sqlalchemy", "zeroconf"})
        for path, names in _imported_top_levels("tui").items()
        if names & {"db", "asyncssh", "sqlalchemy", "zeroconf"}
    }
    assert offenders == {}


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True, cwd=ROOT).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_cli_import_loads_neither_textual_nor_heavy_libraries() -> None:
    loaded = _modules_after("import fleet.cli.main")
    heavy = {"textual", "asyncssh", "sqlalchemy", "zeroconf", "pynvml", "tui"}
    assert not {name.split(".")[0] for name in loaded} & heavy


def test_status_command_path_never_loads_textual() -> None:
    loaded = _modules_after(
        "import fleet.cli.main, fleet.cli.status_view, fleet.service, fleet.recorder"
    )
    assert "textual" not in {name.split(".")[0] for name in loaded}


def test_db_imports_without_engine_layers() -> None:
    loaded = _modules_after("import db.engine, db.models")
    assert not {name.split(".")[0] for name in loaded} & {"fleet", "tui", "asyncssh", "textual"}
