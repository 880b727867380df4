"""The `discovery:` settings section is validated wherever it is written, with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.inventory import load_inventory
from fleet.monitor.config import inventory_settings, load_settings


def test_inventory_discovery_typo_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("hosts: {a: {address: 10.0.0.1}}\nsettings:\n  monitor: {interval: 2s}\n"
                    "  discovery:\n    sesion: lab-a\n")
    with pytest.raises(ConfigError, match="did you mean 'session'") as caught:
        inventory_settings(load_inventory(path))
    assert caught.value.line == 5 and caught.value.path == str(path)


def test_config_file_discovery_typo_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("discovery:\n  auto_adopt: {sesion: lab-a, subnets: [127.0.0.0/8]}\n")
    with pytest.raises(ConfigError, match="did you mean 'session'") as caught:
        load_settings(None, config)
    assert caught.value.line == 2 and caught.value.path == str(config)


def test_config_file_discovery_bad_value_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("monitor: {}\ndiscovery:\n  session: 3\n")
    with pytest.raises(ConfigError, match="session must be a string") as caught:
        load_settings(None, config)
    assert caught.value.path == str(config)


def test_valid_discovery_section_passes(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("discovery:\n  session: lab\n  auto_adopt: {session: lab, subnets: "
                      "[10.0.0.0/8]}\n")
    load_settings(None, config)
