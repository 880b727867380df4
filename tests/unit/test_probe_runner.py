"""probe_ssh over a real asyncssh server on 127.0.0.1, and probe_local in a real subprocess."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from fleet.errors import ProbeError
from fleet.model import HostSpec
from fleet.probe.runner import probe_ssh
from fleet.sim import gpus as sim
from fleet.sim.build import SimTools
from fleet.sim.gpus import SimHostGpus, write_config

PYTHON27 = str(Path.home() / ".pyenv/versions/2.7.18/bin/python2.7")
HOST_PATH = "/usr/bin:/bin"  # the host's python3 is Debian's, without pynvml

Connect = Callable[..., Awaitable[tuple[asyncssh.SSHClientConnection, HostSpec]]]


@pytest.fixture
async def connect_sim_host(
    sim_ssh_host: Any, sim_tools: SimTools, tmp_path: Path
) -> AsyncIterator[Connect]:
    """Starts an SSH host with simulated GPUs and returns an open connection to it."""
    connections: list[asyncssh.SSHClientConnection] = []

    async def connect(
        gpus: SimHostGpus, *, with_nvidia_smi: bool = True, python: str = "python3"
    ) -> tuple[asyncssh.SSHClientConnection, HostSpec]:
        config_path = tmp_path / f"gpus-{len(connections)}.conf"
        write_config(config_path, gpus)
        env = sim_tools.env(config_path)
        env["PATH"] = f"{sim_tools.bin_dir}:{HOST_PATH}" if with_nvidia_smi else HOST_PATH
        handle = await sim_ssh_host(f"gpu-{len(connections)}", env=env)
        spec = dataclasses.replace(handle.spec, python=python)
        conn = await asyncssh.connect(
            spec.address,
            port=spec.port,
            username=spec.user,
            client_keys=[spec.identity_file],
            known_hosts=asyncssh.import_known_hosts(handle.known_hosts_line + "\n"),
            config=[],
            connect_timeout=5,
        )
        connections.append(conn)
        return conn, spec

    yield connect
    for conn in connections:
        conn.close()
        await conn.wait_closed()


def script(tmp_path: Path, name: str, body: str) -> str:
    """An executable shell script standing in for a broken interpreter."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


async def test_probe_ssh_reports_the_simulated_gpus(connect_sim_host: Connect) -> None:
    scenario = sim.busy(3, host="gpu-0")
    conn, spec = await connect_sim_host(scenario)
    report = await probe_ssh(conn, spec, timeout=20)
    assert report.method == "nvml"
    assert [gpu.uuid for gpu in report.gpus] == [gpu.uuid for gpu in scenario.gpus]
    assert [gpu.temperature_c for gpu in report.gpus] == [
        float(gpu.temperature_c) for gpu in scenario.gpus
    ]
    assert report.gpus[0].processes[0].pid == scenario.gpus[0].processes[0][0]
    assert report.host.python_version is not None
    assert report.host.python_version.startswith("3.")
    assert report.warnings == ()


async def test_probe_ssh_honours_the_tasks_dir(connect_sim_host: Connect) -> None:
    conn, spec = await connect_sim_host(sim.idle(1))
    report = await probe_ssh(conn, spec, timeout=20, tasks_dir="/proc/nowhere")
    proc_stats = os.statvfs("/proc")
    assert report.host.disk_tasks_total_bytes == proc_stats.f_blocks * proc_stats.f_frsize


async def test_missing_python_falls_back_to_nvidia_smi(connect_sim_host: Connect) -> None:
    scenario = sim.idle(2)
    conn, spec = await connect_sim_host(scenario, python="/nonexistent/python3")
    report = await probe_ssh(conn, spec, timeout=20)
    assert report.method == "nvidia-smi"
    assert [gpu.uuid for gpu in report.gpus] == [gpu.uuid for gpu in scenario.gpus]
    assert report.warnings[0].startswith("/nonexistent/python3 unusable (")
    assert "used nvidia-smi" in report.warnings[0]


@pytest.mark.skipif(not os.path.exists(PYTHON27), reason="no Python 2.7 interpreter here")
async def test_too_old_python_falls_back_to_nvidia_smi(connect_sim_host: Connect) -> None:
    conn, spec = await connect_sim_host(sim.idle(1), python=PYTHON27)
    report = await probe_ssh(conn, spec, timeout=20)
    assert report.method == "nvidia-smi"
    assert "needs python>=3.6" in report.warnings[0]


async def test_no_python_and_no_nvidia_smi_is_zero_gpus_with_a_reason(
    connect_sim_host: Connect,
) -> None:
    conn, spec = await connect_sim_host(
        sim.idle(1), with_nvidia_smi=False, python="/nonexistent/python3"
    )
    report = await probe_ssh(conn, spec, timeout=20)
    assert report.gpus == ()
    assert report.gpu_reason is not None
    assert report.gpu_reason.startswith("nvidia-smi is not installed")
    assert report.host.memory_total_bytes


