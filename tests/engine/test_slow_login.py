"""`fleet status` on a host whose SSH login eats most of --timeout: the probe still gets a
usable slice, and a failure says where the time went."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

import fleet.ssh.connect
from fleet.fanout import probe_host
from fleet.ssh.options import SshOptions
from tests.engine.test_ssh_connect import trust
from tests.fixtures.sshserver import SimSshHostFactory


async def test_a_slow_login_is_named_in_the_reason(
        sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    handle = await sim_ssh_host("slowpoke")
    hanging = tmp_path / "hanging-python"
    hanging.write_text("#!/bin/sh\nexec sleep 60\n")
    hanging.chmod(0o755)
    spec = replace(handle.spec, python=str(hanging))
    options = trust(sim_ssh_options, tmp_path, handle)
    real_connect = fleet.ssh.connect.connect

    async def slow_connect(*args: object, **kwargs: object) -> object:
        await asyncio.sleep(1.6)  # as a host that takes long to let us in
        return await real_connect(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fleet.ssh.connect, "connect", slow_connect)
    status = await probe_host(spec, options, timeout=2.0)

    assert status.state != "up"
    assert status.reason is not None
    assert "(the SSH login alone took 1." in status.reason and "s of the 2s)" in status.reason
