"""The fan-out benchmark's probe peer: the floor's asyncssh client really runs fleet's probe
(command and program, as `fleet status` sends them) and fails when a host answers nothing."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from fleet.probe.bundle import probe_command, probe_program
from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from tests.bench.bench_fanout import HERE
from tests.fixtures.sshserver import SimSshHostFactory, SshKeys

PEER = HERE / "peer_asyncssh.py"


async def _run_peer(*argv: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(PEER), *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_probe_peer_runs_fleets_probe_and_rejects_a_silent_host(
        tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
        ssh_keys: SshKeys) -> None:
    config = tmp_path / "gpus.conf"
    write_config(config, scenarios.idle(2, host="peer01"))
    handle = await sim_ssh_host("peer01", env=sim_tools.env(config))
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps([{"address": handle.spec.address, "port": handle.port,
                                  "user": handle.spec.user}]))
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(handle.known_hosts_line + "\n")
    program = tmp_path / "probe.bin"
    program.write_bytes(probe_program("once", None))
    base = [str(hosts), str(ssh_keys.private_path), str(known_hosts)]

    rc, out, err = await _run_peer(*base, "--command", probe_command(), "--stdin", str(program))
    assert rc == 0, err
    assert json.loads(out)["hosts"] == 1

    rc, _, err = await _run_peer(*base, "--command", "cat >/dev/null", "--stdin", str(program))
    assert rc != 0
    assert f"{handle.spec.address}: cat >/dev/null… wrote nothing" in err

    rc, _, err = await _run_peer(*base, "--stdin", str(program))
    assert rc == 2
    assert "--command and --stdin go together" in err
