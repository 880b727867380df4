"""Inventory bounds and speed: size cap, host cap, alias bombs, libyaml parsing, no GC passes."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest
import yaml

from fleet.errors import ConfigError
from fleet.inventory import load_inventory, yamlnodes
from fleet.inventory.drafts import MAX_HOSTS
from fleet.inventory.yamlnodes import MAX_INVENTORY_BYTES
from tests.bench.bench_inventory import inventory_text
from tests.cli.conftest import FleetCli

HERE = Path(__file__).parent
GOOD = sorted((HERE / "inventories" / "good").glob("*.yaml"))
BAD = sorted((HERE / "inventories" / "bad").glob("*.yaml"))


def _sparse_file(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk space (and would be slow to parse)."""
    with path.open("wb") as stream:
        stream.write(b"hosts:\n")
        stream.truncate(size)
    return path


def test_oversized_inventory_is_refused_from_its_size_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = _sparse_file(tmp_path / "big.yaml", 50 * 2**20)

    def no_read(self: Path, *args: object, **kwargs: object) -> None:
        raise AssertionError(f"{self} was opened although stat() says it is too large")

    monkeypatch.setattr(Path, "open", no_read)
    monkeypatch.setattr(Path, "read_text", no_read)
    with pytest.raises(ConfigError) as caught:
        load_inventory(big)

    message = str(caught.value)
    assert caught.value.exit_code == 2 and caught.value.path == str(big)
    assert message.startswith(f"{big}: ")
    assert "52,428,800 bytes (50.0 MiB)" in message and "16 MiB" in message


def test_inventory_at_the_cap_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    body = "hosts:\n  gpu01: {address: 10.0.0.1}\n"
    path.write_text(body + "#" * (MAX_INVENTORY_BYTES - len(body) - 1) + "\n")
    assert path.stat().st_size == MAX_INVENTORY_BYTES
    assert [host.name for host in load_inventory(path).hosts] == ["gpu01"]


async def test_cli_refuses_an_oversized_inventory_at_once_with_exit_2(fleet_cli: FleetCli) -> None:
    big = _sparse_file(fleet_cli.home / "big.yaml", 50 * 2**20)
    started = time.monotonic()
    result = await fleet_cli.run("inventory", "check", str(big), timeout=30)
    assert result.returncode == 2, result.stderr
    assert f"{big}: inventory file is too large: 52,428,800 bytes" in result.stderr
    assert result.stdout == ""
    assert time.monotonic() - started < 30


def test_ranges_that_add_up_past_the_host_cap_are_refused(tmp_path: Path) -> None:
    # Each range is within its own 10,000-name limit; together they pass MAX_HOSTS.
    ranges = [f"  - r{rack:02d}-n[00001:10000]" for rack in range(MAX_HOSTS // 10_000 + 1)]
    path = tmp_path / "inv.yaml"
    path.write_text("hosts:\n" + "\n".join(ranges) + "\n")
    with pytest.raises(ConfigError, match=f"more than {MAX_HOSTS:,} hosts") as caught:
        load_inventory(path)
    assert caught.value.line == len(ranges) + 1  # the range that crossed the cap


@pytest.mark.timeout(20)
def test_merge_key_bomb_is_refused_before_it_is_walked(tmp_path: Path) -> None:
    # Every level merges the previous one ten times: 10**8 mapping walks without a guard.
    lines = ["all:", "  vars:", "    m0: &m0 {k: 1}"]
    for level in range(1, 9):
        merges = ", ".join([f"*m{level - 1}"] * 10)
        lines.append(f"    m{level}: &m{level} {{<<: [{merges}]}}")
    lines += ["  hosts:", "    gpu01:", "      <<: *m8"]
    path = tmp_path / "hosts.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="alias bomb") as caught:
        load_inventory(path)
    assert caught.value.path == str(path) and caught.value.line is not None


def test_modest_aliases_are_still_fine(tmp_path: Path) -> None:
    hosts = "\n".join(f"  gpu{index:03d}: {{<<: *common, address: 10.0.0.{index}}}"
                      for index in range(200))
    path = tmp_path / "inv.yaml"
    path.write_text("vars: &common {port: 2222}\nhosts:\n" + hosts + "\n")
    loaded = load_inventory(path)
    assert len(loaded.hosts) == 200 and {host.port for host in loaded.hosts} == {2222}


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML was built without libyaml")
def test_documents_are_composed_by_libyaml() -> None:
    assert yamlnodes.COMPOSE_LOADER is yaml.CSafeLoader


@pytest.mark.parametrize("path", GOOD + BAD, ids=lambda path: path.name)
def test_pure_python_fallback_gives_the_same_result(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def outcome() -> object:
        try:
            return load_inventory(path)
        except ConfigError as exc:
            return ("error", exc.path, exc.line)

    with_libyaml = outcome()
    monkeypatch.setattr(yamlnodes, "COMPOSE_LOADER", yaml.SafeLoader)
    assert outcome() == with_libyaml


def test_loading_many_hosts_runs_no_garbage_collection_passes(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(inventory_text(5_000, "block"))
    passes: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    gc.callbacks.append(count)
    try:
        assert len(load_inventory(path).hosts) == 5_000
    finally:
        gc.callbacks.remove(count)
    # At most the one young-generation pass that may run as the collector is switched back on;
    # with the collector running throughout, this load made hundreds of passes.
    assert len(passes) <= 1 and 2 not in passes, passes
    assert gc.isenabled()


def test_garbage_collection_is_back_on_after_an_error(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("hosts:\n  gpu01:\n    prot: 22\n")
    with pytest.raises(ConfigError):
        load_inventory(path)
    assert gc.isenabled()


@pytest.mark.parametrize("loader", [yaml.SafeLoader, getattr(yaml, "CSafeLoader", None)],
                         ids=["pure-python", "libyaml"])
def test_deeply_nested_values_are_a_config_error_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loader: type[yaml.SafeLoader] | None
) -> None:
    if loader is None:
        pytest.skip("PyYAML was built without libyaml")
    monkeypatch.setattr(yamlnodes, "COMPOSE_LOADER", loader)
    path = tmp_path / "inv.yaml"
    path.write_text("hosts: [a]\nsettings:\n" + "".join("  " * (level + 1) + "a:\n"
                                                         for level in range(990)))
    with pytest.raises(ConfigError, match="nested too deeply") as caught:
        load_inventory(path)
    assert caught.value.path == str(path) and caught.value.exit_code == 2
