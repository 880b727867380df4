"""`fleet db retention` keeps what the monitor keeps: the effective `retention:` settings, with
--raw-days and --rollup-days (a number, or `forever`) overriding one value each."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from db.engine import open_database
from db.gpus import upsert_gpus
from db.hosts import sync_hosts
from db.samples import record_samples
from db.types import GpuFacts, GpuSampleIn, HostFacts, HostSampleIn
from fleet.cli.main import main
from tests.cli.conftest import CliResult

DAY_MS = 86_400_000


@pytest.fixture
def settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated home whose settings file the test writes; no inventory, no server."""
    for name in ("FLEET_DB", "FLEET_SERVER", "FLEET_INVENTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "settings.yaml"
    monkeypatch.setenv("FLEET_CONFIG", str(path))
    return path


def _seed(url: str, now_ms: int, days: range) -> None:
    """One host sample and one GPU sample a day, `days` days ago."""
    database = open_database(url)
    try:
        with database.session() as session:
            host_id = sync_hosts(session, [HostFacts("alpha", "10.0.0.1")],
                                 now=now_ms // 1000 - 400 * 86_400)["alpha"]
            gpu_id = upsert_gpus(session, host_id, [GpuFacts(0, "GPU-alpha-0", "H100")],
                                 now=now_ms // 1000 - 400 * 86_400).ids[0]
            stamps = [now_ms - day * DAY_MS for day in days]
            record_samples(session, [HostSampleIn(host_id, ts, load_1m=1.0) for ts in stamps],
                           [GpuSampleIn(gpu_id, ts, utilization_gpu_pct=50.0) for ts in stamps])
    finally:
        database.close()


def _counts(url: str) -> dict[str, int]:
    database = open_database(url)
    try:
        with database.reader() as reader:
            return {table: int(reader.scalar(f"SELECT count(*) FROM {table}"))
                    for table in ("host_samples", "gpu_samples", "gpu_samples_1m")}
    finally:
        database.close()


def _retention(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> CliResult:
    code = main(["--db", url, "db", "retention", *args])
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def test_the_settings_raw_days_are_kept(settings_file: Path, db_url: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """raw_days: 30 keeps 20 days of samples (the command used to delete all but 7)."""
    settings_file.write_text("retention:\n  raw_days: 30\n  rollup_days: null\n")
    _seed(db_url, int(time.time() * 1000), range(1, 21))
    result = _retention(capsys, db_url)
    assert result.returncode == 0, result.stderr
    assert _counts(db_url)["host_samples"] == 20 and _counts(db_url)["gpu_samples"] == 20
    assert f"keeping raw samples 30 days (retention.raw_days, {settings_file}:2)" in result.stdout
    assert f"rollups forever (retention.rollup_days, {settings_file}:3)" in result.stdout
    assert "host samples deleted: 0" in result.stdout
    # An option overrides its one value; the other still comes from the settings.
    override = _retention(capsys, db_url, "--raw-days", "10")
    assert override.returncode == 0, override.stderr
    assert "keeping raw samples 10 days (retention.raw_days, command line)" in override.stdout
    assert "rollups forever" in override.stdout
    assert _counts(db_url)["host_samples"] == 9  # 1..9 days ago (the 10th is just past it)


def test_rollup_days_from_the_settings_and_forever_on_the_command_line(
        settings_file: Path, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    settings_file.write_text("retention:\n  raw_days: 30\n  rollup_days: 100\n")
    _seed(db_url, int(time.time() * 1000), range(195, 201))  # rolled up, then too old raw
    kept = _retention(capsys, db_url, "--json", "--rollup-days", "forever")
    assert kept.returncode == 0, kept.stderr
    assert kept.json()["rollup_days"] is None and kept.json()["raw_days"] == 30
    assert kept.json()["origins"] == {"raw_days": f"{settings_file}:2",
                                      "rollup_days": "command line"}
    assert _counts(db_url) == {"host_samples": 0, "gpu_samples": 0, "gpu_samples_1m": 6}
    pruned = _retention(capsys, db_url)  # the settings' 100 days
    assert pruned.returncode == 0, pruned.stderr
    assert "rollups 100 days (retention.rollup_days" in pruned.stdout
    assert "rollups deleted: 6" in pruned.stdout
    assert _counts(db_url)["gpu_samples_1m"] == 0


def test_the_settings_rollup_lag_is_the_monitors(settings_file: Path, db_url: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """rollup_lag_s comes from the settings too: minutes closer than it stay raw."""
    settings_file.write_text("retention:\n  rollup_lag_s: 7200\n")
    thirty_minutes_ago = int(time.time() * 1000) - 1_800_000
    _seed(db_url, thirty_minutes_ago + DAY_MS, range(1, 2))
    result = _retention(capsys, db_url, "--json")
    assert result.returncode == 0, result.stderr
    assert result.json()["rollup_buckets"] == 0
    assert _counts(db_url)["gpu_samples_1m"] == 0


def test_options_that_contradict_each_other_or_the_settings_are_refused(
        settings_file: Path, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    settings_file.write_text("retention:\n  raw_days: 30\n")
    short = _retention(capsys, db_url, "--rollup-days", "5")
    assert short.returncode == 2
    assert "rollup_days (5) must be at least raw_days (30)" in short.stderr
    for bad in ("never", "nan", "0", "-1"):
        refused = _retention(capsys, db_url, "--rollup-days", bad)
        assert refused.returncode == 2 and "--rollup-days" in refused.stderr, bad
    assert _retention(capsys, db_url, "--raw-days", "forever").returncode == 2
