"""Dispatch on namespace hosts with real OpenSSH sshd (root only): GPUs, argv, host loss."""

from __future__ import annotations

import asyncio
import json

import pytest

from fleet.sim import gpus as scenarios
from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netcluster import Cluster
from tests.fixtures.cli import FleetCli
from tests.fixtures.cluster import ClusterFactory, use_cluster

ECHO = """\
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "cuda": os.environ["CUDA_VISIBLE_DEVICES"],
                  "host": os.uname().nodename}))
"""


async def _lab(netns_cluster: ClusterFactory, fleet_cli: FleetCli, gpus: int) -> Cluster:
    lab = await netns_cluster([ClusterHostSpec("gpu1", scenarios.idle(gpus, host="gpu1"))])
    assert isinstance(lab, Cluster)
    use_cluster(fleet_cli.home, lab)
    status = await fleet_cli.run("status", "--timeout", "30s")
    assert status.returncode == 0, status.stdout + status.stderr
    return lab


async def test_two_gpu_dispatch_on_openssh_host(netns_cluster: ClusterFactory,
                                                fleet_cli: FleetCli) -> None:
    await _lab(netns_cluster, fleet_cli, 4)
    script = fleet_cli.home / "echo.py"
    script.write_text(ECHO)
    reserve = await fleet_cli.run("reserve", "--gpus", "1", "--host", "gpu1")
    assert reserve.returncode == 0, reserve.stderr
    args = ("$(reboot)", "a;b", "q'uote", "new\nline", "ñ", "-v")

    result = await fleet_cli.run("dispatch", "--gpus", "2", str(script), *args)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"] == list(args) and report["host"] == "gpu1"
    held = scenarios.gpu_uuid("gpu1", 0)  # least-loaded ties break by index: GPU 0 was reserved
    used = report["cuda"].split(",")
    assert len(used) == 2 and held not in used
    assert set(used) <= {scenarios.gpu_uuid("gpu1", i) for i in range(4)}
    tasks = (await fleet_cli.run("--json", "tasks", "--all")).json()["tasks"]
    assert tasks[0]["host"] == "gpu1" and tasks[0]["exit_code"] == 0
    assert tasks[0]["gpu_uuids"] == used


async def test_link_down_mid_task_is_lost_within_bound(netns_cluster: ClusterFactory,
                                                       fleet_cli: FleetCli) -> None:
    lab = await _lab(netns_cluster, fleet_cli, 1)
    script = fleet_cli.home / "sleep.py"
    script.write_text("import time\ntime.sleep(30)\n")
    detached = await fleet_cli.run("dispatch", "--detach", str(script))
    assert detached.returncode == 0, detached.stderr
    host = lab.host("gpu1")
    try:
        host.link_down()
        await asyncio.sleep(2.5)
        listing = await fleet_cli.run("--json", "tasks", "--all", "--lost-after", "2s",
                                      timeout=90)
        (task,) = listing.json()["tasks"]
        assert task["state"] == "lost"
        allocations = (await fleet_cli.run("--json", "allocations")).json()
        rows = allocations["allocations"] if isinstance(allocations, dict) else allocations
        assert [row for row in rows if row.get("released_at") is None] == []
    finally:
        host.link_up()
        kill = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", host.require_namespace(), "sh", "-c",
            "for f in /root/.fleet/tasks/*/.fleet/pid $HOME/.fleet/tasks/*/.fleet/pid; do "
            '[ -s "$f" ] && kill -9 -- "-$(cat "$f")"; done; true')
        await asyncio.wait_for(kill.wait(), 10)


pytestmark = pytest.mark.slow