async def test_no_driver_over_ssh(connect_sim_host: Connect) -> None:
    conn, spec = await connect_sim_host(sim.no_driver())
    report = await probe_ssh(conn, spec, timeout=20)
    assert report.gpus == ()
    assert report.gpu_reason is not None and "Driver Not Loaded" in report.gpu_reason


async def test_a_crashing_probe_is_a_probe_error_with_its_stderr(
    connect_sim_host: Connect, tmp_path: Path
) -> None:
    python = script(tmp_path, "crash", "echo 'Traceback: boom' >&2; exit 3")
    conn, spec = await connect_sim_host(sim.idle(1), python=python)
    with pytest.raises(ProbeError) as caught:
        await probe_ssh(conn, spec, timeout=20)
    assert caught.value.host == spec.name
    assert "probe exited with status 3" in str(caught.value)
    assert "Traceback: boom" in str(caught.value)


async def test_a_killed_probe_names_the_signal(connect_sim_host: Connect, tmp_path: Path) -> None:
    python = script(tmp_path, "killed", "kill -KILL $$")
    conn, spec = await connect_sim_host(sim.idle(1), python=python)
    with pytest.raises(ProbeError, match="probe was killed by signal KILL"):
        await probe_ssh(conn, spec, timeout=20)


async def test_garbage_output_is_a_probe_error(connect_sim_host: Connect, tmp_path: Path) -> None:
    python = script(tmp_path, "chatty", "cat >/dev/null; echo 'Welcome to gpu-0!'")
    conn, spec = await connect_sim_host(sim.idle(1), python=python)
    with pytest.raises(ProbeError, match="not JSON"):
        await probe_ssh(conn, spec, timeout=20)


async def test_silent_success_is_a_probe_error(connect_sim_host: Connect, tmp_path: Path) -> None:
    python = script(tmp_path, "silent", "cat >/dev/null")
    conn, spec = await connect_sim_host(sim.idle(1), python=python)
    with pytest.raises(ProbeError, match="printed nothing"):
        await probe_ssh(conn, spec, timeout=20)


async def test_a_hanging_probe_is_cut_off_at_the_timeout(
    connect_sim_host: Connect, tmp_path: Path
) -> None:
    python = script(tmp_path, "hang", "echo 'still starting' >&2; exec sleep 60")
    conn, spec = await connect_sim_host(sim.idle(1), python=python)
    started = time.monotonic()
    with pytest.raises(ProbeError, match="no answer within 2s") as caught:
        await probe_ssh(conn, spec, timeout=2.0)
    assert time.monotonic() - started < 10  # the probe sleeps 60 s: the timeout cut it off
    assert "still starting" in str(caught.value)


def run_probe_local(env: dict[str, str], tasks_dir: str | None = None) -> dict[str, Any]:
    """probe_local in a fresh interpreter whose loader sees the simulated library."""
    code = (
        "import asyncio, json, sys, msgspec\n"
        "from fleet.model import HostSpec\n"
        "from fleet.probe.runner import probe_local\n"
        "spec = HostSpec(name='me', address='localhost', connection='local')\n"
        "tasks_dir = sys.argv[1] or None\n"
        "report = asyncio.run(probe_local(spec, timeout=20, tasks_dir=tasks_dir))\n"
        "print(json.dumps(msgspec.to_builtins(report)))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code, tasks_dir or ""],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr.decode()
    result: dict[str, Any] = json.loads(completed.stdout)
    return result


def test_probe_local_reads_nvml_in_process(sim_host: Callable[..., Any]) -> None:
    scenario = sim.gpu_lost(3, lost_index=0)
    scenario.gpus[2].temperature_c = 77
    _, env = sim_host(scenario)
    report = run_probe_local(env)
    assert report["method"] == "nvml"
    assert [gpu["lost"] for gpu in report["gpus"]] == [True, False, False]
    assert report["gpus"][2]["temperature_c"] == 77.0
    assert report["gpus"][1]["uuid"] == scenario.gpus[1].uuid
    assert report["host"]["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert report["host"]["driver_version"] == "550.54.15"


def test_probe_local_without_a_library(tmp_path: Path) -> None:
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    report = run_probe_local(env, tasks_dir=str(tmp_path / "tasks"))
    assert report["gpus"] == []
    assert "NVML Shared Library Not Found" in report["gpu_reason"]
    stats = os.statvfs(tmp_path)
    assert report["host"]["disk_tasks_total_bytes"] == stats.f_blocks * stats.f_frsize
