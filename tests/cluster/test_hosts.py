"""An 8-host mixed-GPU cluster: each host answers OpenSSH and asyncssh as itself, with its GPUs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess

import pytest

from fleet.inventory import load_inventory
from fleet.sim import gpus as scenarios
from fleet.sim.gpus import read_config
from tests.cluster.clients import (
    NVIDIA_SMI_QUERY,
    asyncssh_run,
    csv_lines,
    expected_nvidia_smi_lines,
    openssh_run,
)
from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netcluster import Cluster
from tests.fixtures.cluster import ClusterFactory

pytestmark = pytest.mark.root


def test_every_host_answers_openssh_as_itself(mixed_cluster: Cluster) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        results = list(
            pool.map(
                lambda host: openssh_run(
                    host, mixed_cluster.known_hosts_file, "hostname; echo $HOME; ls -A ~"
                ),
                mixed_cluster.hosts,
            )
        )
    for host, result in zip(mixed_cluster.hosts, results, strict=True):
        assert result.returncode == 0, f"{host.name}: {result.stderr}"
        # Own hostname, and a clean home: no .bashrc (this machine's runs pyenv init) and no files.
        assert result.stdout.split("\n") == [host.name, "/root", ""], host.name


async def test_every_host_answers_asyncssh_with_debian_python(mixed_cluster: Cluster) -> None:
    results = await asyncio.gather(
        *(
            asyncssh_run(host, mixed_cluster.known_hosts_file, "hostname; command -v python3")
            for host in mixed_cluster.hosts
        )
    )
    for host, (status, stdout, stderr) in zip(mixed_cluster.hosts, results, strict=True):
        assert status == 0, f"{host.name}: {stderr}"
        # The controller's pyenv Python is under /root, which each host replaces: hosts use theirs.
        assert stdout.split() == [host.name, "/usr/bin/python3"]


def test_inventory_and_ssh_config_name_every_host(mixed_cluster: Cluster) -> None:
    inventory = load_inventory(mixed_cluster.inventory_file)  # fleet's own loader reads it
    assert [(spec.name, spec.address, spec.port, spec.user) for spec in inventory.hosts] == [
        (host.name, host.address, 22, "root") for host in mixed_cluster.hosts
    ]
    assert {spec.identity_file for spec in inventory.hosts} == {str(mixed_cluster.client_key)}
    known_hosts = mixed_cluster.known_hosts_file.read_text().splitlines()
    assert known_hosts == [host.known_hosts_line for host in mixed_cluster.hosts]
    result = subprocess.run(
        ["ssh", "-n", "-F", str(mixed_cluster.ssh_config_file), "ws4090", "hostname"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "ws4090\n"), result.stderr


async def test_each_host_shows_its_own_gpus_in_nvidia_smi(mixed_cluster: Cluster) -> None:
    results = await asyncio.gather(
        *(
            asyncssh_run(host, mixed_cluster.known_hosts_file, NVIDIA_SMI_QUERY)
            for host in mixed_cluster.hosts
        )
    )
    seen = {host.name: result for host, result in zip(mixed_cluster.hosts, results, strict=True)}
    for host in mixed_cluster.hosts:
        status, stdout, stderr = seen[host.name]
        if host.config_path is None:
            assert status == 127, f"{host.name} has no driver, yet: {stdout} {stderr}"
            continue
        gpus = read_config(host.config_path)
        assert csv_lines(stdout) == expected_nvidia_smi_lines(gpus), host.name
        assert status == (15 if any(gpu.lost for gpu in gpus.gpus) else 0), f"{host.name}: {stdout}"
    # Hosts really differ: counts 8, 4, 2, 1, 4, 1 (+1 lost), 0 and no driver.
    assert [len(csv_lines(seen[h.name][1])) for h in mixed_cluster.hosts] == [
        8,
        4,
        2,
        1,
        4,
        1,
        0,
        0,
    ]


async def test_live_gpu_rewrite_is_seen_by_the_next_command(netns_cluster: ClusterFactory) -> None:
    built = await netns_cluster([ClusterHostSpec("live1", scenarios.idle(2, host="live1"))])
    host = built.hosts[0]
    _, before, _ = await asyncssh_run(host, built.known_hosts_file, NVIDIA_SMI_QUERY)
    assert len(csv_lines(before)) == 2
    now_busy = scenarios.busy(3, model="NVIDIA H100 80GB HBM3", host="live1")
    host.set_gpus(now_busy)
    status, after, _ = await asyncssh_run(host, built.known_hosts_file, NVIDIA_SMI_QUERY)
    assert status == 0
    assert csv_lines(after) == expected_nvidia_smi_lines(now_busy)


async def test_hosts_have_private_home_and_tmp(netns_cluster: ClusterFactory) -> None:
    built = await netns_cluster([ClusterHostSpec("priv1"), ClusterHostSpec("priv2")])
    first, second = built.hosts
    status, _, stderr = await asyncssh_run(
        first, built.known_hosts_file, "echo a > ~/mark && echo b > /tmp/mark"
    )
    assert status == 0, stderr
    _, on_first, _ = await asyncssh_run(first, built.known_hosts_file, "cat ~/mark /tmp/mark")
    status, on_second, _ = await asyncssh_run(second, built.known_hosts_file, "ls ~/mark /tmp/mark")
    assert on_first == "a\nb\n"
    assert status != 0 and on_second == ""
