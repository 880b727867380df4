"""`fleet status` on `connection: local` hosts against the simulated NVML library."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from tests.cli.conftest import FleetCli

LOCAL_INVENTORY = "hosts:\n  workstation:\n    connection: local\n"


def _local_setup(fleet_cli: FleetCli, sim_tools: SimTools,
                 gpus: scenarios.SimHostGpus) -> dict[str, str]:
    (fleet_cli.home / "inventory.yaml").write_text(LOCAL_INVENTORY)
    config = fleet_cli.home / "gpus.conf"
    write_config(config, gpus)
    return sim_tools.env(config)


async def test_json_status_reports_exactly_the_simulated_gpus(
    fleet_cli: FleetCli, sim_tools: SimTools
) -> None:
    simulated = scenarios.mixed(8, host="workstation")
    simulated.gpus[3].errors["nvmlDeviceGetFanSpeed"] = scenarios.NVML_ERROR_NOT_SUPPORTED
    env = _local_setup(fleet_cli, sim_tools, simulated)

    result = await fleet_cli.run("--json", "status", env=env)

    assert result.returncode == 0, result.stderr
    (host,) = result.json()["hosts"]
    assert host["name"] == "workstation"
    assert host["state"] == "up"
    assert host["host"]["driver_version"] == simulated.driver_version
    assert len(host["gpus"]) == 8
    for reported, expected in zip(host["gpus"], simulated.gpus, strict=True):
        assert reported["uuid"] == expected.uuid
        assert reported["name"] == expected.name
        assert reported["pci_bus_id"].lower().endswith(expected.pci_bus_id[-7:].lower())
        assert reported["memory_total_bytes"] == expected.memory_total_bytes
        assert reported["memory_used_bytes"] == expected.memory_used_bytes
        assert reported["utilization_gpu_pct"] == expected.utilization_gpu_pct
        assert reported["temperature_c"] == expected.temperature_c
        assert reported["power_draw_w"] == pytest.approx(expected.power_draw_w, abs=0.001)
        assert reported["power_limit_w"] == pytest.approx(expected.power_limit_w, abs=0.001)
        assert [(p["pid"], p["used_memory_bytes"]) for p in reported["processes"]] == \
            expected.processes
    assert host["gpus"][3]["fan_speed_pct"] is None
    assert host["gpus"][2]["fan_speed_pct"] == simulated.gpus[2].fan_speed_pct


async def test_lost_gpu_is_reported_and_the_others_still_are(
    fleet_cli: FleetCli, sim_tools: SimTools
) -> None:
    env = _local_setup(fleet_cli, sim_tools, scenarios.gpu_lost(4, lost_index=1,
                                                                host="workstation"))

    result = await fleet_cli.run("--json", "status", env=env)

    assert result.returncode == 0, result.stderr
    gpus = result.json()["hosts"][0]["gpus"]
    assert [gpu["lost"] for gpu in gpus] == [False, True, False, False]
    assert all(gpu["uuid"] for i, gpu in enumerate(gpus) if i != 1)
    table = await fleet_cli.run("status", env=env)
    assert "GPU LOST" in table.stdout


async def test_without_the_library_the_host_has_zero_gpus_and_says_why(
    fleet_cli: FleetCli, tmp_path: Path
) -> None:
    (fleet_cli.home / "inventory.yaml").write_text(LOCAL_INVENTORY)
    empty = tmp_path / "no-nvml"
    empty.mkdir()

    result = await fleet_cli.run("--json", "status", env={"LD_LIBRARY_PATH": str(empty)})

    assert result.returncode == 0, result.stderr
    (host,) = result.json()["hosts"]
    assert host["state"] == "up"
    assert host["gpus"] == []
    assert "NVML" in host["gpu_reason"]


async def test_driver_not_loaded_is_a_reason_not_an_error(
    fleet_cli: FleetCli, sim_tools: SimTools
) -> None:
    env = _local_setup(fleet_cli, sim_tools, scenarios.no_driver())

    result = await fleet_cli.run("--json", "status", env=env)

    assert result.returncode == 0, result.stderr
    host = result.json()["hosts"][0]
    assert host["gpus"] == []
    assert "driver" in host["gpu_reason"].lower()


async def test_samples_recorded_by_one_process_are_read_back_by_another(
    fleet_cli: FleetCli, sim_tools: SimTools
) -> None:
    simulated = scenarios.busy(2, host="workstation")
    env = _local_setup(fleet_cli, sim_tools, simulated)
    assert (await fleet_cli.run("status", env=env)).returncode == 0
    assert (await fleet_cli.run("status", env=env)).returncode == 0

    raw = await fleet_cli.run("--json", "history", "gpus", "--since", "10m")
    bucketed = await fleet_cli.run("history", "gpus", "--since", "10m", "--bucket", "1h",
                                   "--format", "csv")

    assert raw.returncode == 0, raw.stderr
    points = raw.json()["points"]
    assert len(points) == 4
    assert {p["uuid"] for p in points} == {gpu.uuid for gpu in simulated.gpus}
    assert {p["util_max"] for p in points} == {97}
    assert bucketed.returncode == 0, bucketed.stderr
    lines = bucketed.stdout.strip().splitlines()
    assert lines[0].startswith("host,")
    assert len(lines) in (3, 5)  # one bucket per GPU (two if the hour turned between runs)
    assert fleet_cli.db_path.stat().st_mode & 0o777 == 0o600


async def test_history_filters_by_host_and_gpu(fleet_cli: FleetCli, sim_tools: SimTools) -> None:
    simulated = scenarios.idle(3, host="workstation")
    env = _local_setup(fleet_cli, sim_tools, simulated)
    assert (await fleet_cli.run("status", env=env)).returncode == 0

    by_gpu = await fleet_cli.run("--json", "history", "gpus", "--gpu", "workstation:2")
    by_uuid = await fleet_cli.run("--json", "history", "gpus", "--gpu", simulated.gpus[0].uuid)
    by_host = await fleet_cli.run("history", "gpus", "--hosts", "workstation", "--json")
    by_alias = await fleet_cli.run("history", "gpus", "--host", "workstation", "--json")
    other_host = await fleet_cli.run("--json", "history", "gpus", "--hosts", "elsewhere")
    no_such_index = await fleet_cli.run("history", "gpus", "--gpu", "workstation:99")
    no_such_gpu = await fleet_cli.run("history", "gpus", "--gpu", "nosuch")
    huge_index = await fleet_cli.run("drain", f"workstation:{2**64}")

    assert [p["gpu_idx"] for p in by_gpu.json()["points"]] == [2]
    assert [p["uuid"] for p in by_uuid.json()["points"]] == [simulated.gpus[0].uuid]
    assert sorted(p["gpu_idx"] for p in by_host.json()["points"]) == [0, 1, 2]
    assert by_alias.json()["points"] == by_host.json()["points"]
    assert other_host.returncode == 2 and other_host.stdout == ""
    assert "unknown host 'elsewhere'" in other_host.stderr
    assert no_such_index.returncode == 2 and no_such_index.stdout == ""
    assert "host 'workstation' has no GPU 99 (known: 0, 1, 2)" in no_such_index.stderr
    assert no_such_gpu.returncode == 2 and no_such_gpu.stdout == ""
    assert "unknown host or GPU 'nosuch'" in no_such_gpu.stderr
    assert huge_index.returncode == 2, huge_index.stderr  # not an OverflowError traceback
    assert f"host 'workstation' has no GPU {2**64} (known: 0, 1, 2)" in huge_index.stderr


async def test_history_tables_show_memory_in_gib(fleet_cli: FleetCli, sim_tools: SimTools) -> None:
    simulated = scenarios.busy(2, host="workstation")
    env = _local_setup(fleet_cli, sim_tools, simulated)
    assert (await fleet_cli.run("status", env=env)).returncode == 0

    gpus = await fleet_cli.run("history", "gpus", "--since", "10m")
    hosts = await fleet_cli.run("history", "hosts", "--since", "10m")

    assert gpus.returncode == 0, gpus.stderr
    header, *rows = gpus.stdout.splitlines()
    columns = header.split()
    assert "MEM_USED_GIB" in columns and "MEM_USED_MAX_GIB" in columns
    used_gib = {f"{gpu.memory_used_bytes / 1024**3:.1f}" for gpu in simulated.gpus}
    # TIME is two words (date and clock), so each row has one more word than the header.
    cells = [row.split()[columns.index("MEM_USED_GIB") + 1] for row in rows]
    assert len(cells) == 2 and set(cells) == used_gib
    assert str(simulated.gpus[0].memory_used_bytes) not in gpus.stdout
    assert hosts.returncode == 0, hosts.stderr
    assert "MEM_AVAIL_MIN_GIB" in hosts.stdout.splitlines()[0]
