"""Browse and announce over real mDNS on 127.0.0.1 only (no root): fleet announce, HW-SD and
HWSD-article records, hostile records, goodbye and silent departures."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from fleet.discovery.browse import DiscoverySession, select_interfaces
from fleet.inventory import Inventory
from fleet.service import Fleet, open_database
from fleet.services.discovery import DiscoveryOutcome
from fleet.sim import gpus as scenarios
from fleet.ssh.options import SshOptions
from tests.cli.conftest import FleetCli
from tests.discovery.conftest import (
    LOOPBACK,
    AnnounceProcess,
    LoopbackRegistry,
    discover_until_listed,
    start_announce,
)
from tests.discovery.test_txt import wire
from tests.fixtures.cli import CliResult
from tests.fixtures.simgpu import SimHostFactory

BROWSE = ["--interface", LOOPBACK, "--timeout", "2s"]


def make_fleet(tmp_path: Path, options: SshOptions) -> Fleet:
    inventory = Inventory(hosts=(), path=None, groups={}, settings={}, settings_line=None)
    return Fleet(open_database(str(tmp_path / "fleet.db")), inventory, options)


def by_name(outcome: DiscoveryOutcome) -> dict[str, object]:
    return {view.name: view for view in outcome.views}


@pytest.mark.slow
async def test_fleet_announce_is_discovered_with_gpus_then_gone(
    fleet_cli: FleetCli, sim_host: SimHostFactory, token: str,
    announcers: list[AnnounceProcess],
) -> None:
    _config, env = sim_host(scenarios.idle(4, host="ann"), name="ann")
    name = f"ann-{token}"
    announcer = await start_announce(
        ["--interface", LOOPBACK, "--name", name, "--session", "lab-a", "--ssh-port", "2201",
         "--hwsd"], fleet_cli.env(env))
    announcers.append(announcer)
    assert "gpus=4" in announcer.first_line

    hosts = await discover_until_listed(fleet_cli, name, *BROWSE)
    mine = hosts[name]
    assert mine["gpu_count"] == 4 and mine["gpu_model"] == "NVIDIA A100-SXM4-80GB"
    assert (mine["session"], mine["ssh_port"], mine["state"]) == ("lab-a", 2201, "new")
    assert set(mine["services"]) == {"_fleet._tcp", "_gpu-sd._tcp"}

    assert await announcer.stop() == 0  # goodbye packets
    again = await fleet_cli.run("--json", "discover", *BROWSE)
    states = {host["name"]: host["state"] for host in again.json()["hosts"]}
    assert states.get(name) == "gone"
    stored = await fleet_cli.run("--json", "candidates", "--all")
    assert {h["name"]: h["state"] for h in stored.json()["hosts"]}[name] == "gone"


async def test_hwgpus_and_gpu_sd_records_are_listed_with_gpu_counts(
    tmp_path: Path, loopback_registry: LoopbackRegistry, token: str,
    sim_ssh_options: SshOptions,
) -> None:
    await asyncio.gather(
        loopback_registry.register("_hwgpus._tcp", f"hw-{token}", port=22,
                                   properties={"gpu": "RTX 4090,RTX 4090,RTX 4090",
                                               "ssh_port": "2211"}),
        loopback_registry.register("_gpu-sd._tcp", f"sd-{token}", port=9200,
                                   properties={"GPU Count": "2", "GPU0 Type": "H100",
                                               "GPU1 Type": "H100", "Hostname": "sdhost",
                                               "Session": "lab-b", "NodeID": "n1",
                                               "ssh_port": "2212"}),
        loopback_registry.register("_ssh._tcp", f"ssh-{token}", port=2222, properties=b"\x00"),
    )
    fleet = make_fleet(tmp_path, sim_ssh_options)
    try:
        outcome = await fleet.discover(timeout=2.0, interfaces=[LOOPBACK])
    finally:
        fleet.close()
    views = {view.name: view for view in outcome.views}
    hw, sd, ssh = views[f"hw-{token}"], views[f"sd-{token}"], views[f"ssh-{token}"]
    assert (hw.gpu_count, hw.gpu_model, hw.service_types) == (3, "RTX 4090", ("_hwgpus._tcp",))
    assert (sd.gpu_count, sd.gpu_model, sd.session) == (2, "H100", "lab-b")
    assert (ssh.gpu_count, ssh.ssh_port, ssh.service_types) == (None, 2222, ("_ssh._tcp",))


HOSTILE_TXT = wire(b"gpus=-1", b"gpus=9999999", b"nokey", b"gpu_model=\xff\xfe\x1b",
                   b"session=\x1b[2Jx", b"junk=" + b"z" * 250)


async def _browse_while_sending_hostile(
    fleet_cli: FleetCli, loopback_registry: LoopbackRegistry, token: str,
) -> tuple[CliResult, CliResult]:
    """`fleet discover` and `fleet --json discover` at once, while unusable records arrive
    unsolicited (an escape-laden name, port 0)."""
    run = asyncio.create_task(fleet_cli.run("discover", *BROWSE))
    evil_json = asyncio.create_task(fleet_cli.run("--json", "discover", *BROWSE))
    for _ in range(80):  # unsolicited responses for as long as the browses listen
        if run.done() and evil_json.done():
            break
        await asyncio.sleep(0.2)
        loopback_registry.send_raw("_fleet._tcp", f"esc\x1b[31m\x07-{token}", port=2203,
                                   txt=b"\x06gpus=1", server=f"evil\x1b-{token}.local.")
        loopback_registry.send_raw("_fleet._tcp", f"portzero-{token}", port=0,
                                   txt=b"\x06gpus=1", server=f"pz-{token}.local.")
    return await run, await evil_json


@pytest.mark.slow
async def test_hostile_announcements_are_listed_safely_or_skipped(
    fleet_cli: FleetCli, loopback_registry: LoopbackRegistry, token: str,
) -> None:
    await loopback_registry.register("_fleet._tcp", f"hostile-{token}", port=2202,
                                     properties=HOSTILE_TXT)
    # One 2 s browse can miss a fresh announcement on a busy machine: browse again (bounded)
    # until both listings name it, as discover_until_listed does.
    deadline = time.monotonic() + 30.0
    while True:
        text, as_json = await _browse_while_sending_hostile(fleet_cli, loopback_registry, token)
        listed = f"hostile-{token}"
        if (listed in text.stdout and listed in as_json.stdout) or time.monotonic() > deadline:
            break
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    for output in (text.stdout, text.stderr, as_json.stdout, as_json.stderr):
        assert "\x1b" not in output and "\x07" not in output
    assert f"hostile-{token}" in text.stdout
    hosts = {host["name"]: host for host in as_json.json()["hosts"]}
    hostile = hosts[f"hostile-{token}"]
    assert hostile["gpu_count"] is None and hostile["session"] == "?[2Jx"
    assert any("duplicate TXT key 'gpus'" in p for p in hostile["problems"])
    assert any("gpus='-1'" in p for p in hostile["problems"])
    skipped = as_json.json()["skipped"]
    assert any(f"-{token}" in s and "unusable service name" in s for s in skipped), skipped
    assert any(f"portzero-{token}" in s and "port" in s for s in skipped), skipped
    assert "skipped mDNS record" in text.stderr
    assert not any("esc" in name and token in name for name in hosts)


async def test_continuous_browse_reports_goodbye_as_removed(
    loopback_registry: LoopbackRegistry, token: str,
) -> None:
    events: list[tuple[str, str]] = []
    async with DiscoverySession(select_interfaces([LOOPBACK]), ["_fleet._tcp"],
                                on_event=lambda e: events.append(
                                    (e.kind, e.service.instance if e.service else ""))) as live:
        info = await loopback_registry.register("_fleet._tcp", f"live-{token}", port=2204,
                                                properties={"gpus": "1"})
        for _ in range(40):
            if ("added", f"live-{token}") in events:
                break
            await live.wait_changed(0.25)
        await loopback_registry.unregister(info)
        for _ in range(40):
            if ("removed", f"live-{token}") in events:
                break
            await live.wait_changed(0.25)
    assert ("added", f"live-{token}") in events
    assert ("removed", f"live-{token}") in events
