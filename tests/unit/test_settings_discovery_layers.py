"""The `discovery:` section is layered like every settings section and shown by config show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleet.cli.main import cli as main
from fleet.errors import ConfigError
from fleet.inventory import Inventory, load_inventory
from fleet.monitor.config import load_settings


def _files(tmp_path: Path, config: str, settings: str = "") -> tuple[Path, Path]:
    config_path = tmp_path / "config.yaml"
    config_path.write_text(config)
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("hosts: {a: {address: 10.0.0.1}}\n" + settings)
    return config_path, inventory


def test_settings_file_discovery_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleet.discovery.autoadopt import effective_discovery_settings

    config, inventory = _files(tmp_path, "discovery:\n  session: lab-a\n  auto_adopt: "
                               "{session: lab-a, subnets: [127.0.0.0/8]}\n")
    monkeypatch.setenv("FLEET_CONFIG", str(config))
    found = effective_discovery_settings(load_inventory(inventory))
    assert found.session == "lab-a"
    assert found.auto_adopt is not None and found.auto_adopt.session == "lab-a"


def test_inventory_discovery_overrides_key_by_key(tmp_path: Path) -> None:
    config, inventory = _files(
        tmp_path, "discovery:\n  session: lab-a\n  interfaces: [eth1]\n",
        "settings:\n  discovery:\n    session: lab-b\n")
    settings = load_settings(load_inventory(inventory), config)
    assert settings.discovery.session == "lab-b"
    assert settings.discovery.interfaces == ("eth1",)
    assert settings.origins["discovery.session"] == f"{inventory}:4"
    assert settings.origins["discovery.interfaces"] == f"{config}:3"
    assert settings.origins["discovery.auto_adopt"] == "default"


def test_bad_discovery_value_is_reported_at_its_key(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from fleet.discovery.autoadopt import effective_discovery_settings

    config, inventory = _files(tmp_path, "", "settings:\n  monitor: {interval: 2s}\n"
                               "  discovery:\n    interfaces: [eth1]\n    session: 3\n")
    monkeypatch.setenv("FLEET_CONFIG", str(config))
    with pytest.raises(ConfigError, match="session must be a string") as caught:
        effective_discovery_settings(load_inventory(inventory))
    assert (caught.value.path, caught.value.line) == (str(inventory), 6)


def test_in_memory_inventory_discovery_still_counts(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from fleet.discovery.autoadopt import effective_discovery_settings

    config, _ = _files(tmp_path, "discovery:\n  interfaces: [eth1]\n")
    monkeypatch.setenv("FLEET_CONFIG", str(config))
    inventory = Inventory(hosts=(), path=None, groups={}, settings={"discovery":
                          {"session": "x"}}, settings_line=None)
    found = effective_discovery_settings(inventory)
    assert (found.session, found.interfaces) == ("x", ("eth1",))


def test_config_show_prints_discovery_with_origins(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    config, inventory = _files(tmp_path, "discovery:\n  auto_adopt: {session: lab-a, "
                               "subnets: [127.0.0.0/8]}\n")
    monkeypatch.setenv("FLEET_CONFIG", str(config))
    monkeypatch.setenv("HOME", str(tmp_path))
    shown = CliRunner().invoke(main, ["-i", str(inventory), "config", "show"])
    assert shown.exit_code == 0, shown.output
    assert "\ndiscovery:\n" in shown.output
    assert f"[{config}:2]" in shown.output and "127.0.0.0/8" in shown.output
    again = tmp_path / "shown.yaml"  # the output is itself a valid settings file
    again.write_text(shown.output)
    reread = load_settings(None, again)
    assert reread.discovery == load_settings(load_inventory(inventory), config).discovery
    as_json = CliRunner().invoke(main, ["--json", "-i", str(inventory), "config", "show"])
    data = json.loads(as_json.output)
    assert data["settings"]["discovery"]["auto_adopt"]["subnets"] == ["127.0.0.0/8"]
    assert data["origins"]["discovery.auto_adopt"] == f"{config}:2"
