"""--venv, --conda, --container and --snapshot on namespace hosts with OpenSSH sshd (root only)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fleet.dispatch.environment import RUNTIMES
from fleet.sim import gpus as scenarios
from tests.cluster.clients import asyncssh_run
from tests.cluster.hosts import ClusterHostSpec
from tests.cluster.netcluster import Cluster
from tests.fixtures.cli import CliResult, FleetCli
from tests.fixtures.cluster import node_reports, use_cluster

HOST = "gpu1"
WHERE = """\
import json, os, sys
print(json.dumps({"prefix": sys.prefix, "venv": os.environ.get("VIRTUAL_ENV"),
                  "conda": os.environ.get("CONDA_DEFAULT_ENV"), "cwd": os.getcwd()}))
"""
# A stand-in for conda, not conda itself: it implements only what fleet calls, `run
# [--no-capture-output] -n ENV CMD…`, for environments under ~/miniconda3/envs. It tests
# fleet's side (finding conda in a well-known place, the check, the command line).
FAKE_CONDA = """\
#!/bin/sh
[ "$1" = run ] || exit 2
shift
while [ $# -gt 0 ]; do
  case $1 in
    --no-capture-output) shift ;;
    -n) name=$2; shift 2 ;;
    *) break ;;
  esac
done
prefix="$HOME/miniconda3/envs/$name"
[ -n "$name" ] && [ -d "$prefix" ] || { echo "EnvironmentLocationNotFound: $name" >&2; exit 1; }
export CONDA_DEFAULT_ENV="$name" CONDA_PREFIX="$prefix" PATH="$prefix/bin:$PATH"
exec "$@"
"""


@pytest.fixture(scope="module")
def env_lab(netns_cluster_module: Callable[[Sequence[ClusterHostSpec]], Cluster]) -> Cluster:
    """One host with two idle GPUs, shared by this module's tests (each has its own database)."""
    return netns_cluster_module([ClusterHostSpec(HOST, scenarios.idle(2, host=HOST))])


@pytest.fixture
def cli(env_lab: Cluster, fleet_cli: FleetCli) -> Iterator[FleetCli]:
    use_cluster(fleet_cli.home, env_lab)
    yield fleet_cli


def _script(cli: FleetCli, source: str = WHERE) -> str:
    path = cli.home / "where.py"
    path.write_text(source)
    return str(path)


async def _task(cli: FleetCli) -> dict[str, Any]:
    listing = await cli.run("--json", "tasks", "--all")
    assert listing.returncode == 0, listing.stderr
    (task,) = listing.json()["tasks"]
    assert isinstance(task, dict)
    return task


async def _assert_refused(cli: FleetCli, result: CliResult, reason: str) -> None:
    """The start failed naming the host and `reason`; the task is failed, no GPU held."""
    assert result.returncode == 5, result.stdout + result.stderr
    assert f"{HOST}: cannot run in" in result.stderr and reason in result.stderr
    task = await _task(cli)
    assert task["state"] == "failed" and task["started_at"] is None
    assert f"{HOST}: cannot run in" in task["error"] and reason in task["error"]
    allocations = (await cli.run("--json", "allocations")).json()
    rows = allocations["allocations"] if isinstance(allocations, dict) else allocations
    assert [row for row in rows if row.get("released_at") is None] == []


async def test_venv_made_on_the_host_is_where_the_script_runs(env_lab: Cluster,
                                                              cli: FleetCli) -> None:
    host = env_lab.host(HOST)
    status, _, stderr = await asyncssh_run(
        host, env_lab.known_hosts_file, "rm -rf ~/venvs && python3 -m venv --without-pip "
        "~/venvs/demo")
    assert status == 0, stderr

    result = await cli.run("dispatch", "--venv", "~/venvs/demo", _script(cli))

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["prefix"] == "/root/venvs/demo" and report["venv"] == "/root/venvs/demo"
    environment = (await _task(cli))["environment"]
    assert environment == {"kind": "venv", "value": "~/venvs/demo", "tool": "/root/venvs/demo",
                           "host": HOST}


