"""gpu_samples.gpu_id without a foreign key: migration 0011 both ways, orphans in `db check`."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import inspect, select, text

from db.engine import Database, open_database
from db.migrate import alembic_config
from db.models import GpuSampleMinute
from db.retention import rollup_gpu_minutes
from db.samples import record_samples
from db.types import GpuSampleIn
from fleet.cli.main import main
from tests.db.conftest import SeededFleet

GPU_FK = "fk_gpu_samples_gpu_id_gpus"


def _sample_fks(database: Database) -> list[str]:
    names = [fk["name"] for fk in inspect(database.engine).get_foreign_keys("gpu_samples")]
    return [str(name) for name in names]


def test_migration_0011_keeps_samples_and_views_and_downgrade_restores_the_key(
    db_url: str, seeded: SeededFleet, database: Database
) -> None:
    a0 = seeded.gpu_ids[("alpha", 0)]
    config = alembic_config(db_url)
    database.close()
    command.downgrade(config, "0010")
    with open_database(db_url, migrate=False) as old:
        assert _sample_fks(old) == [GPU_FK]
        with old.session() as session:
            record_samples(session, [], [GpuSampleIn(a0, ts, utilization_gpu_pct=float(ts))
                                         for ts in (1_000, 2_000, 3_000)])
    command.upgrade(config, "head")
    with open_database(db_url) as upgraded:
        assert _sample_fks(upgraded) == []
        with upgraded.engine.connect() as connection:
            history = connection.execute(text(
                "SELECT ts_ms, utilization_gpu_pct FROM gpu_history ORDER BY ts_ms")).all()
            latest = connection.scalar(text(
                "SELECT ts_ms FROM gpu_latest WHERE gpu_id = :gpu"), {"gpu": a0})
        assert [tuple(row) for row in history] == [(1_000, 1000.0), (2_000, 2000.0),
                                                   (3_000, 3000.0)]
        assert latest == 3_000
    command.downgrade(config, "0010")
    with open_database(db_url, migrate=False) as downgraded:
        foreign_keys = inspect(downgraded.engine).get_foreign_keys("gpu_samples")
        assert [(fk["name"], fk["referred_table"], fk["options"].get("ondelete"))
                for fk in foreign_keys] == [(GPU_FK, "gpus", "CASCADE")]
    command.upgrade(config, "head")


def test_a_sample_of_a_missing_gpu_is_stored_and_db_check_reports_it(
    database: Database, seeded: SeededFleet, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--db", database.url, "db", "check"]) == 0, capsys.readouterr().out
    capsys.readouterr()
    a0 = seeded.gpu_ids[("alpha", 0)]
    with database.session() as session:
        record_samples(session, [], [GpuSampleIn(a0, 1), GpuSampleIn(424242, 2),
                                     GpuSampleIn(424242, 3)])
    code = main(["--db", database.url, "db", "check"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "reference: 2 gpu_samples row(s) name a missing gpus (gpu_samples.gpu_id" in out


def test_rollup_leaves_out_samples_of_a_missing_gpu(
    database: Database, seeded: SeededFleet
) -> None:
    a0 = seeded.gpu_ids[("alpha", 0)]
    with database.session() as session:
        record_samples(session, [], [GpuSampleIn(a0, 1_000, utilization_gpu_pct=50.0),
                                     GpuSampleIn(424242, 2_000, utilization_gpu_pct=90.0)])
    with database.session() as session:
        result = rollup_gpu_minutes(session, until_ms=60_000)
    with database.session() as session:
        rows = session.execute(select(GpuSampleMinute.gpu_id, GpuSampleMinute.samples,
                                      GpuSampleMinute.util_max)).all()
    assert result.buckets == 1 and [tuple(row) for row in rows] == [(a0, 1, 50.0)]
