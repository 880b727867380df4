"""With nobody subscribed the monitor builds no snapshots; whoever asks still gets the newest."""

from __future__ import annotations

import asyncio

from db.engine import Database
from fleet.model import HostSpec
from fleet.monitor.config import Settings
from fleet.monitor.monitor import Monitor
from fleet.monitor.publisher import PUBLISH_COALESCE_S
from fleet.reports import GpuReport, HostReport, ProbeReport
from fleet.ssh.options import SshOptions

SPECS = (HostSpec("atlas", "10.0.0.1"), HostSpec("bolt", "10.0.0.2"))


def _reading(temperature_c: float) -> ProbeReport:
    return ProbeReport(schema=1, timestamp=1_700_000_000.0, host=HostReport(hostname="atlas"),
                       gpus=(GpuReport(index=0, uuid="GPU-0", temperature_c=temperature_c),))


def _temperature(monitor: Monitor) -> float | None:
    snapshot = monitor.snapshot()
    assert snapshot is not None
    (atlas,) = (host for host in snapshot.hosts if host.spec.name == "atlas")
    return atlas.gpus[0].reading.temperature_c


async def _coalesced() -> None:
    await asyncio.sleep(PUBLISH_COALESCE_S * 4)


async def test_changes_wait_for_a_subscriber_or_a_question(database: Database,
                                                            fast_settings: Settings) -> None:
    monitor = Monitor(SPECS, database, SshOptions(), fast_settings)
    publisher = asyncio.create_task(monitor.publisher.run())
    try:
        monitor.on_report(SPECS[0], _reading(41.0))
        await _coalesced()
        assert monitor.hub.published == 0  # nobody listens: nothing built
        assert _temperature(monitor) == 41.0  # asked: made now, with the newest reading
        assert monitor.hub.published == 1
        assert _temperature(monitor) == 41.0 and monitor.hub.published == 1  # nothing new

        monitor.on_report(SPECS[0], _reading(42.0))
        await _coalesced()
        updates = monitor.subscribe()
        first = await anext(updates)  # starts from the newest state, not the held-back one
        assert [host.gpus[0].reading.temperature_c for host in first.hosts if host.gpus] == [42.0]

        published = monitor.hub.published
        monitor.on_report(SPECS[0], _reading(43.0))
        second = await asyncio.wait_for(anext(updates), 5)  # a subscriber: published as before
        assert monitor.hub.published == published + 1
        assert second.changed == frozenset({"atlas"})
        assert [host.gpus[0].reading.temperature_c for host in second.hosts if host.gpus] == [43.0]
        await updates.aclose()
    finally:
        publisher.cancel()
        await asyncio.gather(publisher, return_exceptions=True)
