"""A database URL whose driver is not installed says which package to install (exit code 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from db.engine import open_database
from db.errors import DatabaseError
from tests.db.conftest import REPO_ROOT

CASES = [
    # URL, the DBAPI module it imports, what the message must say
    ("postgresql://fleet:secret@db.example/fleet", "psycopg", "pip install 'fleet[postgresql]'"),
    ("postgresql+psycopg://fleet@db.example/fleet", "psycopg", "pip install 'fleet[postgresql]'"),
    ("postgresql+psycopg2://fleet@db.example/fleet", "psycopg2", "pip install psycopg2-binary"),
    ("mysql://fleet@db.example/fleet", "MySQLdb",
     "pip install pymysql and write the URL as mysql+pymysql://USER:PASSWORD@HOST/DB"),
    ("mysql+pymysql://fleet@db.example/fleet", "pymysql", "pip install pymysql"),
]


@pytest.mark.parametrize(("url", "module", "hint"), CASES, ids=[case[0] for case in CASES])
def test_missing_driver_names_the_package_to_install(
    url: str, module: str, hint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes `import module` fail as if it were not installed.
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(DatabaseError) as caught:
        open_database(url)
    message = str(caught.value)
    assert f"driver module {module!r} is not installed" in message
    assert hint in message
    assert "secret" not in message


def test_cli_without_the_postgresql_driver_exits_4_with_the_install_command(
    tmp_path: Path,
) -> None:
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = None\n"  # as if psycopg were not installed
        "from fleet.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("FLEET_", "XDG_"))}
    env["HOME"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", code, "--db", "postgresql://fleet@db.example/fleet", "hosts"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 4, result.stderr
    assert "driver module 'psycopg' is not installed" in result.stderr
    assert "pip install 'fleet[postgresql]'" in result.stderr
    assert result.stdout == ""
