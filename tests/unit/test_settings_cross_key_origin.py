"""A check between two keys of one section names where each key came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.inventory import load_inventory
from fleet.monitor.config import load_settings


def test_cross_key_error_blames_the_file_that_set_the_key(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("health:\n  gpu_cool_c: 90\n")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("hosts: {a: {address: 10.0.0.1}}\nsettings:\n  health:\n"
                         "    fact_change_events: true\n")
    with pytest.raises(ConfigError, match="must be below gpu_hot_c") as caught:
        load_settings(load_inventory(inventory), config)
    assert (caught.value.path, caught.value.line) == (str(config), 2)
    assert f"gpu_cool_c from {config}:2" in str(caught.value)
    assert "gpu_hot_c from the defaults" in str(caught.value)


def test_cross_key_error_across_two_files_names_both(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("health:\n  gpu_cool_c: 70\n")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("hosts: {a: {address: 10.0.0.1}}\nsettings:\n  health:\n"
                         "    retired_pages_degrade: true\n    gpu_hot_c: 60\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(load_inventory(inventory), config)
    assert (caught.value.path, caught.value.line) == (str(inventory), 5)
    assert f"gpu_cool_c from {config}:2" in str(caught.value)
    assert f"gpu_hot_c from {inventory}:5" in str(caught.value)


def test_cross_key_error_in_one_file_is_at_its_section(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("health:\n  host_down_after: 2\n  gpu_hot_c: 60\n  gpu_cool_c: 70\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(None, config)
    assert caught.value.line == 1 and caught.value.path == str(config)
    assert "from" not in str(caught.value).partition("gpu_hot_c (60)")[2]
