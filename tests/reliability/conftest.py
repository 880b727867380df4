"""Fixtures for reliability tests: one 8-host namespace cluster per module, a fresh controller
per test, and every fault undone and every task killed afterwards (root only)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from fleet.sim import gpus as scenarios
from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netcluster import Cluster
from tests.cluster.netns import FaultUnavailable
from tests.fixtures.cli import FleetCli
from tests.reliability.lab import ReliabilityLab, open_lab, signal_all_sshd

HOSTS = 8
GPUS_PER_HOST = 2


def host_names(count: int, prefix: str = "r") -> list[str]:
    return [f"{prefix}{index}" for index in range(count)]


def idle_specs(count: int, gpus: int, prefix: str = "r") -> list[ClusterHostSpec]:
    return [ClusterHostSpec(name, scenarios.idle(gpus, host=name))
            for name in host_names(count, prefix)]


@pytest.fixture(scope="module")
def fault_cluster(
    netns_cluster_module: Callable[[Sequence[ClusterHostSpec]], Cluster],
) -> Cluster:
    """8 namespace hosts with 2 idle simulated GPUs each, shared by a module's tests."""
    return netns_cluster_module(idle_specs(HOSTS, GPUS_PER_HOST))


def restore_hosts(cluster: Cluster) -> None:
    """Undoes every fault a test may have left: link, frozen or dead sshd, netem, GPUs."""
    for host in cluster.hosts:
        host.link_up()
        signal_all_sshd(host, signal.SIGCONT)
        if host.sshd_record is None or not host.sshd_record.is_alive():
            host.start_sshd()
        with contextlib.suppress(FaultUnavailable):
            host.clear_netem()
        host.set_gpus(scenarios.idle(GPUS_PER_HOST, host=host.name))


@pytest.fixture
async def lab(fault_cluster: Cluster, fleet_cli: FleetCli) -> AsyncIterator[ReliabilityLab]:
    """A fresh controller (home, DB, monitor slot) over the shared cluster, cleaned afterwards."""
    restore_hosts(fault_cluster)
    opened = await open_lab(fault_cluster, fleet_cli)
    try:
        yield opened
    finally:
        await opened.stop_monitors()
        opened.kill_tasks()
        restore_hosts(fault_cluster)