async def test_missing_venv_fails_the_start_naming_the_host(cli: FleetCli) -> None:
    result = await cli.run("dispatch", "--venv", "/nonexistent", _script(cli))
    await _assert_refused(cli, result, "--venv /nonexistent: no virtual environment there")


async def test_conda_missing_from_the_host_fails_the_start(cli: FleetCli) -> None:
    result = await cli.run("dispatch", "--conda", "ml", _script(cli))
    await _assert_refused(cli, result, "--conda ml: no conda found")


async def test_conda_in_miniconda3_runs_the_named_environment(env_lab: Cluster,
                                                              cli: FleetCli) -> None:
    """With a stand-in conda (FAKE_CONDA, not real conda) in ~/miniconda3: fleet finds it
    there, checks the environment, runs the script through `conda run`, and records it."""
    base = env_lab.host(HOST).home_dir / "miniconda3"
    try:
        conda = base / "bin" / "conda"
        conda.parent.mkdir(parents=True)
        conda.write_text(FAKE_CONDA)
        conda.chmod(0o755)
        (base / "envs" / "ml" / "bin").mkdir(parents=True)
        (base / "envs" / "ml" / "bin" / "python").symlink_to("/usr/bin/python3")

        result = await cli.run("dispatch", "--conda", "ml", _script(cli))

        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["conda"] == "ml"
        environment = (await _task(cli))["environment"]
        assert environment["tool"] == "/root/miniconda3/bin/conda"
        other = await cli.run("dispatch", "--conda", "absent", _script(cli))
        assert other.returncode == 5
        assert "has no environment absent" in other.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _working_runtimes() -> list[str]:
    probe = {"docker": "info", "podman": "info", "apptainer": "--version"}
    return [name for name in RUNTIMES if shutil.which(name) and subprocess.run(
        [name, probe[name]], capture_output=True, timeout=30, check=False).returncode == 0]


async def test_container_without_a_runtime_fails_naming_each(cli: FleetCli) -> None:
    # The namespace host sees this machine's binaries: if a runtime works here, this is moot.
    working = _working_runtimes()
    if working:
        pytest.skip(f"{working[0]} works on this machine: no host here lacks a runtime")
    result = await cli.run("dispatch", "--container", "alpine:3", _script(cli))
    await _assert_refused(cli, result, "--container alpine:3: no working container runtime: "
                          "docker: ")
    assert "podman: not installed" in result.stderr


async def test_container_task_runs_in_a_real_runtime(cli: FleetCli) -> None:
    working = _working_runtimes()
    image = os.environ.get("FLEET_TEST_IMAGE")  # an image with python3, already pulled
    if not working or not image:
        missing = [what for what, ok in (("a working docker, podman or apptainer", working),
                                         ("FLEET_TEST_IMAGE (an image with python3)", image))
                   if not ok]
        pytest.skip(f"needs {' and '.join(missing)}: the refusal path and each runtime's "
                    "command line (tests/dispatch/test_environment.py) are tested")
    result = await cli.run("dispatch", "--container", image, _script(cli), timeout=600)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cwd"].startswith("/root/.fleet/tasks/")  # mounted
    assert (await _task(cli))["environment"]["runtime"] == working[0]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                   check=True, capture_output=True, timeout=30)


SNAPSHOT_TRAIN = """\
import os
print(sorted(os.path.relpath(os.path.join(d, f)) for d, _, fs in os.walk(".") for f in fs))
import helper
print(helper.VALUE, open("../data/keep.txt").read().strip())
"""


