"""mDNS announcers inside namespace hosts are seen by a browser bound to the bridge address only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from zeroconf import IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from fleet.sim import gpus as scenarios
from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netcluster import Cluster
from tests.fixtures.cluster import ClusterFactory

pytestmark = pytest.mark.root
FLEET_TYPE = "_fleet._tcp.local."
SSH_TYPE = "_ssh._tcp.local."
WAIT_S = 15.0


async def resolve(zeroconf: AsyncZeroconf, service_type: str, name: str) -> AsyncServiceInfo:
    info = AsyncServiceInfo(service_type, name)
    for _attempt in range(5):  # one request can be lost while announcers are busy registering
        if await info.async_request(zeroconf.zeroconf, 1000):
            return info
    raise AssertionError(f"{name}: did not resolve")


async def test_two_announcers_are_seen_and_leave_with_goodbye(
    netns_cluster: ClusterFactory,
) -> None:
    built = await netns_cluster(
        [
            ClusterHostSpec(
                "mdnsa", scenarios.idle(4, host="mdnsa"), announce={"_fleet._tcp", "_ssh._tcp"}
            ),
            ClusterHostSpec("mdnsb", None, announce={"_ssh._tcp"}),
            ClusterHostSpec("quiet"),
        ]
    )
    assert isinstance(built, Cluster)
    present: dict[str, set[str]] = {SSH_TYPE: set(), FLEET_TYPE: set()}
    changed = asyncio.Event()

    def on_change(
        zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        if state_change is ServiceStateChange.Added:
            present[service_type].add(name)
        elif state_change is ServiceStateChange.Removed:
            present[service_type].discard(name)
        changed.set()

    async def wait_until(condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"mDNS view never matched; saw {present}"
            changed.clear()
            try:
                await asyncio.wait_for(changed.wait(), timeout=remaining)
            except TimeoutError:
                continue

    # Bound to the bridge address only: never 0.0.0.0, never the uplink.
    browser_zc = AsyncZeroconf(interfaces=[built.controller_address], ip_version=IPVersion.V4Only)
    browser = AsyncServiceBrowser(browser_zc.zeroconf, [SSH_TYPE, FLEET_TYPE], handlers=[on_change])
    try:
        await wait_until(
            lambda: (
                {"mdnsa._ssh._tcp.local.", "mdnsb._ssh._tcp.local."} <= present[SSH_TYPE]
                and "mdnsa._fleet._tcp.local." in present[FLEET_TYPE]
            )
        )
        fleet_info = await resolve(browser_zc, FLEET_TYPE, "mdnsa._fleet._tcp.local.")
        assert fleet_info.parsed_addresses(IPVersion.V4Only) == [built.host("mdnsa").address]
        assert fleet_info.port == 22
        assert fleet_info.properties == {
            b"v": b"1",
            b"ssh_port": b"22",
            b"gpus": b"4",
            b"gpu_model": b"NVIDIA A100-SXM4-80GB",
            b"mem_gb": b"320",
        }
        ssh_info = await resolve(browser_zc, SSH_TYPE, "mdnsb._ssh._tcp.local.")
        assert ssh_info.parsed_addresses(IPVersion.V4Only) == [built.host("mdnsb").address]
        # A host without an announcer is not discoverable, and mdnsb publishes no _fleet._tcp.
        assert "quiet._ssh._tcp.local." not in present[SSH_TYPE]
        assert "mdnsb._fleet._tcp.local." not in present[FLEET_TYPE]

        started = time.monotonic()
        built.host("mdnsb").stop_announcer()  # SIGTERM: goodbye packets
        await wait_until(lambda: "mdnsb._ssh._tcp.local." not in present[SSH_TYPE])
        assert time.monotonic() - started < 10.0  # the goodbye, far before the records' TTL
        assert "mdnsa._ssh._tcp.local." in present[SSH_TYPE]
    finally:
        await browser.async_cancel()
        await browser_zc.async_close()
