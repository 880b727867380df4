"""The README's Python API example runs as written against a simulated host over real SSH."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from tests.fixtures.cli import FleetCli
from tests.fixtures.sshserver import SimSshHostFactory

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_api_example() -> str:
    """The first ```python block of the README's "Python API" section."""
    section = README.read_text().split("## Python API", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "the README's Python API section has no python example"
    return match.group(1)


async def test_readme_python_api_example_runs(
    fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
) -> None:
    config = fleet_cli.home / "gpu01.gpus.conf"
    write_config(config, scenarios.idle(2, host="gpu01"))
    handle = await sim_ssh_host("gpu01", env=sim_tools.env(config))
    spec = handle.spec
    (fleet_cli.home / "inventory.yaml").write_text(
        f"hosts:\n  gpu01:\n    address: {spec.address}\n    port: {spec.port}\n"
        f"    user: {spec.user}\n    identity_file: {spec.identity_file}\n")
    pinned = fleet_cli.home / ".local" / "share" / "fleet" / "known_hosts"
    pinned.parent.mkdir(parents=True)
    pinned.write_text(handle.known_hosts_line + "\n")

    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", readme_api_example(), cwd=fleet_cli.home, env=fleet_cli.env(),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)

    assert process.returncode == 0, stderr.decode()
    lines = stdout.decode().splitlines()
    assert lines[0].startswith("gpu01 up "), lines
    assert any("gpu01" in line and "GPU" in line for line in lines[1:2]), lines
    assert lines[-1].endswith("hourly points"), lines
