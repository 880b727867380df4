"""db is the bottom layer: importing all of it loads no fleet, tui, SSH, mDNS or UI module;
its plain-SQL reads (db.sql and the history queries) load no SQLAlchemy."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import db
from tests.db.conftest import run_python

FORBIDDEN_TOP_LEVEL = ("fleet", "tui", "asyncssh", "zeroconf", "textual")


def test_db_imports_nothing_from_upper_layers() -> None:
    modules = sorted(info.name for info in pkgutil.walk_packages(db.__path__, "db."))
    assert "db.engine" in modules and "db.history" in modules
    importable = [name for name in modules if not name.startswith("db.migrations.")]
    code = (
        "import importlib, sys\n"
        f"for name in {importable!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules})\n"
        "print(' '.join(loaded))\n"
    )
    loaded = set(run_python(code).stdout.split())
    assert "db" in loaded and "sqlalchemy" in loaded
    assert loaded.isdisjoint(FORBIDDEN_TOP_LEVEL), loaded & set(FORBIDDEN_TOP_LEVEL)


def test_history_queries_import_no_sqlalchemy() -> None:
    code = ("import sys\n"
            "import db.history, db.rollup_history\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy'))\n")
    assert run_python(code).stdout.split() == ["[]"]


def test_opening_a_current_database_does_not_import_alembic(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from db.engine import open_database\n"
        "path = sys.argv[1]\n"
        "open_database(path).close()\n"
        "print('alembic-loaded', 'alembic' in sys.modules)\n"
    )
    # First open migrates (needs Alembic); a second process opening the same file must not.
    first = run_python(code, f"{tmp_path}/fleet.db").stdout
    second = run_python(code, f"{tmp_path}/fleet.db").stdout
    assert first.split() == ["alembic-loaded", "True"]
    assert second.split() == ["alembic-loaded", "False"]
