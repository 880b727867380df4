"""Discovery over real multicast between namespace hosts on the test bridge (root only).

The controller binds to the bridge address only (never 0.0.0.0): hosts announce with the
cluster's python-zeroconf announcer or with `fleet announce` run inside their namespace.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.discovery.autoadopt import AutoAdoptPolicy
from fleet.discovery.browse import DiscoverySession, select_interfaces
from fleet.inventory import Inventory
from fleet.service import Fleet, open_database
from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.ssh.options import SshOptions
from tests.cluster.hosts import ClusterHost, ClusterHostSpec
from tests.cluster.netcluster import Cluster
from tests.fixtures.cluster import ClusterFactory
from tests.fixtures.sshserver import SshKeys

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0


class FleetAnnouncer:
    """`fleet announce` running inside a namespace host, bound to that host's address."""

    def __init__(self, host: ClusterHost, sim_tools: SimTools, *args: str) -> None:
        assert host.namespace is not None and host.config_path is not None
        env = dict(os.environ)
        env.update(sim_tools.env(host.config_path))
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", host.namespace, sys.executable, "-m", "fleet.cli.main",
             "announce", "--interface", host.address, "--name", host.name, "--ssh-port",
             str(host.port), *args],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True)

    def wait_ready(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # bounded: the process exits on any error
        if not line:
            assert self.process.stderr is not None
            raise AssertionError(f"fleet announce failed: {self.process.stderr.read()}")
        return line

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def cluster_fleet(tmp_path: Path, built: Cluster) -> Fleet:
    options = SshOptions(connect_timeout=5, login_timeout=5, command_timeout=30,
                         known_hosts_files=(), pinned_hosts_file=tmp_path / "pinned",
                         ssh_config_files=())
    inventory = Inventory(hosts=(), path=None, groups={}, settings={}, settings_line=None)
    return Fleet(open_database(str(tmp_path / "fleet.db")), inventory, options)


@pytest.mark.slow
async def test_announcing_hosts_are_listed_and_a_departed_one_is_gone(
    netns_cluster: ClusterFactory, sim_tools: SimTools, tmp_path: Path,
) -> None:
    built = await netns_cluster([
        ClusterHostSpec("zca", scenarios.idle(2, host="zca"), announce={"_ssh._tcp"}),
        ClusterHostSpec("zcb", None, announce={"_ssh._tcp"}),
        ClusterHostSpec("fla", scenarios.idle(4, host="fla")),
    ])
    assert isinstance(built, Cluster)
    announcer = FleetAnnouncer(built.host("fla"), sim_tools, "--session", "lab-a", "--hwsd")
    fleet = cluster_fleet(tmp_path, built)
    try:
        await asyncio.to_thread(announcer.wait_ready)
        started = time.monotonic()
        outcome = await fleet.discover(timeout=3.0, interfaces=[built.controller_address])
        views = {view.name: view for view in outcome.views}
        assert {"zca", "zcb", "fla"} <= set(views), sorted(views)
        assert time.monotonic() - started < 12.0  # a 3 s browse, not an unbounded wait
        assert views["fla"].gpu_count == 4 and views["fla"].session == "lab-a"
        assert views["fla"].address == built.host("fla").address
        assert views["zcb"].service_types == ("_ssh._tcp",)

        await asyncio.to_thread(built.host("zcb").stop_announcer)  # goodbye
        await asyncio.to_thread(announcer.stop)
        again = await fleet.discover(timeout=3.0, interfaces=[built.controller_address])
        states = {view.name: view.state for view in again.views}
        assert states["zcb"] == "gone" and states["fla"] == "gone" and states["zca"] == "new"
    finally:
        await asyncio.to_thread(announcer.stop)
        fleet.close()


@pytest.mark.slow
async def test_auto_adopt_monitors_a_new_host_of_its_session_only(
    netns_cluster: ClusterFactory, sim_tools: SimTools, tmp_path: Path, ssh_keys: SshKeys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = await netns_cluster([
        ClusterHostSpec("aaa", scenarios.idle(2, host="aaa")),
        ClusterHostSpec("bbb", scenarios.idle(1, host="bbb")),
    ])
    assert isinstance(built, Cluster)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(built.client_key, home / ".ssh" / "id_ed25519")
    monkeypatch.setenv("HOME", str(home))
    ours = FleetAnnouncer(built.host("aaa"), sim_tools, "--session", "lab-a")
    theirs = FleetAnnouncer(built.host("bbb"), sim_tools, "--session", "lab-b")
    fleet = cluster_fleet(tmp_path, built)
    subnet = built.controller_address.rsplit(".", 1)[0] + ".0/24"
    try:
        await asyncio.gather(asyncio.to_thread(ours.wait_ready),
                             asyncio.to_thread(theirs.wait_ready))
        policy = AutoAdoptPolicy.build("lab-a", [subnet], user="root")
        outcome = await fleet.discover(timeout=3.0, interfaces=[built.controller_address],
                                       auto_adopt=policy)
        assert [result.name for result in outcome.adopted] == ["aaa"], outcome.refused
        statuses = await fleet.status(timeout=30)
        assert [(s.spec.name, s.state, len(s.report.gpus) if s.report else None)
                for s in statuses] == [("aaa", "up", 2)]
    finally:
        await asyncio.gather(asyncio.to_thread(ours.stop), asyncio.to_thread(theirs.stop))
        fleet.close()


@pytest.mark.slow
async def test_time_to_discover_32_announcing_hosts(netns_cluster: ClusterFactory) -> None:
    count = 32
    built = await netns_cluster([
        ClusterHostSpec(f"m{index:02d}", None, announce={"_fleet._tcp", "_ssh._tcp"},
                        fleet_txt={"v": "1", "ssh_port": "22", "gpus": "8"})
        for index in range(count)
    ])
    assert isinstance(built, Cluster)
    started = time.monotonic()
    marks: list[float] = []
    async with DiscoverySession(select_interfaces([built.controller_address]),
                                ["_fleet._tcp", "_ssh._tcp"],
                                on_event=lambda _e: marks.append(time.monotonic() - started)
                                ) as live:
        deadline = started + 30.0
        while len(live.services) < 2 * count and time.monotonic() < deadline:
            await live.wait_changed(max(0.01, deadline - time.monotonic()))
        elapsed = time.monotonic() - started
        resolved = len(live.services)
    quartiles = [f"{marks[min(len(marks) - 1, n * len(marks) // 4)]:.2f}" for n in range(1, 5)]
    print(f"\ndiscovered {resolved} services of {count} hosts in {elapsed:.2f}s "
          f"(first {marks[0]:.2f}s, quartiles {' '.join(quartiles)})")
    assert resolved == 2 * count
    assert elapsed < 15.0
