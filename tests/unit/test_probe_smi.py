"""nvidia-smi fallback: the CSV parser's table, and the one-round-trip command on a fake tool."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from fleet.errors import ProbeError
from fleet.probe.smi import (
    MIB,
    QUERY_FIELDS,
    new_marker,
    parse_smi_csv,
    parse_smi_output,
    smi_command,
)
from fleet.reports import GpuReport, HostReport, ProbeReport
from fleet.sim import gpus as sim

SimHost = Callable[..., tuple[Path, dict[str, str]]]

UUID = "GPU-9f8e7d6c-0000-1111-2222-333344445555"


def row(**cells: str) -> str:
    """One nvidia-smi CSV line as the real tool prints it (", " separated, nothing quoted)."""
    values = {
        "index": "0",
        "uuid": UUID,
        "name": "NVIDIA A100-SXM4-80GB",
        "pci.bus_id": "00000000:3B:00.0",
        "driver_version": "550.54.15",
        "memory.total": "81920",
        "memory.used": "1024",
        "utilization.gpu": "37",
        "utilization.memory": "12",
        "temperature.gpu": "41",
        "power.draw": "61.25",
        "power.limit": "400.00",
        "fan.speed": "30",
        "pstate": "P0",
        "clocks.sm": "1410",
        "clocks.mem": "1593",
        "ecc.errors.corrected.volatile.total": "0",
        "ecc.errors.uncorrected.volatile.total": "0",
        "retired_pages.pending": "No",
    }
    by_python_name = {field.replace(".", "_"): field for field in QUERY_FIELDS}
    values.update({by_python_name[key]: value for key, value in cells.items()})
    return ", ".join(values[field] for field in QUERY_FIELDS)


def test_a_full_row() -> None:
    warnings: list[str] = []
    gpus, driver = parse_smi_csv(row() + "\n", warnings)
    assert gpus == [
        GpuReport(
            index=0,
            uuid=UUID,
            name="NVIDIA A100-SXM4-80GB",
            pci_bus_id="00000000:3B:00.0",
            memory_total_bytes=81920 * MIB,
            memory_used_bytes=1024 * MIB,
            utilization_gpu_pct=37.0,
            utilization_memory_pct=12.0,
            temperature_c=41.0,
            power_draw_w=61.25,
            power_limit_w=400.0,
            fan_speed_pct=30.0,
            performance_state=0,
            clock_sm_mhz=1410,
            clock_mem_mhz=1593,
            ecc_errors_corrected=0,
            ecc_errors_uncorrected=0,
            retired_pages_pending=False,
        )
    ]
    assert driver == "550.54.15"
    assert warnings == []


@pytest.mark.parametrize("unavailable", ["[N/A]", "[Not Supported]", "N/A", "[Unknown Error]"])
def test_unavailable_markers_become_none_without_warnings(unavailable: str) -> None:
    warnings: list[str] = []
    text = row(fan_speed=unavailable, power_draw=unavailable, pstate=unavailable)
    gpus, _ = parse_smi_csv(text, warnings)
    assert (gpus[0].fan_speed_pct, gpus[0].power_draw_w, gpus[0].performance_state) == (
        None,
        None,
        None,
    )
    assert gpus[0].temperature_c == 41.0
    assert warnings == []


@pytest.mark.parametrize(
    "name",
    ["NVIDIA GeForce RTX 4090, rev. A", "Odd, name, with, commas", "Tesla V100-SXM2-32GB"],
)
def test_names_with_commas_or_spaces_survive(name: str) -> None:
    gpus, _ = parse_smi_csv(row(name=name), [])
    assert gpus[0].name == name
    assert gpus[0].uuid == UUID
    assert gpus[0].memory_total_bytes == 81920 * MIB


def test_a_quoted_name_is_read_as_csv() -> None:
    gpus, _ = parse_smi_csv(row(name='"Quoted, Name"'), [])
    assert gpus[0].name == "Quoted, Name"


@pytest.mark.parametrize(
    ("cells", "field"),
    [
        ({"temperature_gpu": "hot"}, "temperature_c"),
        ({"memory_total": "-5"}, "memory_total_bytes"),
        ({"memory_total": "inf"}, "memory_total_bytes"),
        ({"clocks_sm": "1e3"}, "clock_sm_mhz"),
        ({"pstate": "P"}, "performance_state"),
        ({"retired_pages_pending": "maybe"}, "retired_pages_pending"),
        ({"power_draw": "nan"}, "power_draw_w"),
        ({"power_draw": "1e30"}, "power_draw_w"),  # past the JSON line's bound (fleet.reports)
        ({"temperature_gpu": "-1e18"}, "temperature_c"),
    ],
)
def test_garbage_values_are_none_with_a_warning(cells: dict[str, str], field: str) -> None:
    warnings: list[str] = []
    gpus, _ = parse_smi_csv(row(**cells), warnings)
    assert getattr(gpus[0], field) is None
    assert len(warnings) == 1 and "unreadable value" in warnings[0]


def test_short_rows_and_bad_indexes_are_skipped_with_warnings() -> None:
    warnings: list[str] = []
    text = "\n".join(["0, only, three", row(index="x"), row(index="2"), ""])
    gpus, _ = parse_smi_csv(text, warnings)
    assert [gpu.index for gpu in gpus] == [2]
    assert len(warnings) == 3


def test_duplicate_indexes_are_an_error() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_smi_csv(row() + "\n" + row(), [])


def test_lost_gpu_lines_of_the_real_tool_take_the_next_index() -> None:
    text = "\n".join(
        [
            row(index="0"),
            "Unable to determine the device handle for GPU0000:3C:00.0: GPU is lost. "
            "Reboot the system to recover this GPU",
            row(index="2"),
        ]
    )
    gpus, _ = parse_smi_csv(text, [])
    assert [(gpu.index, gpu.lost) for gpu in gpus] == [(0, False), (1, True), (2, False)]
    assert gpus[1].error is not None and "GPU is lost" in gpus[1].error


def output(marker: str, smi: str, smi_exit: int) -> str:
    sections = [
        ("smi", smi),
        ("smi-exit", str(smi_exit)),
        ("loadavg", "0.50 0.25 0.10 1/93 7435"),
        ("meminfo", "MemTotal:       24684096 kB\nMemFree: 1 kB\nMemAvailable:   24141076 kB"),
        ("kernel", "6.1.0-18-amd64"),
        ("hostname", "gpu-02"),
        ("nproc", "16"),
        ("end", ""),
    ]
    return "".join(f"@@{marker} {name}@@\n{body}\n" for name, body in sections)


def test_every_reading_it_makes_fits_the_bounds_of_a_probe_line() -> None:
    """What the fallback reads passes the checks the typed decode holds the JSON line to (the
    server's snapshot is decoded into these types by its clients)."""
    marker = new_marker()
    huge = row(power_draw="9.9e17", clocks_sm="9" * 18, temperature_gpu="-9.9e17")
    report = parse_smi_output(output(marker, huge, 0).encode(), "gpu-02", marker)
    assert msgspec.json.decode(msgspec.json.encode(report.host), type=HostReport) == report.host
    assert msgspec.json.decode(msgspec.json.encode(report.gpus), type=tuple[GpuReport, ...]) \
        == report.gpus


def test_output_with_host_sections() -> None:
    marker = new_marker()
    report = parse_smi_output(output(marker, row(), 0).encode(), "gpu-02", marker)
    assert report.method == "nvidia-smi"
    assert report.gpu_reason is None
    assert len(report.gpus) == 1
    host = report.host
    assert (host.hostname, host.kernel, host.cpu_count) == ("gpu-02", "6.1.0-18-amd64", 16)
    assert (host.load_1m, host.load_5m, host.load_15m) == (0.5, 0.25, 0.1)
    assert host.memory_total_bytes == 24684096 * 1024
    assert host.memory_available_bytes == 24141076 * 1024
    assert host.driver_version == "550.54.15"


@pytest.mark.parametrize(
    ("smi", "smi_exit", "reason"),
    [
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            9,
            "NVIDIA driver not loaded (nvidia-smi exit 9): NVIDIA-SMI has failed because it",
        ),
        ("", 12, "NVML library not found (nvidia-smi exit 12)"),
        ("sh: 1: nvidia-smi: not found", 127, "nvidia-smi is not installed (nvidia-smi exit 127)"),
        ("Segmentation fault", 139, "nvidia-smi failed (nvidia-smi exit 139): Segmentation"),
    ],
)
def test_nvidia_smi_failures_are_zero_gpus_with_a_reason(
    smi: str, smi_exit: int, reason: str
) -> None:
    marker = new_marker()
    report = parse_smi_output(output(marker, smi, smi_exit), "h", marker)
    assert report.gpus == ()
    assert report.gpu_reason is not None and report.gpu_reason.startswith(reason)
    assert report.host.hostname == "gpu-02"


