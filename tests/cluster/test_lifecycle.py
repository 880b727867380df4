"""Setup/teardown leave nothing behind, even after a SIGKILLed run; CLI-detached runs too."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.sim import gpus as scenarios
from tests.cluster.announcer import REPO_ROOT
from tests.cluster.cleanup import cleanup_stale_runs, sweep_orphans
from tests.cluster.clients import asyncssh_run, openssh_run
from tests.cluster.hosts import NEEDS_ROOT, ClusterHostSpec
from tests.cluster.netcluster import Cluster, start_netns_cluster
from tests.cluster.state import RecordedProcess, RunState, new_run_id, process_start_time
from tests.fixtures.cluster import ClusterFactory

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason=NEEDS_ROOT)]
CLI_TIMEOUT_S = 60.0


def ip_output(*args: str) -> str:
    return subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=10, check=True
    ).stdout


def leftovers(state: RunState, extra_pids: list[int]) -> list[str]:
    """What of this run still exists, per `ip netns list`, `ip link`, /proc and the disk."""
    found = [
        f"namespace {ns}" for ns in state.namespaces if ns in ip_output("netns", "list").split()
    ]
    links = ip_output("-o", "link")
    found += [
        f"link {name}"
        for name in [state.bridge or "", *state.veths]
        if f" {name}:" in links or f" {name}@" in links
    ]
    found += [f"process {p.role} {p.pid}" for p in state.processes if p.is_alive()]
    found += [f"process {pid}" for pid in extra_pids if process_start_time(pid) is not None]
    found += [f"file {path}" for path in (state.path, Path(state.run_dir)) if path.exists()]
    return found


async def test_teardown_kills_everything_and_removes_every_part(
    netns_cluster: ClusterFactory,
) -> None:
    built = await netns_cluster(
        [
            ClusterHostSpec("td0", scenarios.idle(1, host="td0"), announce={"_ssh._tcp"}),
            *(ClusterHostSpec(f"td{index}") for index in range(1, 8)),
        ]
    )
    assert isinstance(built, Cluster)
    # A process left running on a host (like a detached task) must die with the host.
    status, stdout, _ = await asyncssh_run(
        built.hosts[3],
        built.known_hosts_file,
        "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!",
    )
    assert status == 0
    orphan_pid = int(stdout)
    assert process_start_time(orphan_pid) is not None
    state = built.state
    assert len(state.processes) == 9  # 8 sshd + 1 announcer
    assert leftovers(state, [orphan_pid]) == [
        *(f"namespace {ns}" for ns in state.namespaces),
        *(f"link {name}" for name in [state.bridge, *state.veths]),
        *(f"process {p.role} {p.pid}" for p in state.processes),
        f"process {orphan_pid}",
        f"file {state.path}",
        f"file {state.run_dir}",
    ]
    started = time.monotonic()
    built.close()
    print(
        f"\n8 hosts: setup {built.setup_seconds:.2f} s, teardown {time.monotonic() - started:.2f} s"
    )
    assert leftovers(state, [orphan_pid]) == []
    built.close()  # idempotent


@pytest.mark.slow
def test_32_hosts_come_up_and_go_down() -> None:
    started = time.monotonic()
    built = start_netns_cluster([ClusterHostSpec(f"n{index:02d}") for index in range(32)])
    setup_seconds = time.monotonic() - started
    try:
        last = built.hosts[-1]
        assert openssh_run(last, built.known_hosts_file, "hostname").stdout == "n31\n"
    finally:
        started = time.monotonic()
        built.close()
    teardown_seconds = time.monotonic() - started
    print(f"\n32 hosts: setup {setup_seconds:.2f} s, teardown {teardown_seconds:.2f} s")
    assert leftovers(built.state, []) == []


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.cluster", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def state_path_in(output: str) -> Path:
    match = re.search(r"^state:\s+(\S+)$", output, re.MULTILINE)
    assert match, output
    return Path(match.group(1))


async def test_next_setup_cleans_up_after_a_sigkilled_run(netns_cluster: ClusterFactory) -> None:
    owner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.cluster",
            "up",
            "3",
            "--foreground",
            "--gpus",
            "1",
            "--prefix",
            "dead",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert owner.stdout is not None
        output = ""
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while "running until" not in output:
            assert time.monotonic() < deadline and owner.poll() is None, output
            output += owner.stdout.readline()
        state = RunState.load(state_path_in(output))
        assert not state.is_stale() and len(state.processes) == 3
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        if owner.stdout is not None:
            owner.stdout.close()
    assert state.is_stale()
    # The sshd processes outlive their owner; everything is still there until the next run.
    assert leftovers(state, []) != []
    await netns_cluster([ClusterHostSpec("after")])
    assert leftovers(state, []) == []
    assert state.run_id not in cleanup_stale_runs()  # nothing left to do: idempotent


def test_cli_detached_up_status_down() -> None:
    up = run_cli("up", "2", "--gpus", "4,none", "--prefix", "cli")
    assert up.returncode == 0, up.stderr
    state = RunState.load(state_path_in(up.stdout))
    try:
        assert state.owner is None  # detached: survives the CLI process, removed only by `down`
        ssh_config = re.search(r"^ssh_config:\s+(\S+)", up.stdout, re.MULTILINE)
        assert ssh_config
        result = subprocess.run(
            ["ssh", "-n", "-F", ssh_config.group(1), "cli01", "hostname; nvidia-smi -L | wc -l"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert result.stdout.split() == ["cli01", "4"], result.stderr
        status = run_cli("status")
        assert f"{state.run_id}  netns  detached  hosts=2  processes alive=2/2" in status.stdout
    finally:
        down = run_cli("down", "--run", state.run_id)
    assert down.returncode == 0, down.stderr
    assert f"removed 1 run(s) {state.run_id}" in down.stdout
    assert leftovers(state, []) == []
    assert os.path.exists(state.path) is False


def test_down_sweeps_parts_whose_state_file_is_gone() -> None:
    run_id = new_run_id()
    namespace, bridge = f"fc-{run_id}-0", f"fc{run_id}br"
    subprocess.run(
        ["ip", "-batch", "-"],
        input=f"netns add {namespace}\nlink add {bridge} type bridge\n",
        text=True,
        timeout=10,
        check=True,
    )
    try:
        assert sorted(sweep_orphans()) == sorted([namespace, bridge])
    finally:
        subprocess.run(
            ["ip", "-force", "-batch", "-"],
            input=f"netns del {namespace}\nlink del {bridge}\n",
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    assert namespace not in ip_output("netns", "list")
    assert f" {bridge}:" not in ip_output("-o", "link")


def test_an_exited_process_has_no_record_while_a_running_one_has() -> None:
    exited = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while process_start_time(exited.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.01)  # exited but not reaped yet: a zombie, as a stopped announcer can be
    try:
        assert RecordedProcess.if_running(exited.pid, "announcer:gone") is None
        with pytest.raises(RuntimeError, match="exited right after it was started"):
            RecordedProcess.of(exited.pid, "announcer:gone")
        record = RecordedProcess.if_running(os.getpid(), "owner")
        assert record is not None and record.is_alive()
    finally:
        exited.wait(timeout=10)
