"""`fleet tui`: --interval sets the monitor's interval (checked like `monitor --interval`),
--hosts/--host narrows what is shown and monitored; both reach the monitor through the adapter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click.testing
import pytest

from fleet.cli.main import cli
from fleet.monitor.config import default_settings, with_interval
from fleet.service import open as open_fleet
from tests.cli.conftest import FleetCli
from tui.adapter import FleetAdapter

LOCAL_INVENTORY = "hosts:\n  workstation:\n    connection: local\n  other:\n    connection: local\n"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(LOCAL_INVENTORY)
    return path


@pytest.mark.parametrize("command", ["tui", "monitor"])
async def test_interval_zero_is_refused_alike(command: str, fleet_cli: FleetCli,
                                              inventory: Path) -> None:
    result = await fleet_cli.run("-i", str(inventory), command, "--interval", "0")
    assert result.returncode == 2, result.stderr
    assert "--interval: monitor.interval must be at least 0.05, got 0" in result.stderr


def test_interval_and_hosts_reach_the_ui(monkeypatch: pytest.MonkeyPatch, inventory: Path,
                                         tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    async def fake_run_tui(fleet: object, *, hosts: str | None = None,
                           settings: Any = None, scripts: object = ()) -> int:
        seen.update(hosts=hosts, interval=settings.monitor.interval)
        return 0

    monkeypatch.setattr("fleet.cli.tui_launch.run_tui", fake_run_tui)
    runner = click.testing.CliRunner()
    for flag in ("--hosts", "--host"):
        result = runner.invoke(cli, ["--db", str(tmp_path / "fleet.db"), "-i", str(inventory),
                                     "tui", flag, "work*", "--interval", "3s"])
        assert result.exit_code == 0, result.output
        assert seen == {"hosts": "work*", "interval": 3.0}


async def test_a_hosts_pattern_matching_nothing_is_an_error(fleet_cli: FleetCli,
                                                            inventory: Path) -> None:
    result = await fleet_cli.run("-i", str(inventory), "tui", "--hosts", "gpu9*")
    assert result.returncode == 2
    assert "host pattern 'gpu9*' matches no host" in result.stderr


async def test_the_adapter_starts_the_monitor_with_those_settings(inventory: Path,
                                                                  tmp_path: Path) -> None:
    settings = with_interval(default_settings(), "3s")
    async with open_fleet(str(tmp_path / "fleet.db"), inventory) as fleet:
        watch = FleetAdapter(fleet, hosts="workstation", settings=settings).watch()
        try:
            snapshot = await anext(watch)
            monitor = fleet.monitor
            assert monitor is not None
            assert monitor.settings.monitor.interval == 3.0
            assert [host.spec.name for host in snapshot.hosts] == ["workstation"]
        finally:
            await watch.aclose()  # type: ignore[attr-defined]  # an async generator
        assert fleet.monitor is None  # the watch that started it stopped it