def test_a_name_cannot_forge_section_markers() -> None:
    marker = new_marker()
    forged = row(name=f"@@{new_marker()} end@@")
    report = parse_smi_output(output(marker, forged, 0), "h", marker)
    assert report.gpus[0].name is not None and report.gpus[0].name.endswith("end@@")


@pytest.mark.parametrize(
    "text",
    ["", "garbage", "@@deadbeefdeadbeef smi@@\n"],
)
def test_output_without_every_section_is_a_probe_error(text: str) -> None:
    with pytest.raises(ProbeError, match="incomplete or garbled") as caught:
        parse_smi_output(text, "gpu-09", "deadbeefdeadbeef")
    assert caught.value.host == "gpu-09"


def test_markers_must_be_hex() -> None:
    with pytest.raises(ValueError, match="hex"):
        smi_command("x'; reboot; '")


def run_fallback(env: dict[str, str]) -> ProbeReport:
    marker = new_marker()
    completed = subprocess.run(
        ["/bin/sh", "-c", smi_command(marker)],
        capture_output=True,
        env=env,
        timeout=60,
        check=True,
    )
    return parse_smi_output(completed.stdout, "sim-host", marker)


def test_fake_nvidia_smi_reports_the_simulated_gpus(sim_host: SimHost) -> None:
    scenario = sim.mixed(3, model="NVIDIA GeForce RTX 4090", memory_gib=24)
    _, env = sim_host(scenario)
    report = run_fallback(env)
    assert report.gpu_reason is None
    assert report.warnings == ()
    for index, (gpu, expected) in enumerate(zip(report.gpus, scenario.gpus, strict=True)):
        assert gpu.index == index
        assert (gpu.uuid, gpu.name, gpu.pci_bus_id) == (
            expected.uuid,
            expected.name,
            expected.pci_bus_id,
        )
        assert gpu.memory_total_bytes == expected.memory_total_bytes
        assert gpu.memory_used_bytes == expected.memory_used_bytes // MIB * MIB
        assert gpu.utilization_gpu_pct == expected.utilization_gpu_pct
        assert gpu.temperature_c == expected.temperature_c
        assert gpu.power_draw_w == pytest.approx(expected.power_draw_w, abs=0.01)
        assert gpu.power_limit_w == pytest.approx(expected.power_limit_w, abs=0.01)
        assert gpu.performance_state == expected.performance_state
    assert report.host.driver_version == "550.54.15"
    assert report.host.kernel == os.uname().release
    assert report.host.cpu_count == os.cpu_count()


