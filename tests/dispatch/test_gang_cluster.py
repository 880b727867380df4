"""Multi-node gangs on namespace hosts with real OpenSSH sshd (root only): a real TCP rendezvous
on MASTER_ADDR:MASTER_PORT, one failing node ending the gang, a cut link, all-or-nothing claims."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from fleet.sim import gpus as scenarios
from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netcluster import Cluster
from tests.fixtures.cli import FleetCli
from tests.fixtures.cluster import node_reports, use_cluster

pytestmark = pytest.mark.slow

# Rank 0 listens on MASTER_PORT, rank 1 connects to MASTER_ADDR:MASTER_PORT; both print their
# rank and GPUs. With argv[1] == "fail", rank 1 exits 3 after the rendezvous and rank 0 sleeps.
RENDEZVOUS = """\
import json, os, socket, sys, time
rank = int(os.environ["NODE_RANK"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("", port))
    server.listen(1)
    server.settimeout(60)
    peer, _ = server.accept()
    said = peer.recv(200).decode()
    peer.sendall(b"welcome")
else:
    for _ in range(600):
        try:
            peer = socket.create_connection((addr, port), timeout=2)
            break
        except OSError:
            time.sleep(0.1)
    peer.sendall(("rank %d" % rank).encode())
    said = peer.recv(200).decode()
hostfile = open(os.environ["FLEET_HOSTFILE"]).read()
print(json.dumps({"rank": rank, "said": said, "cuda": os.environ["CUDA_VISIBLE_DEVICES"],
                  "host": os.uname().nodename, "world": os.environ["WORLD_SIZE"],
                  "nnodes": os.environ["NNODES"], "per_node": os.environ["GPUS_PER_NODE"],
                  "hosts": os.environ["FLEET_NODE_HOSTS"], "hostfile": hostfile}), flush=True)
if len(sys.argv) > 1 and sys.argv[1] == "fail":
    if rank == 1:
        sys.exit(3)
    time.sleep(120)
if len(sys.argv) > 1 and sys.argv[1] == "hang":
    time.sleep(120)
"""


@pytest.fixture(scope="module")
def gang_cluster(netns_cluster_module: Callable[[Sequence[ClusterHostSpec]], Cluster]
                 ) -> Cluster:
    """Two namespace hosts with 4 simulated GPUs each."""
    return netns_cluster_module([ClusterHostSpec(name, scenarios.idle(4, host=name))
                                 for name in ("gpu1", "gpu2")])


async def _lab(cluster: Cluster, fleet_cli: FleetCli) -> Path:
    use_cluster(fleet_cli.home, cluster)
    status = await fleet_cli.run("status", "--timeout", "30s")
    assert status.returncode == 0, status.stdout + status.stderr
    script = fleet_cli.home / "rendezvous.py"
    script.write_text(RENDEZVOUS)
    return script


async def _active_allocations(fleet_cli: FleetCli) -> list[dict[str, object]]:
    listing = (await fleet_cli.run("--json", "allocations")).json()
    rows = listing["allocations"] if isinstance(listing, dict) else listing
    return [row for row in rows if row.get("released_at") is None]


async def test_a_two_by_two_gang_rendezvous_over_tcp(gang_cluster: Cluster,
                                                     fleet_cli: FleetCli) -> None:
    script = await _lab(gang_cluster, fleet_cli)
    result = await fleet_cli.run("dispatch", "--nodes", "2", "--gpus-per-node", "2",
                                 str(script), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    nodes = node_reports(result.stdout)
    assert sorted(nodes) == ["[0/gpu1]", "[1/gpu2]"], result.stdout
    zero, one = nodes["[0/gpu1]"], nodes["[1/gpu2]"]
    assert (zero["rank"], one["rank"]) == (0, 1)
    assert zero["said"] == "rank 1" and one["said"] == "welcome"
    gpus = str(zero["cuda"]).split(",") + str(one["cuda"]).split(",")
    assert len(set(gpus)) == 4
    assert set(str(zero["cuda"]).split(",")) <= {scenarios.gpu_uuid("gpu1", i) for i in range(4)}
    assert set(str(one["cuda"]).split(",")) <= {scenarios.gpu_uuid("gpu2", i) for i in range(4)}
    assert zero["world"] == "4" and zero["nnodes"] == "2" and zero["per_node"] == "2"
    addresses = str(zero["hosts"]).split(",")
    assert zero["hostfile"] == "".join(f"{address} slots=2\n" for address in addresses)
    tasks = (await fleet_cli.run("--json", "tasks", "--all")).json()["tasks"]
    assert [(task["state"], task["group"]["nodes"], task["group_id"]) for task in tasks] == [
        ("succeeded", 2, tasks[0]["id"])]
    assert tasks[0]["gpus_requested"] == 4 and len(tasks[0]["gpu_uuids"]) == 4
    expanded = (await fleet_cli.run("--json", "tasks", "--all", "--expand")).json()["tasks"]
    assert sorted(task["host"] for task in expanded) == ["gpu1", "gpu2"]
    assert await _active_allocations(fleet_cli) == []
    logs = await fleet_cli.run("logs", str(tasks[0]["id"]))
    assert sorted(node_reports(logs.stdout)) == ["[0/gpu1]", "[1/gpu2]"], logs.stdout


async def test_one_failing_node_ends_the_gang_with_its_code(gang_cluster: Cluster,
                                                            fleet_cli: FleetCli) -> None:
    script = await _lab(gang_cluster, fleet_cli)
    started = time.monotonic()
    result = await fleet_cli.run("dispatch", "--nodes", "2", "--gpus-per-node", "2",
                                 "--grace", "2s", str(script), "fail", timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 3, result.stdout + result.stderr
    assert elapsed < 60, elapsed  # rank 0 sleeps 120 s: it was cancelled, not waited for
    assert "node 1 (gpu2): exit code 3" in result.stderr
    expanded = (await fleet_cli.run("--json", "tasks", "--all", "--expand")).json()["tasks"]
    assert sorted((task["host"], task["state"]) for task in expanded) == [
        ("gpu1", "cancelled"), ("gpu2", "failed")]
    assert await _active_allocations(fleet_cli) == []


async def test_a_cut_link_makes_the_gang_lost_and_releases_its_gpus(
        gang_cluster: Cluster, fleet_cli: FleetCli) -> None:
    script = await _lab(gang_cluster, fleet_cli)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet.cli.main", "dispatch", "--nodes", "2", "--lost-after",
        "3s", "--grace", "1s", str(script), "hang",
        cwd=fleet_cli.home, env=fleet_cli.env(), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    host = gang_cluster.host("gpu2")
    try:
        for _ in range(300):  # until both nodes run
            tasks = await fleet_cli.recorded_tasks()
            if len(tasks) == 2 and all(task.state == "running" for task in tasks):
                break
            await asyncio.sleep(0.2)
        host.link_down()
        stdout, stderr = await asyncio.wait_for(process.communicate(), 90)
    finally:
        host.link_up()
    assert process.returncode == 5, (stdout + stderr).decode()
    expanded = (await fleet_cli.run("--json", "tasks", "--all", "--expand")).json()["tasks"]
    states = {task["host"]: task["state"] for task in expanded}
    assert states == {"gpu1": "cancelled", "gpu2": "lost"}, states
    assert await _active_allocations(fleet_cli) == []
    await _kill_leftovers(gang_cluster)


async def _kill_leftovers(cluster: Cluster) -> None:
    for name in ("gpu1", "gpu2"):
        kill = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", cluster.host(name).require_namespace(), "sh", "-c",
            "for f in /root/.fleet/tasks/*/.fleet/pid $HOME/.fleet/tasks/*/.fleet/pid; do "
            '[ -s "$f" ] && kill -9 -- "-$(cat "$f")"; done; true')
        await asyncio.wait_for(kill.wait(), 10)


def _sample_partial_claims(db: Path, stop: list[bool], seen: list[str],
                           seen_running: list[int]) -> None:
    """Watch the database: a gang member holding GPUs while another member of the same gang
    has none (outside a final state) would be a partial claim."""
    while not stop[0]:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                rows = conn.execute(
                    "SELECT t.group_id, t.id, t.state, COUNT(a.id) FROM tasks t "
                    "LEFT JOIN allocations a ON a.task_id = t.id AND a.released_at IS NULL "
                    "WHERE t.group_kind = 'gang' GROUP BY t.id").fetchall()
                overlap = conn.execute(
                    "SELECT gpu_id, COUNT(*) FROM allocations WHERE released_at IS NULL "
                    "GROUP BY gpu_id HAVING COUNT(*) > 1").fetchall()
        except sqlite3.OperationalError:
            time.sleep(0.05)
            continue
        if overlap:
            seen.append(f"overlap {overlap}")
        groups: dict[int, list[int]] = {}
        for group_id, _task_id, state, held in rows:
            if state in ("starting", "running"):
                groups.setdefault(group_id, []).append(held)
        if groups:
            seen_running[0] += 1
        for group_id, helds in groups.items():
            if any(helds) and not all(helds):
                seen.append(f"gang {group_id} partly claimed: {helds}")
        time.sleep(0.05)


async def test_gangs_and_single_tasks_share_eight_gpus_all_or_nothing(
        gang_cluster: Cluster, fleet_cli: FleetCli) -> None:
    await _lab(gang_cluster, fleet_cli)
    short = fleet_cli.home / "short.py"
    short.write_text("import os, time\ntime.sleep(1.5)\n"
                     "print(os.environ['CUDA_VISIBLE_DEVICES'])\n")
    stop: list[bool] = [False]
    seen: list[str] = []
    seen_running = [0]  # samples that caught a gang running: the check had something to see
    sampler = asyncio.ensure_future(asyncio.to_thread(_sample_partial_claims,
                                                      fleet_cli.db_path, stop, seen,
                                                      seen_running))
    commands = [("dispatch", "--wait", "--queue-timeout", "3m", "--nodes", "2",
                 "--gpus-per-node", "2", str(short)) for _ in range(2)]
    commands += [("dispatch", "--wait", "--queue-timeout", "3m", str(short)) for _ in range(8)]
    try:
        results = await asyncio.gather(*(fleet_cli.run(*command, timeout=240)
                                         for command in commands))
    finally:
        stop[0] = True
        await sampler
    for result in results:
        assert result.returncode == 0, result.stdout + result.stderr
    assert seen == []
    assert seen_running[0] > 0
    expanded = (await fleet_cli.run("--json", "tasks", "--all", "--expand")).json()["tasks"]
    assert len(expanded) == 12 and all(task["state"] == "succeeded" for task in expanded)
    assert await _active_allocations(fleet_cli) == []


async def test_a_detached_gang_whose_node_fails_is_ended_by_the_next_reconcile(
        gang_cluster: Cluster, fleet_cli: FleetCli) -> None:
    script = await _lab(gang_cluster, fleet_cli)
    detached = await fleet_cli.run("--json", "dispatch", "--detach", "--nodes", "2",
                                   "--grace", "1s", str(script), "fail", timeout=60)
    assert detached.returncode == 0, detached.stderr
    assert len(detached.json()["nodes"]) == 2
    states: dict[str, str] = {}
    for _ in range(120):  # `fleet tasks` reconciles: rank 1 ended 3, so rank 0 is cancelled
        expanded = (await fleet_cli.run("--json", "tasks", "--all", "--expand")).json()["tasks"]
        states = {str(task["host"]): str(task["state"]) for task in expanded}
        if states.get("gpu1") == "cancelled":
            break
        await asyncio.sleep(0.5)
    assert states == {"gpu1": "cancelled", "gpu2": "failed"}, states
    assert await _active_allocations(fleet_cli) == []