async def test_snapshot_runs_the_tree_as_submitted(tmp_path: Path, cli: FleetCli) -> None:
    repo = tmp_path / "proj"
    (repo / "src").mkdir(parents=True)
    (repo / "data").mkdir()
    (repo / ".gitignore").write_text("*.log\nout/\n")
    (repo / "src" / "train.py").write_text(SNAPSHOT_TRAIN)
    (repo / "data" / "keep.txt").write_text("tracked\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    (repo / "src" / "helper.py").write_text("VALUE = 'as submitted'\n")  # untracked
    (repo / "src" / "run.log").write_text("ignored\n")
    (repo / "out").mkdir()
    (repo / "out" / "model.bin").write_bytes(b"\0" * 64)
    reserve = await cli.run("reserve", "--gpus", "2", "--host", HOST)
    assert reserve.returncode == 0, reserve.stderr
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet.cli.main", "dispatch", "--snapshot", "--wait",
        "--queue-timeout", "2m", "train.py", cwd=repo / "src",
        env=cli.env({"FLEET_INVENTORY": str(cli.home / "inventory.yaml")}),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    done = asyncio.ensure_future(process.communicate())
    try:
        for _ in range(200):  # until it waits in the queue (bounded: 20 s)
            listing = await cli.recorded_tasks()
            if listing and listing[0].state == "queued":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the task never queued")
        (repo / "src" / "helper.py").write_text("VALUE = 'edited later'\n")
        (repo / "data" / "keep.txt").write_text("edited later\n")
        (repo / "src" / "new.py").write_text("")
        release = await cli.run("release", "--all-mine")
        assert release.returncode == 0, release.stderr
        finished, _ = await asyncio.wait({done}, timeout=90)
    finally:
        if process.returncode is None:
            process.kill()
    stdout, stderr = await done
    assert finished, f"still running 90 s after the release: {stderr.decode()}"

    assert process.returncode == 0, stderr.decode()
    files, values = stdout.decode().strip().splitlines()[-2:]
    assert files == "['helper.py', 'train.py']"
    assert values == "as submitted tracked"
    task = await _task(cli)
    assert task["script"] == "train.py" and task["snapshot"]["script"] == "src/train.py"
    assert task["snapshot"]["cwd"] == "src" and task["snapshot"]["files"] == 4


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair_lab(netns_cluster_module: Callable[[Sequence[ClusterHostSpec]], Cluster]) -> Cluster:
    """Two hosts with one idle GPU each: a 2-node gang takes both."""
    return netns_cluster_module([ClusterHostSpec(name, scenarios.idle(1, host=name))
                                 for name in ("node-a", "node-b")])


async def test_gang_nodes_and_array_members_each_check_their_host(pair_lab: Cluster,
                                                                  fleet_cli: FleetCli) -> None:
    use_cluster(fleet_cli.home, pair_lab)
    cli = fleet_cli
    for name in ("node-a", "node-b"):
        status, _, stderr = await asyncssh_run(
            pair_lab.host(name), pair_lab.known_hosts_file, "rm -rf ~/venvs")
        assert status == 0, stderr
    made, _, stderr = await asyncssh_run(pair_lab.host("node-a"), pair_lab.known_hosts_file,
                                         "python3 -m venv --without-pip ~/venvs/demo")
    assert made == 0, stderr
    gang = ("dispatch", "--nodes", "2", "--gpus-per-node", "1", "--venv", "~/venvs/demo")

    refused = await cli.run(*gang, _script(cli), timeout=120)

    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert "node-b: cannot run in --venv ~/venvs/demo: no virtual environment" in refused.stderr
    allocations = (await cli.run("--json", "allocations")).json()
    rows = allocations["allocations"] if isinstance(allocations, dict) else allocations
    assert [row for row in rows if row.get("released_at") is None] == []

    made, _, stderr = await asyncssh_run(pair_lab.host("node-b"), pair_lab.known_hosts_file,
                                         "python3 -m venv --without-pip ~/venvs/demo")
    assert made == 0, stderr
    ran = await cli.run(*gang, _script(cli), timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    reports = node_reports(ran.stdout)
    assert sorted(reports) == ["[0/node-a]", "[1/node-b]"], ran.stdout
    assert {report["venv"] for report in reports.values()} == {"/root/venvs/demo"}

    array = await cli.run("dispatch", "--array", "0-1", "--venv", "~/venvs/demo", _script(cli),
                          timeout=120)
    assert array.returncode == 0, array.stdout + array.stderr
    members = (await cli.run("--json", "tasks", "--all", "--expand")).json()["tasks"]
    checked = [task["environment"] for task in members
               if task["state"] == "succeeded" and task["environment"].get("tool")]
    assert len(checked) == 4  # two gang nodes and two array members, each checked on its host
    assert {env["host"] for env in checked} == {"node-a", "node-b"}
