"""The service boundary: adopted hosts get work, confirmed keys, storage errors at the edge."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import asyncssh
import pytest
from sqlalchemy import text

from fleet.dispatch.request import DispatchRequest
from fleet.errors import ConfigError, HostKeyRejected, StorageError
from fleet.inventory import Inventory
from fleet.placement.request import PlacementRequest
from fleet.service import Fleet, open_database
from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from fleet.ssh.options import SshOptions
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory

EMPTY = Inventory(hosts=(), path=None, groups={}, settings={}, settings_line=None)


async def _gpu_host(sim_ssh_host: SimSshHostFactory, sim_tools: SimTools, home: Path,
                    name: str, count: int) -> SimHostHandle:
    config = home / f"{name}.gpus.conf"
    write_config(config, scenarios.idle(count, host=name))
    return await sim_ssh_host(name, env=sim_tools.env(config))


def _fingerprint(key: asyncssh.SSHKey) -> str:
    return str(key.convert_to_public().get_fingerprint("sha256"))


async def test_adoption_pins_the_confirmed_key_and_nothing_else(
    tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
    sim_ssh_options: SshOptions,
) -> None:
    handle = await _gpu_host(sim_ssh_host, sim_tools, tmp_path, "swapped", 1)
    confirmed = _fingerprint(handle.host_key)  # what the operator saw and accepted
    swapped_key = asyncssh.generate_private_key("ssh-ed25519")
    assert handle.host._acceptor is not None
    handle.host._acceptor.update(server_host_keys=[swapped_key])  # the key changes before pinning
    fleet = Fleet(open_database(str(tmp_path / "fleet.db")), EMPTY, sim_ssh_options)
    endpoint = f"127.0.0.1:{handle.port}"
    try:
        with pytest.raises(HostKeyRejected, match="not the key you confirmed"):
            await fleet.adopt(endpoint, name="gpu7", expected_fingerprint=confirmed)
        pinned = sim_ssh_options.pinned_hosts_file
        assert not pinned.exists() or str(handle.port) not in pinned.read_text()
        assert fleet.hosts() == ()

        result = await fleet.adopt(endpoint, name="gpu7",
                                   expected_fingerprint=_fingerprint(swapped_key))
        assert (result.name, result.spec.name) == ("gpu7", "gpu7")
        assert result.newly_pinned
        assert swapped_key.convert_to_public().export_public_key().split()[1].decode() in \
            pinned.read_text()
    finally:
        fleet.close()


async def test_an_adopted_host_is_placed_on_watched_and_listed(
    tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
    sim_ssh_options: SshOptions,
) -> None:
    handle = await _gpu_host(sim_ssh_host, sim_tools, tmp_path, "adoptee", 2)
    ssh_config = tmp_path / "ssh_config"  # adopted hosts authenticate like `ssh` would
    ssh_config.write_text(f"Host 127.0.0.1\n  IdentityFile {handle.spec.identity_file}\n")
    options = dataclasses.replace(sim_ssh_options, ssh_config_files=(ssh_config,))
    fleet = Fleet(open_database(str(tmp_path / "fleet.db")), EMPTY, options)
    try:
        await fleet.adopt(f"127.0.0.1:{handle.port}", name="adoptee", accept_new=True,
                          user=handle.spec.user)
        assert [spec.name for spec in fleet.hosts("@adopted")] == ["adoptee"]
        placed = await fleet.place(PlacementRequest(gpus=2))
        assert placed.host == "adoptee", placed.summary()
        snapshots = fleet.watch("@adopted")
        async with asyncio.timeout(30):
            async for snapshot in snapshots:
                if any(host.gpus for host in snapshot.hosts):
                    assert [host.spec.name for host in snapshot.hosts] == ["adoptee"]
                    break
        await snapshots.aclose()

        script = tmp_path / "hello.py"
        script.write_text('import os\nprint("on", os.environ["CUDA_VISIBLE_DEVICES"])\n')
        output = bytearray()
        request = DispatchRequest(script, PlacementRequest(gpus=1), timeout_s=60)
        async with asyncio.timeout(60):
            started, ending = await fleet.dispatch(request, on_output=output.extend)
        assert started.host.name == "adoptee"
        assert ending.state == "succeeded", (ending, bytes(output))
        assert bytes(output).startswith(b"on GPU-")  # the claimed GPU, by UUID
        assert (await fleet.task(started.task_id)).state == "succeeded"

        # A task nobody follows ends by reconcile, which must find the adopted host to ask it.
        detached = await fleet.submit(request)
        assert detached.host.name == "adoptee"
        async with asyncio.timeout(30):
            while True:
                report = await fleet.reconcile_tasks()
                assert report.unreachable == {}, report
                if detached.task_id in report.ended:
                    break
                assert report.still_running == [detached.task_id], report
                await asyncio.sleep(0.2)  # the poll interval: the loop waits on the report
        assert report.ended[detached.task_id] == "succeeded"
        assert (await fleet.task(detached.task_id)).state == "succeeded"
    finally:
        await fleet.stop_monitor()
        fleet.close()


async def test_database_errors_become_storage_errors_at_the_edge(tmp_path: Path) -> None:
    database = open_database(str(tmp_path / "fleet.db"))
    with database.engine.begin() as connection:
        connection.execute(text("DROP VIEW IF EXISTS task_history"))
        connection.execute(text("ALTER TABLE tasks RENAME TO tasks_gone"))
        connection.execute(text("ALTER TABLE events RENAME TO events_gone"))
    fleet = Fleet(database, EMPTY, SshOptions())
    try:
        with pytest.raises(StorageError, match="cannot list tasks"):
            await fleet.tasks()
        with pytest.raises(StorageError, match="cannot read events"):
            await fleet.events()
        with pytest.raises(StorageError, match="cannot read the task"):
            await fleet.task(1)
    finally:
        fleet.close()


async def test_unknown_history_and_event_targets_are_bad_input(tmp_path: Path) -> None:
    fleet = Fleet(open_database(str(tmp_path / "fleet.db")), EMPTY, SshOptions())
    try:
        with pytest.raises(ConfigError, match="unknown host 'nosuch'"):
            await fleet.gpu_history(since=0, until=1, host="nosuch")
        with pytest.raises(ConfigError, match="unknown host"):
            await fleet.gpu_history(since=0, until=1, gpu="nosuch:99")
        with pytest.raises(ConfigError, match="unknown host"):
            await fleet.events(host="nosuch")
        with pytest.raises(ConfigError, match="unknown host"):
            await fleet.host_history(since=0, until=1, host="nosuch")
    finally:
        fleet.close()
