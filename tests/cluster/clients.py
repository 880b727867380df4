"""Client helpers for tests: run a command on a host (OpenSSH or asyncssh), expected GPU CSV."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from tests.cluster.clientfiles import ReachableHost
from tests.cluster.sshd import KEX_ALGORITHMS

if TYPE_CHECKING:
    from fleet.sim.gpus import SimHostGpus

MIB = 1024 * 1024
NVIDIA_SMI_QUERY = (
    "nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used --format=csv,noheader,nounits"
)


def openssh_argv(
    host: ReachableHost, known_hosts_file: Path, *, connect_timeout_s: int = 5
) -> list[str]:
    """`ssh -n` with the cluster's key and known_hosts only: strict checking, no agent/config."""
    return [
        "ssh",
        "-n",
        "-F",
        "/dev/null",
        "-i",
        str(host.identity_file),
        "-p",
        str(host.port),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "IdentityAgent=none",
        "-o",
        f"UserKnownHostsFile={known_hosts_file}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={connect_timeout_s}",
        "-o",
        f"KexAlgorithms={KEX_ALGORITHMS}",
        f"{host.user}@{host.address}",
    ]


def openssh_run(
    host: ReachableHost, known_hosts_file: Path, command: str, *, timeout_s: float = 20.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*openssh_argv(host, known_hosts_file), command],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


async def asyncssh_run(
    host: ReachableHost, known_hosts_file: Path, command: str, *, connect_timeout_s: float = 5.0
) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one command over a fresh asyncssh connection."""
    import asyncssh

    async with asyncssh.connect(
        host.address,
        host.port,
        username=host.user,
        client_keys=[str(host.identity_file)],
        known_hosts=str(known_hosts_file),
        config=None,
        agent_path=None,
        connect_timeout=connect_timeout_s,
    ) as connection:
        result = await connection.run(command, check=False, timeout=20)
        return int(result.exit_status or 0), str(result.stdout), str(result.stderr)


def expected_nvidia_smi_lines(gpus: SimHostGpus) -> list[str]:
    """The CSV lines the fake nvidia-smi must print for this config (lost GPUs print no line)."""
    return [
        f"{index}, {gpu.uuid}, {gpu.name}, "
        f"{gpu.memory_total_bytes // MIB}, {gpu.memory_used_bytes // MIB}"
        for index, gpu in enumerate(gpus.gpus)
        if not gpu.lost
    ]


def csv_lines(stdout: str) -> list[str]:
    """nvidia-smi's per-GPU lines (they start with the index), without its error messages."""
    return [line for line in stdout.splitlines() if line[:1].isdigit()]
