"""`fleet demo --db URL` records the simulated fleet in that database (on either backend)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from db.engine import open_database
from db.models import GpuSample, Host
from tests.fixtures.cli import FleetCli


async def test_demo_records_in_the_database_it_is_given(fleet_cli: FleetCli, db_url: str) -> None:
    result = await fleet_cli.run("demo", "--text", "1", "--db", db_url, timeout=120)
    assert result.returncode == 0, result.stderr
    shown = db_url if db_url.startswith("sqlite") else db_url.split("?")[0]
    assert shown.split("://")[1].split("/")[-1] in result.stdout  # the round names it
    database = open_database(db_url)
    try:
        with database.session() as session:
            hosts = set(session.scalars(select(Host.name)))
            samples = session.scalar(select(GpuSample.id).limit(1))
    finally:
        database.close()
    assert len(hosts) == 8 and samples is not None


@pytest.mark.sqlite_only
async def test_demo_without_db_leaves_fleet_db_alone(fleet_cli: FleetCli, db_url: str) -> None:
    """$FLEET_DB names the user's real database: a demo must not fill it with simulated hosts."""
    result = await fleet_cli.run("demo", "--text", "1", timeout=120)
    assert result.returncode == 0, result.stderr
    assert fleet_cli.env()["FLEET_DB"] == db_url
    assert not fleet_cli.db_path.exists()


@pytest.mark.sqlite_only
async def test_global_db_given_on_the_command_line_is_honoured(
    fleet_cli: FleetCli, db_url: str
) -> None:
    result = await fleet_cli.run("--db", db_url, "demo", "--text", "1", timeout=120)
    assert result.returncode == 0, result.stderr
    assert fleet_cli.db_path.exists() and str(fleet_cli.db_path) in result.stdout
