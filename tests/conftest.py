"""Shared pytest configuration: the fixture modules of every test area, and the xdist groups.

`make test` runs the suite on several pytest-xdist workers (`--dist loadgroup`). Most tests own
everything they touch (tmp_path, port 0, their own network namespaces, subnet and run id, their
own PostgreSQL database). Those that share something machine-wide are pinned to one xdist group,
so one worker runs them one after another:

- `mdns`: tests that announce or browse mDNS. On loopback every registration is visible to every
  browser on the machine (a test that auto-adopts a session would adopt another test's hosts),
  and a plain zeroconf socket on 0.0.0.0:5353 also hears other test bridges (IP_MULTICAST_ALL).
- `unix-users`: tests that create real Unix users and groups (useradd locks /etc/passwd).
- one group per module for modules whose tests share a module-scoped namespace cluster, so the
  cluster is built once rather than once per worker.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = [
    "tests.fixtures.simgpu",
    "tests.fixtures.sshserver",
    "tests.fixtures.cluster",
    "tests.fixtures.cli",
    "tests.fixtures.database",
]

# Property tests judge outputs, not speed: on a loaded machine (two workers on two cores) input
# generation and single examples may be slow, which is no failure of the code under test.
settings.register_profile("fleet", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fleet")

MDNS_GROUP = "mdns"
UNIX_USERS_GROUP = "unix-users"
# Fixtures that open mDNS on loopback, and modules whose tests announce or browse on a bridge.
MDNS_FIXTURES = frozenset({"loopback_registry", "announcers"})
MDNS_MODULES = frozenset({
    "tests/cluster/test_mdns.py",
    "tests/cluster/test_lifecycle.py",  # a host announces _ssh._tcp on its bridge
    "tests/discovery/test_cluster.py",
    "tests/discovery/test_loopback.py",
    "tests/discovery/test_adopt.py",
})
UNIX_USERS_MODULES = frozenset({
    "tests/server/test_identity.py",
    "tests/server/test_cross_user_dispatch.py",
    "tests/server/test_limits_lab.py",
    "tests/cluster/test_remote_server.py",
})
# Module-scoped fixtures that build a namespace cluster (seconds of setup, hosts' sshd).
MODULE_CLUSTER_FIXTURES = frozenset({"mixed_cluster", "fault_cluster", "netns_cluster_module"})


def xdist_group(item: pytest.Item) -> str | None:
    """The xdist group a test must run in, or None when any worker may run it."""
    module = item.nodeid.split("::", 1)[0]
    fixtures = set(getattr(item, "fixturenames", ()))
    if module in MDNS_MODULES or fixtures & MDNS_FIXTURES:
        return MDNS_GROUP
    if module in UNIX_USERS_MODULES:
        return UNIX_USERS_GROUP
    if fixtures & MODULE_CLUSTER_FIXTURES:
        return module
    return None


# First, so that xdist (which appends the group to each test's node id in its own hook of this
# name) sees the marks added here.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = xdist_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
