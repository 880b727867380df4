"""`fleet status` (the real CLI) against the multi-host cluster: every host and GPU, and faults."""

from __future__ import annotations

import shutil
import time

import pytest

from fleet.sim.gpus import SimHostGpus
from tests.cli.conftest import FleetCli
from tests.cluster.gpuconf import mixed_lab_specs
from tests.cluster.netcluster import Cluster
from tests.fixtures.cluster import AnyCluster, ClusterFactory


def _trust_cluster(fleet_cli: FleetCli, lab: AnyCluster) -> None:
    ssh_dir = fleet_cli.home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    shutil.copy(lab.known_hosts_file, ssh_dir / "known_hosts")


def _expected(spec_gpus: SimHostGpus | None) -> tuple[list[str], bool]:
    """(UUIDs, has_driver) a host with this config must report."""
    if spec_gpus is None:
        return [], False
    return [gpu.uuid for gpu in spec_gpus.gpus], spec_gpus.init_error == 0


@pytest.mark.slow
async def test_status_reports_every_host_and_gpu_of_a_mixed_cluster(
    fleet_cli: FleetCli, cluster: ClusterFactory
) -> None:
    specs = mixed_lab_specs()
    lab = await cluster(specs)
    _trust_cluster(fleet_cli, lab)

    result = await fleet_cli.run("--json", "--inventory", str(lab.inventory_file), "status",
                                 "--timeout", "30s")

    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    reported = {host["name"]: host for host in result.json()["hosts"]}
    assert set(reported) == {spec.name for spec in specs}
    for spec in specs:
        host = reported[spec.name]
        uuids, has_driver = _expected(spec.gpus)
        assert host["state"] == "up", (spec.name, host["reason"])
        assert [g["uuid"] for g in host["gpus"] if not g["lost"]] == \
            [u for u, g in zip(uuids, spec.gpus.gpus if spec.gpus else [], strict=True)
             if not g.lost], spec.name
        assert len(host["gpus"]) == len(uuids), spec.name
        if not has_driver:
            assert host["gpu_reason"], spec.name
        if spec.gpus is not None:
            assert host["host"]["driver_version"] == spec.gpus.driver_version
            for gpu, expected in zip(host["gpus"], spec.gpus.gpus, strict=True):
                if expected.lost:
                    assert gpu["lost"] is True
                    continue
                assert gpu["name"] == expected.name
                assert gpu["memory_total_bytes"] == expected.memory_total_bytes
                assert gpu["memory_used_bytes"] == expected.memory_used_bytes
                assert gpu["utilization_gpu_pct"] == expected.utilization_gpu_pct
                assert gpu["temperature_c"] == expected.temperature_c
    if isinstance(lab, Cluster):
        # Namespace hosts have their own hostnames and Debian's python3, not the controller's.
        assert reported["dgx1"]["host"]["hostname"] == lab.host("dgx1").name
        assert reported["dgx1"]["host"]["python_version"].startswith("3.")


@pytest.mark.slow
async def test_host_with_link_down_is_unreachable_within_timeout_others_normal(
    fleet_cli: FleetCli, netns_cluster: ClusterFactory
) -> None:
    specs = mixed_lab_specs()[:4]
    lab = await netns_cluster(specs)
    assert isinstance(lab, Cluster)
    _trust_cluster(fleet_cli, lab)
    lab.host("ws4090").link_down()

    started = time.monotonic()
    result = await fleet_cli.run("--json", "--inventory", str(lab.inventory_file), "status",
                                 "--timeout", "3s")
    elapsed = time.monotonic() - started

    assert result.returncode == 3
    states = {host["name"]: host["state"] for host in result.json()["hosts"]}
    assert states == {"dgx1": "up", "h100a": "up", "ws4090": "unreachable", "v100old": "up"}
    assert elapsed < 20  # bounded by --timeout, not by kernel SYN retries (~135 s)

    lab.host("ws4090").link_up()
    recovered = await fleet_cli.run("--json", "--inventory", str(lab.inventory_file), "status",
                                    "--timeout", "10s")
    assert recovered.returncode == 0, recovered.stdout[-2000:]


@pytest.mark.slow
async def test_rotated_host_key_is_refused_and_live_gpu_change_is_seen(
    fleet_cli: FleetCli, netns_cluster: ClusterFactory
) -> None:
    from fleet.sim import gpus as scenarios

    specs = mixed_lab_specs()[:2]
    lab = await netns_cluster(specs)
    assert isinstance(lab, Cluster)
    _trust_cluster(fleet_cli, lab)
    inventory = str(lab.inventory_file)

    lab.host("h100a").set_gpus(scenarios.hot_gpu(4, 0, temperature_c=97, host="h100a"))
    lab.host("dgx1").rotate_host_key()
    result = await fleet_cli.run("--json", "--inventory", inventory, "status", "--accept-new")

    hosts = {host["name"]: host for host in result.json()["hosts"]}
    assert result.returncode == 3
    assert hosts["dgx1"]["state"] == "host_key_rejected"
    assert "changed" in hosts["dgx1"]["reason"].lower()
    assert hosts["h100a"]["gpus"][0]["temperature_c"] == 97
