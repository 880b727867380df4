"""`fleet reserve/release/allocations` through the real CLI against simulated SSH GPU hosts."""

from __future__ import annotations

import time

import pytest

from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from tests.fixtures.cli import FleetCli
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory

EXIT_NO_PLACEMENT = 7


async def _start_hosts(fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
                       hosts: dict[str, scenarios.SimHostGpus]) -> list[SimHostHandle]:
    handles = []
    lines = ["hosts:"]
    for name, gpus in hosts.items():
        config = fleet_cli.home / f"{name}.gpus.conf"
        write_config(config, gpus)
        handle = await sim_ssh_host(name, env=sim_tools.env(config))
        spec = handle.spec
        lines += [f"  {name}:", f"    address: {spec.address}", f"    port: {spec.port}",
                  f"    user: {spec.user}", f"    identity_file: {spec.identity_file}",
                  "    labels: {rack: " + ("b" if name == "beta" else "a") + "}"]
        handles.append(handle)
    (fleet_cli.home / "inventory.yaml").write_text("\n".join(lines) + "\n")
    return handles


@pytest.mark.slow
@pytest.mark.usefixtures("db_url")  # on each backend
async def test_reserve_release_allocations_end_to_end(
    fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools
) -> None:
    await _start_hosts(fleet_cli, sim_ssh_host, sim_tools, {
        "alpha": scenarios.idle(2, host="alpha"), "beta": scenarios.busy(2, host="beta")})
    # Pin the host keys without recording anything: the database has no samples, so the first
    # reservation must probe the hosts itself (the stale-data path).
    pinned = await fleet_cli.run("status", "--accept-new", "--no-record")
    assert pinned.returncode == 0, pinned.stderr

    before = time.time()
    first = await fleet_cli.run("--json", "reserve", "--gpus", "2", "--for", "1h",
                                "--note", "debugging NCCL")
    assert first.returncode == 0, first.stderr
    held = first.json()
    alpha_uuids = [scenarios.gpu_uuid("alpha", i) for i in range(2)]
    assert (held["host"], held["gpus"], held["uuids"]) == ("alpha", [0, 1], alpha_uuids)
    assert held["cuda_visible_devices"] == ",".join(alpha_uuids)
    assert before + 3600 - 5 <= held["expires_at"] <= time.time() + 3600 + 5

    # Alpha is reserved and beta's GPUs run someone else's processes: nothing fits.
    refused = await fleet_cli.run("reserve", "--gpus", "1")
    assert refused.returncode == EXIT_NO_PLACEMENT, refused.stderr
    assert "no host has 1 free GPU" in refused.stderr
    assert f"alpha:0: reserved by {held['owner']}" in refused.stderr
    assert "beta:1: " in refused.stderr and "process not started by fleet" in refused.stderr
    assert refused.stdout == ""

    explained = await fleet_cli.run("reserve", "--allow-unmanaged", "--label", "rack=b",
                                    "--explain")
    assert explained.returncode == 0, explained.stderr
    lines = explained.stdout.splitlines()
    assert lines[0].startswith("placed on beta GPU ")
    assert any(line.startswith("*  beta") for line in lines)
    assert "host label rack=a does not match b" in explained.stdout
    beta_index = int(lines[0].split("GPU ")[1].split()[0])
    assert lines[-1] == f"CUDA_VISIBLE_DEVICES={scenarios.gpu_uuid('beta', beta_index)}"

    listed = await fleet_cli.run("--json", "allocations")
    assert listed.returncode == 0, listed.stderr
    rows = listed.json()["allocations"]
    assert sorted((row["host"], row["gpu"]) for row in rows) == [
        ("alpha", 0), ("alpha", 1), ("beta", beta_index)]
    assert {row["note"] for row in rows if row["host"] == "alpha"} == {"debugging NCCL"}
    table = await fleet_cli.run("allocations")
    assert table.stdout.splitlines()[0].split()[:6] == ["ID", "HOST", "GPU", "UUID", "KIND",
                                                         "OWNER"]
    assert "debugging NCCL" in table.stdout and "never" in table.stdout

    alpha_ids = [str(i) for i in held["allocation_ids"]]
    released = await fleet_cli.run("release", *alpha_ids)
    assert released.returncode == 0, released.stderr
    assert released.stdout.strip() == f"released allocation {', '.join(alpha_ids)}"
    again = await fleet_cli.run("release", alpha_ids[0])
    assert again.returncode == 2
    assert f"allocation {alpha_ids[0]} is not active" in again.stderr
    unknown = await fleet_cli.run("release", "999")
    assert unknown.returncode == 2 and "no allocation with id 999" in unknown.stderr

    # Alpha is free again and fresh in the database: the next reservation takes it.
    retaken = await fleet_cli.run("--json", "reserve")
    assert retaken.returncode == 0, retaken.stderr
    assert retaken.json()["host"] == "alpha"

    mine = await fleet_cli.run("--json", "release", "--all-mine")
    assert mine.returncode == 0, mine.stderr
    assert len(mine.json()["released"]) == 2
    history = (await fleet_cli.run("--json", "allocations", "--all")).json()["allocations"]
    assert len(history) == 4 and not any(row["active"] for row in history)
    assert {row["release_reason"] for row in history} == {"released by operator"}
    assert (await fleet_cli.run("allocations")).stdout.strip() == "no active allocations"


async def test_reserve_input_errors(fleet_cli: FleetCli) -> None:
    bad_memory = await fleet_cli.run("reserve", "--min-free-mem", "lots")
    assert bad_memory.returncode == 2 and "invalid --min-free-mem 'lots'" in bad_memory.stderr
    bad_duration = await fleet_cli.run("reserve", "--for", "soon")
    assert bad_duration.returncode == 2 and "--for" in bad_duration.stderr
    nothing = await fleet_cli.run("release")
    assert nothing.returncode == 2 and "--all-mine" in nothing.stderr
