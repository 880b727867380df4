"""Simulated GPU layer, continued: NVML error strings, live rewrites, the fake nvidia-smi
and the gcc build cache."""

from __future__ import annotations

import csv
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fleet.errors import ConfigError, FleetError
from fleet.sim import build, gpus
from fleet.sim.build import SimTools, build_sim_tools
from fleet.sim.gpus import (
    MIB,
    SimGpu,
    SimHostGpus,
    write_config,
)
from tests.fixtures.simgpu import SimHostFactory
from tests.unit.test_simgpu import milliwatts, run_python, varied_host

DEADLINE_S = 10.0


def test_error_strings_are_nvml_strings(sim_host: SimHostFactory) -> None:
    _, env = sim_host(gpus.idle(1))
    code = (
        "import json, pynvml as n\n"
        "n.nvmlInit()\n"
        "codes = sorted(n.NVMLError._errcode_to_string)\n"
        "print(json.dumps([[n.NVMLError._errcode_to_string[c], n.nvmlErrorString(c)]"
        " for c in codes]))\n"
    )
    completed = run_python(env, code)
    pairs = json.loads(completed.stdout)
    assert len(pairs) >= 20
    assert all(ours == theirs for theirs, ours in pairs), pairs


def read_line(process: subprocess.Popen[bytes], deadline_s: float = DEADLINE_S) -> str:
    """One stdout line from `process`, failing the test after `deadline_s`."""
    assert process.stdout is not None
    data = b""
    end = time.monotonic() + deadline_s
    while not data.endswith(b"\n"):
        remaining = end - time.monotonic()
        assert remaining > 0, f"no line from the reader process, got {data!r}"
        ready, _, _ = select.select([process.stdout], [], [], remaining)
        if ready:
            chunk = os.read(process.stdout.fileno(), 4096)
            assert chunk, "reader process exited"
            data += chunk
    return data.decode().strip()


LIVE_READER = r"""
import sys, pynvml as n
n.nvmlInit()
for _ in sys.stdin:
    handle = n.nvmlDeviceGetHandleByIndex(0)
    try:
        temperature = n.nvmlDeviceGetTemperature(handle, 0)
    except n.NVMLError as exc:
        temperature = type(exc).__name__
    print(n.nvmlDeviceGetCount(), temperature, flush=True)
"""


def test_live_rewrite_is_seen_by_an_initialised_process(sim_host: SimHostFactory) -> None:
    host = gpus.idle(2)
    config_path, env = sim_host(host)
    process = subprocess.Popen(
        [sys.executable, "-c", LIVE_READER],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=0,
    )
    assert process.stdin is not None
    try:
        seen = []
        changes: list[Callable[[], object]] = [
            lambda: None,
            lambda: setattr(host.gpus[0], "temperature_c", 85),
            lambda: setattr(host.gpus[0], "lost", True),
            lambda: host.gpus.append(gpus.idle_gpu("sim", 2, host.gpus[1].name, 80)),
            lambda: setattr(host.gpus[0], "lost", False),
        ]
        for change in changes:
            change()
            write_config(config_path, host)
            process.stdin.write(b"\n")
            seen.append(read_line(process))
        first_temperature = gpus.idle(1).gpus[0].temperature_c
        assert seen == [
            f"2 {first_temperature}",
            "2 85",
            "2 NVMLError_GpuIsLost",
            "3 NVMLError_GpuIsLost",
            "3 85",
        ]
    finally:
        process.stdin.close()
        process.wait(timeout=DEADLINE_S)
    assert process.returncode == 0


# ---- fake nvidia-smi -------------------------------------------------------------------------

FALLBACK_FIELDS = (
    "index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw"
)


def nvidia_smi(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nvidia-smi", *args], env=env, capture_output=True, text=True, timeout=DEADLINE_S
    )


def query(env: dict[str, str], fields: str = FALLBACK_FIELDS) -> subprocess.CompletedProcess[str]:
    return nvidia_smi(env, f"--query-gpu={fields}", "--format=csv,noheader,nounits")


