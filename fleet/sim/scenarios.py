"""Named simulated-GPU scenarios (idle, busy, hot, lost, ECC errors), after what they reproduce."""

from __future__ import annotations

import uuid

from fleet.sim.config import (
    GIB,
    MIB,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_NOT_SUPPORTED,
    SimGpu,
    SimHostGpus,
)

# Simulated cooling: under a steady load a GPU settles at a temperature set by its utilisation,
# from IDLE_TEMPERATURE_C (0%) to FULL_LOAD_TEMPERATURE_C (100%), safely below the 80/85 °C
# health thresholds; each reading closes TEMPERATURE_SETTLING of the gap to it.
IDLE_TEMPERATURE_C = 30.0
FULL_LOAD_TEMPERATURE_C = 72.0
TEMPERATURE_SETTLING = 0.3

_UUID_NAMESPACE = uuid.UUID("6f1c0a4e-5d1b-4f7e-9a43-2b9d7c1e8f10")

# Model name -> (power limit W, PCI device id) for the models the scenarios use.
_MODELS: dict[str, tuple[float, int]] = {
    "NVIDIA A100-SXM4-80GB": (400.0, 0x20B210DE),
    "NVIDIA H100 80GB HBM3": (700.0, 0x233010DE),
    "NVIDIA GeForce RTX 4090": (450.0, 0x268410DE),
    "Tesla V100-SXM2-32GB": (300.0, 0x1DB510DE),
}


def gpu_uuid(host: str, index: int) -> str:
    """The deterministic UUID the scenarios give GPU `index` of `host`."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{host}/{index}')}"


def next_temperature(current_c: float, utilization_pct: float, noise_c: float) -> float:
    """The next temperature reading of a GPU at `utilization_pct`: a step toward the steady
    temperature of that load, plus `noise_c`.

    With |noise_c| <= 1, even when each reading is rounded to whole degrees, readings that start
    below 77 °C stay there (72 + 1.5 / 0.3) and higher ones fall: only a GPU that a scenario
    forces hot ever reaches the 85 °C ceiling, and it cools below 80 °C when released.
    """
    load = min(100.0, max(0.0, utilization_pct)) / 100
    steady_c = IDLE_TEMPERATURE_C + (FULL_LOAD_TEMPERATURE_C - IDLE_TEMPERATURE_C) * load
    return current_c + TEMPERATURE_SETTLING * (steady_c - current_c) + noise_c


def idle_gpu(host: str, index: int, model: str, memory_gib: int) -> SimGpu:
    """A GPU with nothing running on it."""
    power_limit_w, device_id = _MODELS.get(model, (300.0, 0x20B210DE))
    return SimGpu(
        name=model,
        uuid=gpu_uuid(host, index),
        pci_bus_id=f"00000000:{0x10 + index:02X}:00.0",
        memory_total_bytes=memory_gib * GIB,
        temperature_c=31 + index % 4,
        power_draw_w=round(power_limit_w * 0.15 + index * 0.5, 2),
        power_limit_w=power_limit_w,
        pci_device_id=device_id,
    )


def busy_gpu(host: str, index: int, model: str, memory_gib: int) -> SimGpu:
    """A GPU running one training process that holds most of its memory."""
    gpu = idle_gpu(host, index, model, memory_gib)
    gpu.memory_used_bytes = gpu.memory_total_bytes * 3 // 4
    gpu.utilization_gpu_pct = 97
    gpu.utilization_memory_pct = 61
    gpu.temperature_c = 68 + index % 5
    gpu.power_draw_w = round(gpu.power_limit_w * 0.8 + index * 0.25, 2)
    gpu.fan_speed_pct = 72
    gpu.clock_sm_mhz = 1410
    gpu.processes = [(20000 + index, gpu.memory_used_bytes - 512 * MIB)]
    return gpu


def idle(
    count: int, model: str = "NVIDIA A100-SXM4-80GB", memory_gib: int = 80, host: str = "sim"
) -> SimHostGpus:
    """`count` idle GPUs."""
    return SimHostGpus(gpus=[idle_gpu(host, i, model, memory_gib) for i in range(count)])


def busy(
    count: int, model: str = "NVIDIA A100-SXM4-80GB", memory_gib: int = 80, host: str = "sim"
) -> SimHostGpus:
    """`count` GPUs each running one process at ~97% utilisation."""
    return SimHostGpus(gpus=[busy_gpu(host, i, model, memory_gib) for i in range(count)])


def mixed(
    count: int, model: str = "NVIDIA A100-SXM4-80GB", memory_gib: int = 80, host: str = "sim"
) -> SimHostGpus:
    """Even-indexed GPUs busy, odd-indexed GPUs idle."""
    make = (busy_gpu, idle_gpu)
    return SimHostGpus(gpus=[make[i % 2](host, i, model, memory_gib) for i in range(count)])


def gpu_lost(count: int, lost_index: int, host: str = "sim") -> SimHostGpus:
    """Idle GPUs, one of which fell off the bus (every call on it returns GPU_IS_LOST)."""
    scenario = idle(count, host=host)
    scenario.gpus[lost_index].lost = True
    return scenario


def hot_gpu(count: int, hot_index: int, temperature_c: int = 92, host: str = "sim") -> SimHostGpus:
    """Idle GPUs, one of which is busy and running hot."""
    scenario = idle(count, host=host)
    hot = busy_gpu(host, hot_index, scenario.gpus[hot_index].name, 80)
    hot.temperature_c = temperature_c
    hot.fan_speed_pct = 100
    scenario.gpus[hot_index] = hot
    return scenario


def no_driver() -> SimHostGpus:
    """A host whose NVIDIA kernel driver is not loaded: nvmlInit fails with DRIVER_NOT_LOADED."""
    return SimHostGpus(gpus=[], init_error=NVML_ERROR_DRIVER_NOT_LOADED)


def ecc_errors(
    count: int,
    bad_index: int = 0,
    corrected: int = 1234,
    uncorrected: int = 2,
    host: str = "sim",
) -> SimHostGpus:
    """Idle GPUs, one with ECC errors and retired pages pending a reset."""
    scenario = idle(count, host=host)
    bad = scenario.gpus[bad_index]
    bad.ecc_errors_corrected = corrected
    bad.ecc_errors_uncorrected = uncorrected
    bad.retired_pages_pending = True
    return scenario


def fan_not_supported(count: int, host: str = "sim") -> SimHostGpus:
    """Passively cooled GPUs (SXM modules): nvmlDeviceGetFanSpeed returns NOT_SUPPORTED."""
    scenario = idle(count, host=host)
    for gpu in scenario.gpus:
        gpu.errors["nvmlDeviceGetFanSpeed"] = NVML_ERROR_NOT_SUPPORTED
    return scenario


def old_driver(count: int, host: str = "sim") -> SimHostGpus:
    """An R418 driver (CUDA 10.1) on passively cooled V100s: nvidia-smi says "[Not Supported]"."""
    gpus = [idle_gpu(host, i, "Tesla V100-SXM2-32GB", 32) for i in range(count)]
    for gpu in gpus:
        gpu.errors["nvmlDeviceGetFanSpeed"] = NVML_ERROR_NOT_SUPPORTED
    return SimHostGpus(
        gpus=gpus,
        driver_version="418.226.00",
        cuda_driver_version=10010,
        nvml_version="10.418.226.00",
    )
