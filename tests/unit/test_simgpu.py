"""Simulated GPU layer: config format, and unmodified pynvml reading what it configures."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.errors import ConfigError
from fleet.sim import gpus
from fleet.sim.gpus import (
    MIB,
    SimGpu,
    SimHostGpus,
    parse_config,
    read_config,
    render_config,
    write_config,
)
from tests.fixtures.simgpu import SimHostFactory

DEADLINE_S = 10.0

# Reads every value the probe uses from every GPU; a failing call yields "!<exception class>".
DUMP_ALL = r"""
import json, pynvml as n

def attempt(read):
    try:
        return read()
    except n.NVMLError as exc:
        return "!" + type(exc).__name__

def pci(h):
    p = n.nvmlDeviceGetPciInfo_v3(h)
    return [p.busId, p.busIdLegacy, p.domain, p.bus, p.device,
            p.pciDeviceId, p.pciSubSystemId]

def memory(h):
    m = n.nvmlDeviceGetMemoryInfo(h)
    return [m.total, m.free, m.used]

def memory_v2(h):
    m = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
    return [m.version, m.total, m.reserved, m.free, m.used]

def processes(h):
    return [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId]
            for p in n.nvmlDeviceGetComputeRunningProcesses_v3(h)]

READS = {
    "index": n.nvmlDeviceGetIndex,
    "name": n.nvmlDeviceGetName,
    "uuid": n.nvmlDeviceGetUUID,
    "pci": pci,
    "memory": memory,
    "memory_v2": memory_v2,
    "utilization": lambda h: [n.nvmlDeviceGetUtilizationRates(h).gpu,
                              n.nvmlDeviceGetUtilizationRates(h).memory],
    "temperature": lambda h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
    "power_mw": n.nvmlDeviceGetPowerUsage,
    "enforced_limit_mw": n.nvmlDeviceGetEnforcedPowerLimit,
    "management_limit_mw": n.nvmlDeviceGetPowerManagementLimit,
    "fan": n.nvmlDeviceGetFanSpeed,
    "pstate": n.nvmlDeviceGetPerformanceState,
    "clocks": lambda h: [n.nvmlDeviceGetClockInfo(h, t) for t in
                         (n.NVML_CLOCK_GRAPHICS, n.NVML_CLOCK_SM, n.NVML_CLOCK_MEM)],
    "ecc": lambda h: [n.nvmlDeviceGetTotalEccErrors(h, e, c)
                      for e in (n.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
                      for c in (n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC)],
    "retired_pending": n.nvmlDeviceGetRetiredPagesPendingStatus,
    "processes": processes,
    "energy": n.nvmlDeviceGetTotalEnergyConsumption,
}

init = attempt(n.nvmlInit)
report = {"init": init}
if init is None:
    report["driver_version"] = n.nvmlSystemGetDriverVersion()
    report["cuda"] = [n.nvmlSystemGetCudaDriverVersion(), n.nvmlSystemGetCudaDriverVersion_v2()]
    report["nvml_version"] = n.nvmlSystemGetNVMLVersion()
    report["gpus"] = []
    for i in range(n.nvmlDeviceGetCount()):
        handle = attempt(lambda: n.nvmlDeviceGetHandleByIndex(i))
        if isinstance(handle, str):
            report["gpus"].append({"handle": handle})
            continue
        report["gpus"].append({key: attempt(lambda: read(handle)) for key, read in READS.items()})
    n.nvmlShutdown()
    report["after_shutdown"] = attempt(n.nvmlDeviceGetCount)
print(json.dumps(report))
"""


def run_python(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=DEADLINE_S
    )


def dump_all(env: dict[str, str]) -> dict[str, Any]:
    completed = run_python(env, DUMP_ALL)
    assert completed.returncode == 0, completed.stderr
    report: dict[str, Any] = json.loads(completed.stdout)
    return report


def milliwatts(watts: float) -> int:
    """NVML's milliwatt counter for a configured wattage (the library rounds half up)."""
    return math.floor(watts * 1000 + 0.5)


def expected_values(gpu: SimGpu, index: int) -> dict[str, object]:
    """What pynvml must return for `gpu`, derived from the config (watts become milliwatts)."""
    domain, bus, slot_function = gpu.pci_bus_id.split(":")
    slot = slot_function.split(".")[0]
    free = gpu.memory_total_bytes - gpu.memory_used_bytes
    return {
        "index": index,
        "name": gpu.name,
        "uuid": gpu.uuid,
        "pci": [
            gpu.pci_bus_id,
            f"{int(domain, 16):04X}:{bus}:{slot_function}",
            int(domain, 16),
            int(bus, 16),
            int(slot, 16),
            gpu.pci_device_id,
            gpu.pci_subsystem_id,
        ],
        "memory": [gpu.memory_total_bytes, free, gpu.memory_used_bytes],
        "memory_v2": [0x02000028, gpu.memory_total_bytes, 0, free, gpu.memory_used_bytes],
        "utilization": [gpu.utilization_gpu_pct, gpu.utilization_memory_pct],
        "temperature": gpu.temperature_c,
        "power_mw": milliwatts(gpu.power_draw_w),
        "enforced_limit_mw": milliwatts(gpu.power_limit_w),
        "management_limit_mw": milliwatts(gpu.power_limit_w),
        "fan": gpu.fan_speed_pct,
        "pstate": gpu.performance_state,
        "clocks": [gpu.clock_sm_mhz, gpu.clock_sm_mhz, gpu.clock_mem_mhz],
        "ecc": [gpu.ecc_errors_corrected] * 2 + [gpu.ecc_errors_uncorrected] * 2,
        "retired_pending": int(gpu.retired_pages_pending),
        "processes": [[pid, used, 0xFFFFFFFF, 0xFFFFFFFF] for pid, used in gpu.processes],
        "energy": "!NVMLError_FunctionNotFound",  # deliberately not exported
    }


def varied_host() -> SimHostGpus:
    """Three GPUs whose every value differs, including several processes and odd wattages."""
    host = gpus.mixed(3, host="varied")
    host.driver_version = "535.183.01"
    host.cuda_driver_version = 12020
    host.nvml_version = "12.535.183.01"
    host.gpus[0].processes = [(111, 5 * MIB), (222, 7 * MIB), (333, 1)]
    host.gpus[1].performance_state = 8
    host.gpus[1].power_draw_w = 61.2345
    host.gpus[2] = gpus.ecc_errors(3, bad_index=2, host="varied").gpus[2]
    host.gpus[2].pci_bus_id = "00000001:A3:1F.0"
    host.gpus[2].clock_mem_mhz = 877
    return host


# ---- config file ---------------------------------------------------------------------------

SCENARIOS = [
    gpus.idle(2),
    gpus.busy(4, model="NVIDIA H100 80GB HBM3"),
    gpus.mixed(5),
    gpus.gpu_lost(3, lost_index=1),
    gpus.hot_gpu(2, hot_index=0),
    gpus.no_driver(),
    gpus.ecc_errors(2),
    gpus.fan_not_supported(2),
    gpus.old_driver(2),
]


@pytest.mark.parametrize("host", [*SCENARIOS, varied_host()])
def test_read_config_returns_what_write_config_wrote(tmp_path: Path, host: SimHostGpus) -> None:
    path = tmp_path / "gpus.conf"
    write_config(path, host)
    assert read_config(path) == host
    assert [p.name for p in tmp_path.iterdir()] == ["gpus.conf"]  # no temp file left


def test_write_config_always_advances_the_mtime(tmp_path: Path) -> None:
    """The library re-reads on any stat change; a rewrite must never reuse an older mtime,
    even when the clock says otherwise (same timestamp tick, or an mtime in the future)."""
    path = tmp_path / "gpus.conf"
    write_config(path, gpus.idle(1))
    future_ns = time.time_ns() + 3600 * 10**9
    os.utime(path, ns=(future_ns, future_ns))
    write_config(path, gpus.idle(2))
    assert path.stat().st_mtime_ns > future_ns


text_values = st.text(st.characters(min_codepoint=32, exclude_categories=["Cs"]), max_size=20)
sim_gpus = st.builds(
    SimGpu,
    name=text_values,
    uuid=text_values,
    pci_bus_id=st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=31),
    memory_total_bytes=st.integers(0, 2**64 - 1),
    memory_used_bytes=st.integers(0, 2**64 - 1),
    utilization_gpu_pct=st.integers(0, 100),
    temperature_c=st.integers(0, 2**32 - 1),
    power_draw_w=st.floats(0, 4e6, allow_nan=False),
    performance_state=st.integers(0, 32),
    retired_pages_pending=st.booleans(),
    processes=st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)), max_size=4),
    lost=st.booleans(),
    errors=st.dictionaries(
        st.from_regex(r"nvml[A-Za-z_0-9]{1,30}", fullmatch=True), st.integers(1, 999), max_size=3
    ),
)


