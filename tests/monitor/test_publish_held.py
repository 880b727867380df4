"""With nobody subscribed the monitor builds no snapshots; whoever asks still gets the newest."""

from __future__ import annotations

import asyncio

import pytest

from db.engine import Database
from fleet.model import HostSpec
from fleet.monitor import publisher as publisher_module
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


async def test_with_nobody_subscribed_the_publisher_does_not_wake_per_change(
        database: Database, fast_settings: Settings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    frames: list[float] = []
    real_sleep = asyncio.sleep

    async def counted_sleep(seconds: float) -> None:
        frames.append(seconds)
        await real_sleep(seconds)

    monkeypatch.setattr(publisher_module.asyncio, "sleep", counted_sleep)
    monitor = Monitor(SPECS, database, SshOptions(), fast_settings)
    publisher = asyncio.create_task(monitor.publisher.run())
    try:
        for temperature in (41.0, 42.0, 43.0):
            monitor.on_report(SPECS[0], _reading(temperature))
            await real_sleep(PUBLISH_COALESCE_S * 2)
        assert frames == []  # headless: no frame timer ran for the three changes
        assert _temperature(monitor) == 43.0  # and whoever asks still gets the newest

        updates = monitor.subscribe()
        await anext(updates)
        monitor.on_report(SPECS[0], _reading(44.0))
        await asyncio.wait_for(anext(updates), 5)
        assert frames == [PUBLISH_COALESCE_S]  # a subscriber: one frame for the change
        await updates.aclose()
    finally:
        publisher.cancel()
        await asyncio.gather(publisher, return_exceptions=True)


async def test_changes_held_before_a_subscription_reach_it(database: Database,
                                                          fast_settings: Settings) -> None:
    monitor = Monitor(SPECS, database, SshOptions(), fast_settings)
    publisher = asyncio.create_task(monitor.publisher.run())
    try:
        monitor.on_report(SPECS[0], _reading(41.0))
        assert _temperature(monitor) == 41.0  # published on request
        monitor.on_report(SPECS[0], _reading(42.0))  # held: nobody subscribed
        await _coalesced()
        updates = monitor.hub.subscribe()  # straight from the hub, past the publisher's check
        first = await anext(updates)
        assert [host.gpus[0].reading.temperature_c for host in first.hosts if host.gpus] == [41.0]
        second = await asyncio.wait_for(anext(updates), 5)  # the held change follows
        assert [host.gpus[0].reading.temperature_c for host in second.hosts if host.gpus] == [42.0]
        await updates.aclose()
    finally:
        publisher.cancel()
        await asyncio.gather(publisher, return_exceptions=True)
