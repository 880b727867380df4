"""parse_probe_line: good lines become ProbeReports; bad ones become warnings or ProbeError."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleet.errors import ProbeError
from fleet.probe.parse import MAX_LINE_BYTES, parse_probe_line, sanitize_text
from fleet.reports import GpuReport, HostReport, ProcessInfo


def _gpu(index: int = 0, **overrides: Any) -> dict[str, Any]:
    gpu: dict[str, Any] = {
        "index": index,
        "uuid": f"GPU-{index:08d}-aaaa-bbbb-cccc-dddddddddddd",
        "name": "NVIDIA A100-SXM4-80GB",
        "pci_bus_id": f"00000000:{index + 1:02X}:00.0",
        "memory_total_bytes": 85899345920,
        "memory_used_bytes": 1048576,
        "utilization_gpu_pct": 37,
        "utilization_memory_pct": 12,
        "temperature_c": 41,
        "power_draw_w": 61.5,
        "power_limit_w": 400.0,
        "fan_speed_pct": None,
        "performance_state": 0,
        "clock_sm_mhz": 1410,
        "clock_mem_mhz": 1593,
        "ecc_errors_corrected": 0,
        "ecc_errors_uncorrected": 0,
        "retired_pages_pending": False,
        "processes": [{"pid": 4242, "used_memory_bytes": 1048576, "name": "python3"}],
        "lost": False,
        "error": None,
    }
    gpu.update(overrides)
    return gpu


def _line(**overrides: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "schema": 1,
        "ts": 1700000000.25,
        "method": "nvml",
        "host": {
            "hostname": "gpu-01",
            "kernel": "6.1.0-18-amd64",
            "driver_version": "550.54.15",
            "cuda_driver_version": "12.4",
            "nvml_version": "12.550.54.15",
            "cpu_count": 64,
            "load_1m": 1.5,
            "load_5m": 1.25,
            "load_15m": 1.0,
            "cpu_busy_pct": 12.5,
            "memory_total_bytes": 540000000000,
            "memory_available_bytes": 500000000000,
            "disk_root_total_bytes": 1000,
            "disk_root_free_bytes": 500,
            "disk_tasks_total_bytes": 2000,
            "disk_tasks_free_bytes": 1500,
            "net_rx_bytes": 123,
            "net_tx_bytes": 456,
            "python_version": "3.6.15",
        },
        "gpus": [_gpu(0), _gpu(1)],
        "gpu_reason": None,
        "warnings": [],
    }
    line.update(overrides)
    return line


def _encode(line: dict[str, Any]) -> bytes:
    return json.dumps(line).encode()


def test_a_complete_line_becomes_the_same_values() -> None:
    report = parse_probe_line(_encode(_line()), "gpu-01")
    assert report.schema == 1
    assert report.timestamp == 1700000000.25
    assert report.method == "nvml"
    assert report.host == HostReport(
        hostname="gpu-01",
        kernel="6.1.0-18-amd64",
        driver_version="550.54.15",
        cuda_driver_version="12.4",
        nvml_version="12.550.54.15",
        cpu_count=64,
        load_1m=1.5,
        load_5m=1.25,
        load_15m=1.0,
        cpu_busy_pct=12.5,
        memory_total_bytes=540000000000,
        memory_available_bytes=500000000000,
        disk_root_total_bytes=1000,
        disk_root_free_bytes=500,
        disk_tasks_total_bytes=2000,
        disk_tasks_free_bytes=1500,
        net_rx_bytes=123,
        net_tx_bytes=456,
        python_version="3.6.15",
    )
    assert [gpu.index for gpu in report.gpus] == [0, 1]
    first = report.gpus[0]
    assert first == GpuReport(
        index=0,
        uuid="GPU-00000000-aaaa-bbbb-cccc-dddddddddddd",
        name="NVIDIA A100-SXM4-80GB",
        pci_bus_id="00000000:01:00.0",
        memory_total_bytes=85899345920,
        memory_used_bytes=1048576,
        utilization_gpu_pct=37.0,
        utilization_memory_pct=12.0,
        temperature_c=41.0,
        power_draw_w=61.5,
        power_limit_w=400.0,
        fan_speed_pct=None,
        performance_state=0,
        clock_sm_mhz=1410,
        clock_mem_mhz=1593,
        ecc_errors_corrected=0,
        ecc_errors_uncorrected=0,
        retired_pages_pending=False,
        processes=(ProcessInfo(pid=4242, used_memory_bytes=1048576, name="python3"),),
    )
    assert report.warnings == ()


def test_str_input_and_trailing_newline_are_accepted() -> None:
    report = parse_probe_line(json.dumps(_line()) + "\n", "gpu-01")
    assert len(report.gpus) == 2


def test_no_gpus_with_a_reason() -> None:
    line = _line(gpus=[], gpu_reason="NVML could not be initialised: Driver Not Loaded")
    report = parse_probe_line(_encode(line), "h")
    assert report.gpus == ()
    assert report.gpu_reason == "NVML could not be initialised: Driver Not Loaded"


def test_lost_gpu_keeps_its_flag_and_error() -> None:
    lost = {"index": 1, "lost": True, "error": "GPU is lost (nvmlDeviceGetUUID: GPU is lost)"}
    report = parse_probe_line(_encode(_line(gpus=[_gpu(0), lost])), "h")
    assert report.gpus[1].lost is True
    assert report.gpus[1].error == "GPU is lost (nvmlDeviceGetUUID: GPU is lost)"
    assert report.gpus[1].uuid is None
    assert report.gpus[0].lost is False


def test_gpus_come_back_sorted_by_index() -> None:
    report = parse_probe_line(_encode(_line(gpus=[_gpu(2), _gpu(0)])), "h")
    assert [gpu.index for gpu in report.gpus] == [0, 2]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature_c", "hot"),
        ("temperature_c", True),
        ("temperature_c", [41]),
        ("memory_used_bytes", -1),
        ("memory_used_bytes", 1.5),
        ("memory_used_bytes", 2**70),
        ("clock_sm_mhz", "1410"),
        ("retired_pages_pending", "no"),
        ("name", 12),
        ("power_draw_w", 1e300),
    ],
)
def test_a_wrong_type_in_a_gpu_field_becomes_none_and_a_warning(field: str, value: Any) -> None:
    report = parse_probe_line(_encode(_line(gpus=[_gpu(0, **{field: value})])), "h")
    assert getattr(report.gpus[0], field) is None
    assert any(warning.startswith(f"gpus[0].{field}:") for warning in report.warnings)
    # the other fields are still read
    assert report.gpus[0].uuid == "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"


def test_nan_and_infinity_from_python_json_are_refused_per_field() -> None:
    text = json.dumps(_line()).replace('"temperature_c": 41', '"temperature_c": NaN', 1)
    report = parse_probe_line(text, "h")
    assert report.gpus[0].temperature_c is None
    assert report.warnings


def test_wrong_type_in_a_host_field_becomes_none_and_a_warning() -> None:
    line = _line()
    line["host"]["load_1m"] = "1.5"
    line["host"]["hostname"] = None
    report = parse_probe_line(_encode(line), "h")
    assert report.host.load_1m is None
    assert report.host.hostname is None
    assert report.host.load_5m == 1.25
    assert report.warnings == ("host.load_1m: expected finite number, got str; ignored",)


def test_integral_floats_are_accepted_as_integers() -> None:
    report = parse_probe_line(_encode(_line(gpus=[_gpu(0, clock_sm_mhz=1410.0)])), "h")
    assert report.gpus[0].clock_sm_mhz == 1410
    assert isinstance(report.gpus[0].clock_sm_mhz, int)


def test_bad_processes_are_dropped_with_warnings() -> None:
    processes = [{"pid": "x"}, "junk", {"pid": 7, "used_memory_bytes": None, "name": "a\x1b[31mb"}]
    report = parse_probe_line(_encode(_line(gpus=[_gpu(0, processes=processes)])), "h")
    assert report.gpus[0].processes == (ProcessInfo(pid=7, used_memory_bytes=None, name="ab"),)
    assert len(report.warnings) == 3


def test_names_lose_terminal_escapes_and_are_capped() -> None:
    hostile = "\x1b]0;pwned\x07A100\x1b[2J\x1b[31m-red\x9b1m\u202e\x00" + "x" * 1000
    report = parse_probe_line(_encode(_line(gpus=[_gpu(0, name=hostile)])), "h")
    name = report.gpus[0].name
    assert name is not None
    assert name.startswith("A100-redx")
    assert len(name) == 256
    assert not any(ord(char) < 32 or 0x7F <= ord(char) <= 0x9F for char in name)


def test_sanitize_text_keeps_ordinary_unicode() -> None:
    assert sanitize_text("  Tesla V100 – 16GB µ  ") == "Tesla V100 – 16GB µ"


def test_sent_warnings_are_kept_sanitised_and_capped() -> None:
    warnings = ["gpu 0: nvmlDeviceGetTemperature: Unknown Error\x1b[0m", 5]
    warnings += [f"w{i}" for i in range(500)]
    report = parse_probe_line(_encode(_line(warnings=warnings)), "h")
    assert report.warnings[0] == "gpu 0: nvmlDeviceGetTemperature: Unknown Error"
    assert report.warnings[1] == "5"
    assert len(report.warnings) == 201
    assert report.warnings[-1] == "302 more warnings dropped"


def test_unknown_extra_keys_are_ignored() -> None:
    report = parse_probe_line(_encode(_line(future_field=1, gpus=[_gpu(0, mig=[1])])), "h")
    assert len(report.gpus) == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"", "not JSON"),
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[]", "not an object"),
        (b'"text"', "not an object"),
        (b"null", "not an object"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (_encode(_line(schema=2)), "schema 2"),
        (_encode(_line(schema="1")), "schema '1'"),
        (_encode(_line(schema=True)), "schema True"),
        (_encode({"ts": 1.0}), "schema None"),
        (_encode(_line(ts="now")), "ts is not a timestamp"),
        (_encode(_line(ts=-5)), "ts is not a timestamp"),
        (_encode(_line(host=[])), "host is list"),
        (_encode(_line(gpus={"0": {}})), "gpus is dict"),
        (_encode(_line(gpus=[3])), "gpus[0] is int"),
        (_encode(_line(gpus=[{**_gpu(0), "index": "0"}])), "index is not a GPU index"),
        (_encode(_line(gpus=[{**_gpu(0), "index": -1}])), "index is not a GPU index"),
        (_encode(_line(gpus=[_gpu(0), _gpu(0)])), "duplicate GPU indexes"),
        (_encode(_line(gpus=[_gpu(i) for i in range(1025)])), "limit 1024"),
        (_encode(_line(method="telnet")), "unknown method"),
        (_encode(_line(warnings="oops")), "warnings is str"),
    ],
)
def test_bad_lines_raise_probe_error_naming_the_host(line: bytes, message: str) -> None:
    with pytest.raises(ProbeError) as caught:
        parse_probe_line(line, "gpu-07")
    assert caught.value.host == "gpu-07"
    assert message in str(caught.value)
    assert str(caught.value).startswith("gpu-07: ")


def test_a_line_over_the_size_cap_is_refused_before_decoding() -> None:
    line = b'{"schema": 1, "pad": "' + b"x" * MAX_LINE_BYTES + b'"}'
    with pytest.raises(ProbeError, match="limit"):
        parse_probe_line(line, "h")


def test_huge_integer_literal_is_a_probe_error_not_a_crash() -> None:
    line = b'{"schema": 1, "ts": ' + b"9" * 5000 + b"}"
    with pytest.raises(ProbeError, match="not JSON"):
        parse_probe_line(line, "h")