@given(st.builds(SimHostGpus, gpus=st.lists(sim_gpus, max_size=3), driver_version=text_values))
def test_parse_config_inverts_render_config(host: SimHostGpus) -> None:
    assert parse_config(render_config(host), "generated") == host


def test_read_config_names_file_and_line_of_bad_value(tmp_path: Path) -> None:
    path = tmp_path / "bad.conf"
    path.write_text("fleet_sim_nvml=1\n[gpu]\nname=x\nutilization_gpu_pct=101\n")
    with pytest.raises(ConfigError, match=r"bad\.conf:4: utilization_gpu_pct") as caught:
        read_config(path)
    assert caught.value.line == 4
    path.write_text("fleet_sim_nvml=1\n[gpu]\nname=x\n")
    with pytest.raises(ConfigError, match=r"bad\.conf:2: \[gpu\] section lacks uuid"):
        read_config(path)


BAD_GPU_LINES = [
    "utilization_gpu_pct=101",
    "temperature_c= 5",
    "temperature_c=-1",
    "memory_total_bytes=010",
    "power_draw_w=nan",
    "power_draw_w=0x1p3",
    "lost=2",
    "process=12",
    "error=nvmlDeviceGetName:0",
    "volts=3",
]

C_INIT_EACH = r"""
import json, os, sys, pynvml as n
results = []
for path in sys.argv[1:]:
    os.environ["FLEET_SIM_NVML_CONFIG"] = path  # the library calls getenv on every call
    try:
        n.nvmlInit()
        results.append("ok")
        n.nvmlShutdown()
    except n.NVMLError as exc:
        results.append(type(exc).__name__)
print(json.dumps(results))
"""