def smi_row(gpu: SimGpu, index: int) -> list[str]:
    return [
        str(index),
        gpu.uuid,
        gpu.name,
        str(gpu.memory_total_bytes // MIB),
        str(gpu.memory_used_bytes // MIB),
        str(gpu.utilization_gpu_pct),
        str(gpu.temperature_c),
        f"{milliwatts(gpu.power_draw_w) / 1000:.2f}",
    ]


def test_nvidia_smi_prints_the_fallback_query(sim_host: SimHostFactory) -> None:
    host = varied_host()
    _, env = sim_host(host)
    completed = query(env)
    assert completed.returncode == 0, completed.stdout
    rows = list(csv.reader(completed.stdout.splitlines(), skipinitialspace=True))
    assert rows == [smi_row(gpu, i) for i, gpu in enumerate(host.gpus)]
    assert ", " in completed.stdout.splitlines()[0]
    reordered = query(env, "power.draw,name,index")
    assert (
        reordered.stdout.splitlines()[1] == f"{smi_row(host.gpus[1], 1)[7]}, {host.gpus[1].name}, 1"
    )
    driver = query(env, "driver_version")
    assert driver.stdout.splitlines() == [host.driver_version] * len(host.gpus)


def test_nvidia_smi_header_and_units(sim_host: SimHostFactory) -> None:
    host = gpus.idle(1)
    _, env = sim_host(host)
    completed = nvidia_smi(env, "--query-gpu=name,memory.total,power.draw", "--format=csv")
    header, line = completed.stdout.splitlines()
    assert header == "name, memory.total [MiB], power.draw [W]"
    total_mib = host.gpus[0].memory_total_bytes // MIB
    assert line == f"{host.gpus[0].name}, {total_mib} MiB, {host.gpus[0].power_draw_w:.2f} W"


@pytest.mark.parametrize(
    ("scenario", "placeholder"),
    [(gpus.fan_not_supported(2), "[N/A]"), (gpus.old_driver(2), "[Not Supported]")],
)
def test_nvidia_smi_marks_unsupported_fields(
    sim_host: SimHostFactory, scenario: SimHostGpus, placeholder: str
) -> None:
    _, env = sim_host(scenario)
    completed = query(env, "index,fan.speed,temperature.gpu")
    assert completed.returncode == 0
    assert completed.stdout.splitlines() == [
        f"{i}, {placeholder}, {gpu.temperature_c}" for i, gpu in enumerate(scenario.gpus)
    ]


def test_nvidia_smi_reports_a_lost_gpu_with_exit_code_15(sim_host: SimHostFactory) -> None:
    host = gpus.gpu_lost(3, lost_index=1)
    _, env = sim_host(host)
    completed = query(env)
    assert completed.returncode == 15
    lines = completed.stdout.splitlines()
    assert lines[1].startswith("Unable to determine the device handle for GPU1: GPU is lost.")
    rows = list(csv.reader([lines[0], lines[2]], skipinitialspace=True))
    assert rows == [smi_row(host.gpus[0], 0), smi_row(host.gpus[2], 2)]


def test_nvidia_smi_without_driver_exits_9(sim_host: SimHostFactory) -> None:
    _, env = sim_host(gpus.no_driver())
    completed = query(env)
    assert completed.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in completed.stdout


def test_nvidia_smi_rejects_unknown_fields(sim_host: SimHostFactory) -> None:
    _, env = sim_host(gpus.idle(1))
    completed = query(env, "index,gpu.vibes")
    assert completed.returncode == 2
    assert 'Field "gpu.vibes" is not a valid field to query.' in completed.stdout


def test_nvidia_smi_lists_gpus(sim_host: SimHostFactory) -> None:
    host = gpus.idle(2)
    _, env = sim_host(host)
    assert nvidia_smi(env, "-L").stdout.splitlines() == [
        f"GPU {i}: {gpu.name} (UUID: {gpu.uuid})" for i, gpu in enumerate(host.gpus)
    ]


# ---- build cache -------------------------------------------------------------------------


def test_build_is_cached_and_reused_without_a_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = build_sim_tools(tmp_path)
    assert tools.lib_dir.parent == tmp_path / build.source_hash()
    before = tools.library.stat()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # gcc is unreachable now
    again = build_sim_tools(tmp_path)
    assert again == tools
    after = again.library.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(p.name for p in tmp_path.iterdir()) == [tools.lib_dir.parent.name]


def test_concurrent_builders_share_one_build(tmp_path: Path, sim_tools: SimTools) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(build_sim_tools, [tmp_path, tmp_path]))
    assert results[0] == results[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == [results[0].lib_dir.parent.name]
    assert results[0].library.read_bytes() == sim_tools.library.read_bytes()


def test_missing_compiler_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CC", "fleet-test-no-such-cc")
    with pytest.raises(ConfigError, match="'fleet-test-no-such-cc' not found on PATH"):
        build_sim_tools(tmp_path)


def test_compile_failure_is_a_fleet_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "libnvml.c"
    broken.write_text("int nvmlInit_v2(void) { return }\n")
    monkeypatch.setattr(build, "LIBRARY_SOURCE", broken)
    cache = tmp_path / "cache"
    with pytest.raises(FleetError, match=r"failed \(exit 1\)[\s\S]*libnvml\.c:1"):
        build_sim_tools(cache)
    assert list(cache.iterdir()) == []  # the half-built directory is gone


def test_bare_nvidia_smi_prints_a_summary(sim_host: SimHostFactory) -> None:
    host = gpus.busy(2)
    _, env = sim_host(host)
    completed = nvidia_smi(env)
    assert completed.returncode == 0
    driver_line, header, *rows = completed.stdout.splitlines()
    assert f"Driver Version: {host.driver_version}" in driver_line
    assert header.startswith("index, name, temperature.gpu")
    assert [row.split(", ")[:3] for row in rows] == [
        [str(i), gpu.name, str(gpu.temperature_c)] for i, gpu in enumerate(host.gpus)
    ]
