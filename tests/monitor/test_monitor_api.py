"""The service API: watch() starts the monitor in-process, filters by pattern, stops with its last
watcher; start_monitor/stop_monitor/snapshot."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from db.engine import Database
from fleet.inventory import Inventory
from fleet.service import Fleet
from fleet.sim import gpus as sim
from fleet.ssh.options import SshOptions
from tests.monitor.conftest import GpuHostFactory, process_alive

FAST = (
    "monitor:\n  interval: 0.2\n  flush_interval: 0.2\n  reconnect_initial: 0.1\n"
    "  reconnect_max: 0.5\nssh:\n  command_timeout: 5\n"
)


async def test_watch_starts_filters_and_stops_the_monitor(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(FAST)
    monkeypatch.setenv("FLEET_CONFIG", str(config))
    hosts = [await gpu_hosts(name, sim.idle(2, host=name)) for name in ("web1", "gpu1", "gpu2")]
    inventory = Inventory(tuple(h.spec for h in hosts), None, {}, {}, None)
    service = Fleet(database, inventory, sim_ssh_options)
    assert service.snapshot() is None

    gpu_view = service.watch("gpu*")
    all_view = service.watch()

    async def until_up(view: object, expected: set[str]) -> set[str]:
        async for snapshot in view:  # type: ignore[attr-defined]
            up = {h.spec.name for h in snapshot.hosts if h.state == "up"}
            if up == expected:
                return {h.spec.name for h in snapshot.hosts}
        raise AssertionError("watch ended")

    shown = await asyncio.wait_for(until_up(gpu_view, {"gpu1", "gpu2"}), 20)
    assert shown == {"gpu1", "gpu2"}  # only the pattern's hosts, and only those monitored
    everything = await asyncio.wait_for(until_up(all_view, {"gpu1", "gpu2"}), 5)
    assert everything == {"gpu1", "gpu2"}
    monitor = service.monitor
    assert monitor is not None and monitor.settings.monitor.interval == 0.2
    await gpu_view.aclose()
    assert service.monitor is monitor  # still one watcher
    await all_view.aclose()
    assert service.monitor is None and not monitor.running
    probes = [pid for h in hosts for pid in h.host.started_pids]
    assert hosts[0].host.started_pids == []  # web1 was never contacted
    deadline = asyncio.get_running_loop().time() + 5
    while any(process_alive(pid) for pid in probes):
        assert asyncio.get_running_loop().time() < deadline, "probes outlived the monitor"
        await asyncio.sleep(0.05)


async def test_start_monitor_twice_is_an_error(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fleet.errors import ConfigError

    config = tmp_path / "config.yaml"
    config.write_text(FAST)
    monkeypatch.setenv("FLEET_CONFIG", str(config))
    host = await gpu_hosts("solo", sim.idle(1, host="solo"))
    service = Fleet(database, Inventory((host.spec,), None, {}, {}, None), sim_ssh_options)
    monitor = await service.start_monitor()
    try:
        with pytest.raises(ConfigError, match="already running"):
            await service.start_monitor()
        with pytest.raises(ConfigError, match="matches no host"):
            await Fleet(database, service.inventory, sim_ssh_options).start_monitor("nope*")
    finally:
        await service.stop_monitor()
    assert not monitor.running and service.snapshot() is None


async def test_start_monitor_on_a_broken_schema_is_a_storage_error(
    gpu_hosts: GpuHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sqlite3

    from db.engine import open_database
    from fleet.errors import StorageError

    config = tmp_path / "config.yaml"
    config.write_text(FAST)
    monkeypatch.setenv("FLEET_CONFIG", str(config))
    path = tmp_path / "broken.db"
    open_database(str(path)).close()
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("ALTER TABLE gpus RENAME TO gpus_moved")  # read by the registration
    connection.close()
    database = open_database(str(path))
    host = await gpu_hosts("solo", sim.idle(1, host="solo"))
    service = Fleet(database, Inventory((host.spec,), None, {}, {}, None), sim_ssh_options)
    try:
        with pytest.raises(StorageError, match="cannot register the monitored hosts"):
            await service.start_monitor()
        assert service.monitor is None and host.host.started_pids == []
    finally:
        database.close()


async def test_snapshots_show_reservations_and_expired_ones_are_released(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    from fleet.placement.claim import claim

    config = tmp_path / "config.yaml"
    config.write_text(FAST)
    monkeypatch.setenv("FLEET_CONFIG", str(config))
    monkeypatch.setattr("fleet.monitor.monitor.HOUSEKEEPING_INTERVAL_S", 0.2)
    host = await gpu_hosts("resv", sim.idle(2, host="resv"))
    service = Fleet(database, Inventory((host.spec,), None, {}, {}, None), sim_ssh_options)
    await service.start_monitor()
    try:
        deadline = time.monotonic() + 20
        while len(await service.latest_gpus()) < 2:  # the GPUs are in the database
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        alice_until = int(time.time()) + 3600
        held = await asyncio.to_thread(claim, database, "resv", [1], kind="reservation",
                                       owner="alice", note="eval run", expires_at=alice_until)
        expiring = await asyncio.to_thread(claim, database, "resv", [0], kind="reservation",
                                           owner="bob", expires_at=int(time.time()) + 2)

        async def alice_shown() -> None:
            async for snapshot in service.watch():
                holder = {g.index: g.allocation for g in snapshot.hosts[0].gpus}.get(1)
                if holder is not None and holder.owner == "alice":
                    return

        await asyncio.wait_for(alice_shown(), 20)
        # One type in every view: the watched snapshot's expiry is the int the service lists.
        listed = {a.id: a for a in await service.allocations()}
        assert type(listed[held.allocation_ids[0]].expires_at) is int
        async for snapshot in service.watch():
            shown = {g.index: g.allocation for g in snapshot.hosts[0].gpus}[1]
            assert shown is not None
            assert type(shown.expires_at) is int
            assert shown.expires_at == listed[held.allocation_ids[0]].expires_at == alice_until
            break

        def active_ids() -> list[int]:
            from db.allocation_details import allocation_details

            with database.reader() as reader:  # a plain read: it expires nothing itself
                return [a.id for a in allocation_details(reader, active_only=True)]

        deadline = time.monotonic() + 20
        while expiring.allocation_ids[0] in await asyncio.to_thread(active_ids):
            assert time.monotonic() < deadline, "the monitor did not expire the reservation"
            await asyncio.sleep(0.1)
        assert await asyncio.to_thread(active_ids) == list(held.allocation_ids)

        async def after_expiry() -> None:
            async for snapshot in service.watch():
                gpus = {g.index: g for g in snapshot.hosts[0].gpus}
                if gpus[0].allocation is None and gpus[1].allocation is not None:
                    assert gpus[1].allocation.note == "eval run"
                    assert gpus[1].allocation.allocation_id == held.allocation_ids[0]
                    return

        await asyncio.wait_for(after_expiry(), 20)
    finally:
        await service.stop_monitor()