def test_library_and_read_config_reject_the_same_bad_lines(
    sim_host: SimHostFactory, tmp_path: Path
) -> None:
    good_path, env = sim_host(gpus.idle(1))
    good_text = good_path.read_text()
    bad_line_number = len(good_text.splitlines()) + 1
    paths = []
    for number, bad_line in enumerate(BAD_GPU_LINES):
        path = tmp_path / f"bad-{number}.conf"
        path.write_text(good_text + bad_line + "\n")
        with pytest.raises(ConfigError) as caught:
            read_config(path)
        assert caught.value.line == bad_line_number, bad_line
        paths.append(str(path))
    completed = subprocess.run(
        [sys.executable, "-c", C_INIT_EACH, str(good_path), *paths],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert json.loads(completed.stdout) == ["ok"] + ["NVMLError_Unknown"] * len(paths)
    for bad_path in paths:
        assert f"{bad_path}:{bad_line_number}: " in completed.stderr


def test_write_config_refuses_values_the_file_cannot_hold(tmp_path: Path) -> None:
    host = gpus.idle(1)
    host.gpus[0].name = "two\nlines"
    with pytest.raises(ConfigError, match="control characters"):
        write_config(tmp_path / "gpus.conf", host)
    host = gpus.idle(1)
    host.gpus[0].errors["not a function"] = 3
    with pytest.raises(ConfigError, match="not an NVML function name"):
        write_config(tmp_path / "gpus.conf", host)
    assert not list(tmp_path.iterdir())


def test_scenario_uuids_are_predictable() -> None:
    assert [g.uuid for g in gpus.idle(2, host="h1").gpus] == [
        gpus.gpu_uuid("h1", 0),
        gpus.gpu_uuid("h1", 1),
    ]
    assert gpus.gpu_uuid("h1", 0) != gpus.gpu_uuid("h2", 0)
    assert gpus.gpu_uuid("h1", 0).startswith("GPU-")


# ---- unmodified pynvml against the simulated library -------------------------------------


def test_pynvml_reads_every_configured_value(sim_host: SimHostFactory) -> None:
    host = varied_host()
    _, env = sim_host(host)
    report = dump_all(env)
    assert report["init"] is None
    assert report["driver_version"] == host.driver_version
    assert report["cuda"] == [host.cuda_driver_version, host.cuda_driver_version]
    assert report["nvml_version"] == host.nvml_version
    assert report["gpus"] == [expected_values(gpu, i) for i, gpu in enumerate(host.gpus)]
    assert report["after_shutdown"] == "!NVMLError_Uninitialized"


def test_injected_errors_raise_the_matching_pynvml_exceptions(sim_host: SimHostFactory) -> None:
    host = gpus.fan_not_supported(3)
    host.gpus[1].lost = True
    host.gpus[2].errors["nvmlDeviceGetTemperature"] = 999
    host.gpus[2].errors["nvmlDeviceGetHandleByIndex_v2"] = 15
    _, env = sim_host(host)
    report = dump_all(env)
    first, lost, unreachable = report["gpus"]
    assert first["fan"] == "!NVMLError_NotSupported"
    assert first["temperature"] == host.gpus[0].temperature_c
    assert first["uuid"] == host.gpus[0].uuid
    assert lost.pop("energy") == "!NVMLError_FunctionNotFound"
    assert set(lost.values()) == {"!NVMLError_GpuIsLost"}, lost
    assert unreachable == {"handle": "!NVMLError_GpuIsLost"}


def test_driver_not_loaded_fails_init(sim_host: SimHostFactory) -> None:
    _, env = sim_host(gpus.no_driver())
    assert dump_all(env)["init"] == "!NVMLError_DriverNotLoaded"


def test_missing_or_invalid_config_is_reported(sim_host: SimHostFactory, tmp_path: Path) -> None:
    config_path, env = sim_host(gpus.idle(1))
    config_path.write_text("fleet_sim_nvml=1\n[gpu]\nname=x\nvolts=3\n")
    completed = run_python(env, DUMP_ALL)
    assert json.loads(completed.stdout)["init"] == "!NVMLError_Unknown"
    assert f"{config_path}:4: unknown key" in completed.stderr
    unset_env = {k: v for k, v in env.items() if k != "FLEET_SIM_NVML_CONFIG"}
    completed = run_python(unset_env, DUMP_ALL)
    assert json.loads(completed.stdout)["init"] == "!NVMLError_DriverNotLoaded"
    assert "FLEET_SIM_NVML_CONFIG is not set" in completed.stderr