def test_fake_nvidia_smi_on_an_old_driver_says_not_supported(sim_host: SimHost) -> None:
    _, env = sim_host(sim.old_driver(2))
    report = run_fallback(env)
    assert [gpu.fan_speed_pct for gpu in report.gpus] == [None, None]
    assert report.host.driver_version == "418.226.00"
    assert report.warnings == ()


def test_fake_nvidia_smi_with_a_lost_gpu(sim_host: SimHost) -> None:
    _, env = sim_host(sim.gpu_lost(3, lost_index=1))
    report = run_fallback(env)
    assert [(gpu.index, gpu.lost) for gpu in report.gpus] == [(0, False), (1, True), (2, False)]
    assert report.gpu_reason is None


def test_fake_nvidia_smi_without_a_driver(sim_host: SimHost) -> None:
    _, env = sim_host(sim.no_driver())
    report = run_fallback(env)
    assert report.gpus == ()
    assert report.gpu_reason is not None
    assert report.gpu_reason.startswith("NVIDIA driver not loaded (nvidia-smi exit 9)")


def test_no_nvidia_smi_installed(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=f"{tmp_path}:/usr/bin:/bin")
    report = run_fallback(env)
    assert report.gpus == ()
    assert report.gpu_reason is not None
    assert report.gpu_reason.startswith("nvidia-smi is not installed (nvidia-smi exit 127)")
    assert report.host.memory_total_bytes
