"""Without root the same API runs on SimSshHost servers at 127.0.0.1 (tested here for any user)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from fleet.inventory import load_inventory
from fleet.sim import gpus as scenarios
from tests.cluster.clients import (
    NVIDIA_SMI_QUERY,
    asyncssh_run,
    csv_lines,
    expected_nvidia_smi_lines,
    openssh_run,
)
from tests.cluster.fallback import start_local_cluster
from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netns import FaultUnavailable
from tests.fixtures.cluster import ClusterFactory


async def test_local_hosts_answer_with_their_own_gpus_and_refuse_faults() -> None:
    specs = [
        ClusterHostSpec("loc4", scenarios.busy(4, host="loc4")),
        ClusterHostSpec(
            "loc1", scenarios.idle(1, model="NVIDIA GeForce RTX 4090", memory_gib=24, host="loc1")
        ),
        ClusterHostSpec("loccpu", None),
    ]
    local = await start_local_cluster(specs)
    try:
        assert local.mode == "local"
        assert [host.name for host in local.hosts] == ["loc4", "loc1", "loccpu"]
        assert [host.known_hosts_line.split()[0] for host in local.hosts] == [
            f"[127.0.0.1]:{host.port}" for host in local.hosts
        ]
        assert len({host.port for host in local.hosts}) == 3
        results = await asyncio.gather(
            *(asyncssh_run(host, local.known_hosts_file, NVIDIA_SMI_QUERY) for host in local.hosts)
        )
        for spec, (status, stdout, _) in zip(specs[:2], results, strict=False):
            assert spec.gpus is not None
            assert (status, csv_lines(stdout)) == (0, expected_nvidia_smi_lines(spec.gpus)), (
                spec.name
            )
        assert csv_lines(results[2][1]) == []
        # OpenSSH client against the asyncssh server, strict known_hosts, key only.
        openssh = await asyncio.to_thread(
            openssh_run, local.hosts[1], local.known_hosts_file, NVIDIA_SMI_QUERY
        )
        assert csv_lines(openssh.stdout) == expected_nvidia_smi_lines(
            specs[1].gpus or scenarios.idle(0)
        )
        for fault in ("link_down", "kill_sshd", "freeze_sshd", "rotate_host_key"):
            with pytest.raises(FaultUnavailable, match="needs root: network namespaces"):
                getattr(local.hosts[0], fault)()
    finally:
        await local.aclose()
    assert not local.state.path.exists()
    assert not Path(local.state.run_dir).exists()


async def test_cluster_fixture_gives_reachable_hosts_as_any_user(cluster: ClusterFactory) -> None:
    """The `cluster` factory works for root (namespaces) and everyone else (local servers)."""
    built = await cluster(
        [
            ClusterHostSpec("any2", scenarios.mixed(2, host="any2")),
            ClusterHostSpec("any0", None),
        ]
    )
    assert built.mode == ("netns" if os.geteuid() == 0 else "local")
    inventory = load_inventory(built.inventory_file)
    assert [(spec.address, spec.port) for spec in inventory.hosts] == [
        (host.address, host.port) for host in built.hosts
    ]
    status, stdout, _ = await asyncssh_run(built.hosts[0], built.known_hosts_file, NVIDIA_SMI_QUERY)
    assert (status, csv_lines(stdout)) == (
        0,
        expected_nvidia_smi_lines(scenarios.mixed(2, host="any2")),
    )
