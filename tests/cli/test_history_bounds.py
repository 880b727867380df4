"""`fleet history gpus|hosts` read a bounded number of rows: by default at most RAW_LIMIT raw
samples (BUCKETED_LIMIT buckets), one more asked of the database to tell whether the range
holds more; when it does, the output is cut and stderr says how to see the rest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from db import host_history, rollup_history
from db.engine import open_database
from db.gpus import upsert_gpus
from db.hosts import sync_hosts
from db.samples import record_samples
from db.types import GpuFacts, GpuSampleIn, HostFacts, HostSampleIn
from fleet.cli import history_limits
from fleet.cli.main import main
from fleet.wire.history import MAX_HISTORY_POINTS
from tests.cli.conftest import CliResult

T0 = 1_767_225_600  # 2026-01-01 00:00 UTC
SAMPLES = 25  # per GPU and host, 10 s apart
RANGE = ("--since", str(T0), "--until", str(T0 + 3600))


@pytest.fixture
def sampled_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An SQLite file with one host and two GPUs sampled SAMPLES times; an isolated home."""
    for name in ("FLEET_DB", "FLEET_SERVER", "FLEET_CONFIG", "FLEET_INVENTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FLEET_SERVER", "local")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "fleet.db"
    database = open_database(str(path))
    try:
        with database.session() as session:
            host_id = sync_hosts(session, [HostFacts("alpha", "10.0.0.1")], now=T0)["alpha"]
            gpus = upsert_gpus(session, host_id, [GpuFacts(i, f"GPU-{i}", "H100")
                                                  for i in range(2)], now=T0).ids
            stamps = [(T0 + 10 * i) * 1000 for i in range(SAMPLES)]
            record_samples(
                session,
                [HostSampleIn(host_id, ts, load_1m=1.0, net_rx_bytes=ts) for ts in stamps],
                [GpuSampleIn(gpu_id, ts, utilization_gpu_pct=5.0) for ts in stamps
                 for gpu_id in gpus.values()])
    finally:
        database.close()
    return path


def _history(capsys: pytest.CaptureFixture[str], db: Path, kind: str, *args: str) -> CliResult:
    code = main(["--db", str(db), "--json", "history", kind, *RANGE, *args])
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def _points(result: CliResult) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    points: list[dict[str, Any]] = json.loads(result.stdout)["points"]
    return points


@pytest.mark.parametrize(("kind", "rows"), [("gpus", 2 * SAMPLES), ("hosts", SAMPLES)])
def test_raw_history_stops_at_the_default_limit_and_says_so(
        sampled_db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        kind: str, rows: int) -> None:
    monkeypatch.setattr(history_limits, "RAW_LIMIT", 10)
    cut = _history(capsys, sampled_db, kind)
    assert len(_points(cut)) == 10 and cut.json()["truncated"] is True
    assert "showing the first 10 samples; the range holds more" in cut.stderr
    assert "--limit N" in cut.stderr and "--bucket" in cut.stderr
    assert [p["ts_ms"] for p in _points(cut)] == sorted(p["ts_ms"] for p in _points(cut))
    whole = _history(capsys, sampled_db, kind, "--limit", str(rows))  # exactly all: not cut
    assert len(_points(whole)) == rows and whole.json()["truncated"] is False
    assert whole.stderr == ""
    assert _points(whole)[:10] == _points(cut)  # the earliest rows


@pytest.mark.parametrize("kind", ["gpus", "hosts"])
def test_buckets_have_their_own_default_limit(
        sampled_db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        kind: str) -> None:
    monkeypatch.setattr(history_limits, "RAW_LIMIT", 1)  # not the one buckets use
    monkeypatch.setattr(history_limits, "BUCKETED_LIMIT", 2)
    cut = _history(capsys, sampled_db, kind, "--bucket", "1m")
    assert len(_points(cut)) == 2 and cut.json()["truncated"] is True
    assert "showing the first 2 buckets" in cut.stderr and "--bucket" in cut.stderr
    whole = _history(capsys, sampled_db, kind, "--bucket", "1m", "--limit", "100")
    assert len(_points(whole)) == (10 if kind == "gpus" else 5) and whole.stderr == ""


def test_the_database_is_asked_for_one_row_more_than_shown(
        sampled_db: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded where the rows are built, not cut after reading them all."""
    asked: list[int | None] = []
    gpu_read, host_read = rollup_history.gpu_history_with_rollups, host_history.host_history

    def gpu_spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("limit"))
        return gpu_read(*args, **kwargs)

    def host_spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("limit"))
        return host_read(*args, **kwargs)

    monkeypatch.setattr(rollup_history, "gpu_history_with_rollups", gpu_spy)
    monkeypatch.setattr(host_history, "host_history", host_spy)
    for kind in ("gpus", "hosts"):
        assert _history(capsys, sampled_db, kind).returncode == 0
        assert _history(capsys, sampled_db, kind, "--bucket", "5m").returncode == 0
        assert len(_points(_history(capsys, sampled_db, kind, "--limit", "7"))) == 7
    raw, bucketed = history_limits.RAW_LIMIT + 1, history_limits.BUCKETED_LIMIT + 1
    assert asked == [raw, bucketed, 8] * 2


def test_the_bucketed_default_fits_one_server_reply() -> None:
    assert history_limits.BUCKETED_LIMIT == MAX_HISTORY_POINTS
    assert history_limits.RAW_LIMIT < MAX_HISTORY_POINTS


@pytest.mark.parametrize("kind", ["gpus", "hosts"])
def test_the_help_tells_the_bounds(capsys: pytest.CaptureFixture[str], kind: str) -> None:
    assert main(["history", kind, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"{history_limits.RAW_LIMIT} raw samples" in text
    assert f"{history_limits.BUCKETED_LIMIT} buckets" in text
    assert "End time, exclusive" in text
