"""Fixtures for the cluster's own tests: a module-wide 8-host mixed-GPU cluster (root only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from tests.cluster.gpuconf import mixed_lab_specs
from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netcluster import Cluster

# Also registered for every test area via pytest_plugins in tests/conftest.py; imported here so
# this directory's tests find them either way.
from tests.fixtures.cluster import cluster, netns_cluster, netns_cluster_module

__all__ = ["cluster", "mixed_cluster", "netns_cluster", "netns_cluster_module"]


@pytest.fixture(scope="module")
def mixed_cluster(
    netns_cluster_module: Callable[[Sequence[ClusterHostSpec]], Cluster],
) -> Cluster:
    """One 8-host namespace cluster shared by a module's read-only tests (root only)."""
    return netns_cluster_module(mixed_lab_specs())
