"""Simulated GPUs for test hosts: config files, the sshd session env, --gpus specs, TXT summary."""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tests.cluster.sshd import HOST_PATH

if TYPE_CHECKING:
    from fleet.sim.build import SimTools
    from fleet.sim.gpus import SimHostGpus
    from tests.cluster.hosts import ClusterHostSpec

GIB = 1024**3
# `python -m tests.cluster up N` without --gpus: a lab with a bit of everything, cycled over hosts.
DEFAULT_GPU_SPEC = "idle:8,busy:4,mixed:2,idle:1,hot:4,lost:2,none,0,ecc:2,nodriver"
GPU_SPEC_HELP = (
    "comma-separated, cycled over hosts: N (N idle GPUs), idle:N, busy:N, mixed:N, hot:N, lost:N, "
    "ecc:N, nofan:N, old:N, 0 (driver, no GPUs), nodriver (driver not loaded), none (no driver "
    f"installed). Default: {DEFAULT_GPU_SPEC}"
)


# Each test host mounts its own /root and /tmp over these: files there are invisible to hosts.
HOST_PRIVATE_DIRS = (Path("/root"), Path("/tmp"))


def host_visible_cache_dir() -> Path:
    """Where to build the simulated NVML tools so that namespace hosts can load them.

    The repository's .fleet-cache/sim, unless the checkout itself lies under /root or /tmp (a
    clone in /tmp, say): then a private directory under /var/tmp, owned by this user, 0700.
    """
    repo_cache = Path(__file__).resolve().parents[2] / ".fleet-cache" / "sim"
    if not any(repo_cache.is_relative_to(private) for private in HOST_PRIVATE_DIRS):
        return repo_cache
    base = Path("/var/tmp") / f"fleet-test-sim-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    info = base.lstat()
    if info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode) or info.st_mode & 0o077:
        raise RuntimeError(f"{base} is not a private directory of this user: refusing to use it")
    return base


# Not ~/.cache (the default): each test host gets a clean /root, so the build must live elsewhere.
SIM_CACHE_DIR = host_visible_cache_dir()


@functools.cache
def sim_tools() -> SimTools:
    """The simulated libnvidia-ml and fake nvidia-smi, built once (cached on disk by source)."""
    from fleet.sim.build import build_sim_tools

    tools = build_sim_tools(SIM_CACHE_DIR)
    for needed in (tools.lib_dir, tools.nvidia_smi):
        if any(needed.resolve().is_relative_to(private) for private in HOST_PRIVATE_DIRS):
            raise RuntimeError(f"{needed}: test hosts replace {HOST_PRIVATE_DIRS} with their own")
    return tools


def write_gpus(path: Path, gpus: SimHostGpus) -> None:
    from fleet.sim.gpus import write_config

    write_config(path, gpus)


def read_gpus(path: Path) -> SimHostGpus:
    from fleet.sim.gpus import read_config

    return read_config(path)


def session_env(config_path: Path, run_dir: Path) -> dict[str, str]:
    """What sshd's SetEnv gives a GPU host's sessions: library, its config, nvidia-smi on PATH."""
    tools = sim_tools()
    bin_dir = run_dir / "bin"
    bin_dir.mkdir(exist_ok=True)
    nvidia_smi_link = bin_dir / "nvidia-smi"
    if not nvidia_smi_link.is_symlink():
        nvidia_smi_link.symlink_to(tools.nvidia_smi)
    return {**tools.env(config_path), "PATH": f"{bin_dir}:{HOST_PATH}"}


def fleet_txt(gpus: SimHostGpus | None, *, ssh_port: int) -> dict[str, str]:
    """A `_fleet._tcp` TXT summary: v, ssh_port, gpus, gpu_model, mem_gb (total GPU memory)."""
    txt = {"v": "1", "ssh_port": str(ssh_port)}
    if gpus is None or gpus.init_error:
        txt["gpus"] = "0"
        return txt
    txt["gpus"] = str(len(gpus.gpus))
    if gpus.gpus:
        txt["gpu_model"] = gpus.gpus[0].name
        txt["mem_gb"] = str(round(sum(gpu.memory_total_bytes for gpu in gpus.gpus) / GIB))
    return txt


def _scenario_makers() -> dict[str, Callable[[int, str], SimHostGpus]]:
    from fleet.sim import gpus as scenarios

    return {
        "idle": lambda count, host: scenarios.idle(count, host=host),
        "busy": lambda count, host: scenarios.busy(count, host=host),
        "mixed": lambda count, host: scenarios.mixed(count, host=host),
        "hot": lambda count, host: scenarios.hot_gpu(count, count - 1, host=host),
        "lost": lambda count, host: scenarios.gpu_lost(count, count - 1, host=host),
        "ecc": lambda count, host: scenarios.ecc_errors(count, host=host),
        "nofan": lambda count, host: scenarios.fan_not_supported(count, host=host),
        "old": lambda count, host: scenarios.old_driver(count, host=host),
    }


def parse_gpu_spec(spec: str, host_names: Sequence[str]) -> list[SimHostGpus | None]:
    """One SimHostGpus (or None: no driver) per host, cycling through the spec's items."""
    from fleet.sim.gpus import no_driver

    makers = _scenario_makers()
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        raise ValueError(f"--gpus {spec!r}: empty")
    results: list[SimHostGpus | None] = []
    for position, host in enumerate(host_names):
        item = items[position % len(items)]
        if item == "none":
            results.append(None)
            continue
        if item == "nodriver":
            results.append(no_driver())
            continue
        kind, _, count_text = item.rpartition(":")
        kind = kind or "idle"
        if kind not in makers or not count_text.isdigit():
            raise ValueError(f"--gpus item {item!r}: {GPU_SPEC_HELP}")
        count = int(count_text)
        results.append(makers["idle" if count == 0 else kind](count, host))
    return results


def mixed_lab_specs() -> list[ClusterHostSpec]:
    """Eight hosts a lab might have: 0/1/2/4/8 GPUs, several models, busy/hot/lost, no driver."""
    from fleet.sim import gpus as scenarios
    from tests.cluster.hosts import ClusterHostSpec

    return [
        ClusterHostSpec("dgx1", scenarios.idle(8, host="dgx1")),
        ClusterHostSpec("h100a", scenarios.busy(4, model="NVIDIA H100 80GB HBM3", host="h100a")),
        ClusterHostSpec(
            "ws4090",
            scenarios.mixed(2, model="NVIDIA GeForce RTX 4090", memory_gib=24, host="ws4090"),
        ),
        ClusterHostSpec("v100old", scenarios.old_driver(1, host="v100old")),
        ClusterHostSpec("hotbox", scenarios.hot_gpu(4, 3, host="hotbox")),
        ClusterHostSpec("lostbox", scenarios.gpu_lost(2, 1, host="lostbox")),
        ClusterHostSpec("cpu1", None),
        ClusterHostSpec("nogpu", scenarios.SimHostGpus(gpus=[])),
    ]
