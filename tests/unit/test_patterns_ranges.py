"""`--hosts` terms take the inventory's own `[START:END]` ranges."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.inventory import load_inventory, select_hosts
from fleet.inventory.inventory import Inventory
from fleet.inventory.select import host_matches


@pytest.fixture()
def gpus(tmp_path: Path) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text('hosts:\n  gpu[1:12]: {address: "10.0.0.[1:12]"}\n'
                    '  "gpu:": {address: 10.1.1.1}\n'
                    "groups:\n  rack1: {hosts: [gpu1]}\n  rack2: {hosts: [gpu2]}\n"
                    "  rack3: {hosts: [gpu3]}\n")
    return load_inventory(path)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("gpu[1:3]", "gpu1 gpu2 gpu3"),
        ("gpu[2:6:2]", "gpu2 gpu4 gpu6"),
        ("gpu[10:12]", "gpu10 gpu11 gpu12"),
        ("gpu[1:2]*", "gpu1 gpu2 gpu10 gpu11 gpu12"),
        ("gpu[12]", "gpu1 gpu2"),  # no colon: still an fnmatch character class
        ("@rack[2:3]", "gpu2 gpu3"),
        ("gpu[1:4],!gpu[2:3]", "gpu1 gpu4"),
    ],
)
def test_range_terms(gpus: Inventory, pattern: str, expected: str) -> None:
    assert [spec.name for spec in select_hosts(gpus, pattern)] == expected.split()


@pytest.mark.parametrize("pattern", ["gpu[3:1]", "gpu[1:x]", "gpu[1:3:0]", "@rack[a:3]"])
def test_bad_range_terms_are_refused(gpus: Inventory, pattern: str) -> None:
    with pytest.raises(ConfigError, match="bad host range") as caught:
        select_hosts(gpus, pattern)
    assert caught.value.exit_code == 2


def test_host_matches_uses_ranges_too() -> None:
    assert host_matches("gpu[1:3]", "gpu2", (), ())
    assert not host_matches("gpu[1:3]", "gpu:", (), ())
    assert not host_matches("gpu[3:1]", "gpu3", (), ())
