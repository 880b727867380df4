"""The shipped probe program run by real interpreters (`python3 -c BOOTSTRAP`) on simulated GPUs."""

from __future__ import annotations

import ast
import json
import os
import pwd
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fleet.probe.bundle import REMOTE_SOURCE_PATH, probe_command, probe_program
from fleet.probe.parse import parse_probe_line
from fleet.reports import GpuReport, HostReport, ProbeReport, ProcessInfo
from fleet.sim import gpus as sim
from fleet.sim.gpus import SimGpu

SimHost = Callable[..., tuple[Path, dict[str, str]]]

VENV_PYTHON = sys.executable
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's: no pynvml installed, which is the point
# pyenv's 3.6 stands in for an Ubuntu 18.04 host's python3
PYTHON36 = str(Path.home() / ".pyenv/versions/3.6.15/bin/python3.6")
INTERPRETERS = [
    pytest.param(VENV_PYTHON, id="venv"),
    pytest.param(
        SYSTEM_PYTHON,
        id="system",
        marks=pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="no /usr/bin/python3"),
    ),
    pytest.param(
        PYTHON36,
        id="python3.6",
        marks=pytest.mark.skipif(
            not os.path.exists(PYTHON36), reason="no Python 3.6 interpreter here"
        ),
    ),
]


def run_once(python: str, env: dict[str, str], tasks_dir: str = "~/.fleet/tasks") -> ProbeReport:
    """Run the shipped --once program exactly as a host would; return its parsed line."""
    completed = subprocess.run(
        probe_command(python),
        shell=True,
        input=probe_program("once", None, tasks_dir),
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr.decode()
    lines = completed.stdout.splitlines()
    assert len(lines) == 1, completed.stdout
    return parse_probe_line(lines[0], "sim-host")


def expected_gpu(index: int, gpu: SimGpu) -> GpuReport:
    """What the probe must report for a simulated GPU, field by field."""
    return GpuReport(
        index=index,
        uuid=gpu.uuid,
        name=gpu.name,
        pci_bus_id=gpu.pci_bus_id,
        memory_total_bytes=gpu.memory_total_bytes,
        memory_used_bytes=gpu.memory_used_bytes,
        utilization_gpu_pct=float(gpu.utilization_gpu_pct),
        utilization_memory_pct=float(gpu.utilization_memory_pct),
        temperature_c=float(gpu.temperature_c),
        power_draw_w=gpu.power_draw_w,
        power_limit_w=gpu.power_limit_w,
        fan_speed_pct=float(gpu.fan_speed_pct),
        performance_state=gpu.performance_state,
        clock_sm_mhz=gpu.clock_sm_mhz,
        clock_mem_mhz=gpu.clock_mem_mhz,
        ecc_errors_corrected=gpu.ecc_errors_corrected,
        ecc_errors_uncorrected=gpu.ecc_errors_uncorrected,
        retired_pages_pending=gpu.retired_pages_pending,
        processes=tuple(ProcessInfo(pid, used, None) for pid, used in gpu.processes),
    )


def test_every_shipped_module_is_python36_syntax() -> None:
    from fleet.probe.bundle import PROBE_MODULES

    assert REMOTE_SOURCE_PATH in [path for _, path in PROBE_MODULES]
    for _, path in PROBE_MODULES:
        tree = ast.parse(path.read_text(), feature_version=(3, 6))
        future = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert all(node.module != "__future__" for node in future), path


def test_remote_field_names_are_the_model_field_names(sim_host: SimHost) -> None:
    _, env = sim_host(sim.busy(1))
    code = (
        "import json, fleet.probe.remote as r; s = r.read_once();"
        "print(json.dumps([sorted(s), sorted(s['host']), sorted(s['gpus'][0]),"
        " sorted(s['gpus'][0]['processes'][0])]))"
    )
    completed = subprocess.run(
        [VENV_PYTHON, "-c", code], env=env, capture_output=True, timeout=60, check=True
    )
    top, host, gpu, process = json.loads(completed.stdout)
    assert top == sorted(["schema", "ts", "method", "host", "gpus", "gpu_reason", "warnings"])
    assert host == sorted(HostReport.__struct_fields__)
    assert gpu == sorted(GpuReport.__struct_fields__)
    assert process == sorted(ProcessInfo.__struct_fields__)


def test_system_python_really_lacks_pynvml() -> None:
    if not os.path.exists(SYSTEM_PYTHON):
        pytest.skip("no /usr/bin/python3")
    completed = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import pynvml"], capture_output=True, timeout=30, check=False
    )
    assert completed.returncode != 0, "the bundle test below would not prove pynvml is shipped"


@pytest.mark.parametrize("python", INTERPRETERS)
def test_once_reports_exactly_the_simulated_values(python: str, sim_host: SimHost) -> None:
    scenario = sim.mixed(4, host="gpu-a")
    scenario.gpus[1].ecc_errors_corrected = 7
    scenario.gpus[1].retired_pages_pending = True
    scenario.gpus[2].performance_state = 2
    _, env = sim_host(scenario)
    report = run_once(python, env)
    assert report.method == "nvml"
    assert report.gpu_reason is None
    assert report.warnings == ()
    expected = tuple(expected_gpu(index, gpu) for index, gpu in enumerate(scenario.gpus))
    assert report.gpus == expected
    assert report.host.driver_version == "550.54.15"
    assert report.host.cuda_driver_version == "12.4"
    assert report.host.nvml_version == "12.550.54.15"
    version = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    assert report.host.python_version == version
    host = report.host
    assert host.hostname == os.uname().nodename
    assert host.kernel == os.uname().release
    assert host.cpu_count == os.cpu_count()
    assert host.memory_total_bytes and host.memory_available_bytes
    assert 0 < host.memory_available_bytes <= host.memory_total_bytes
    assert host.cpu_busy_pct is not None and 0 <= host.cpu_busy_pct <= 100
    assert host.disk_root_total_bytes and host.disk_root_free_bytes is not None
    assert host.net_rx_bytes is not None and host.load_1m is not None


def test_lost_gpu_is_flagged_and_the_others_still_reported(sim_host: SimHost) -> None:
    scenario = sim.gpu_lost(4, lost_index=2)
    _, env = sim_host(scenario)
    report = run_once(VENV_PYTHON, env)
    assert [gpu.lost for gpu in report.gpus] == [False, False, True, False]
    lost = report.gpus[2]
    assert lost.error is not None and "GPU is lost" in lost.error
    assert lost.temperature_c is None
    for index in (0, 1, 3):
        assert report.gpus[index] == expected_gpu(index, scenario.gpus[index])


def test_not_supported_field_is_null_without_a_warning(sim_host: SimHost) -> None:
    _, env = sim_host(sim.fan_not_supported(2))
    report = run_once(SYSTEM_PYTHON if os.path.exists(SYSTEM_PYTHON) else VENV_PYTHON, env)
    assert [gpu.fan_speed_pct for gpu in report.gpus] == [None, None]
    assert all(gpu.temperature_c is not None for gpu in report.gpus)
    assert report.warnings == ()


def test_other_nvml_errors_are_null_with_a_warning_naming_gpu_and_call(sim_host: SimHost) -> None:
    scenario = sim.idle(3)
    scenario.gpus[1].errors["nvmlDeviceGetTemperature"] = 999  # NVML_ERROR_UNKNOWN
    scenario.gpus[1].errors["nvmlDeviceGetComputeRunningProcesses_v3"] = 4  # NO_PERMISSION
    _, env = sim_host(scenario)
    report = run_once(VENV_PYTHON, env)
    assert report.gpus[1].temperature_c is None
    assert report.gpus[1].power_draw_w == scenario.gpus[1].power_draw_w
    assert report.gpus[0].temperature_c == scenario.gpus[0].temperature_c
    assert report.warnings == (
        "gpu 1: nvmlDeviceGetTemperature: Unknown Error (NVML code 999)",
        "gpu 1: nvmlDeviceGetComputeRunningProcesses_v3: Insufficient Permissions (NVML code 4)",
    )


def test_memory_falls_back_to_v1_when_v2_is_missing(sim_host: SimHost) -> None:
    scenario = sim.busy(1)
    scenario.gpus[0].errors["nvmlDeviceGetMemoryInfo_v2"] = 13  # FUNCTION_NOT_FOUND
    _, env = sim_host(scenario)
    report = run_once(VENV_PYTHON, env)
    assert report.gpus[0].memory_total_bytes == scenario.gpus[0].memory_total_bytes
    assert report.gpus[0].memory_used_bytes == scenario.gpus[0].memory_used_bytes
    assert report.warnings == ()


def test_failing_handle_marks_only_that_gpu_lost(sim_host: SimHost) -> None:
    scenario = sim.idle(2)
    scenario.gpus[0].errors["nvmlDeviceGetHandleByIndex_v2"] = 999
    _, env = sim_host(scenario)
    report = run_once(VENV_PYTHON, env)
    assert report.gpus[0].lost is True
    assert report.gpus[0].error == "nvmlDeviceGetHandleByIndex: Unknown Error (NVML code 999)"
    assert report.gpus[1] == expected_gpu(1, scenario.gpus[1])


def test_ecc_errors_and_retired_pages(sim_host: SimHost) -> None:
    _, env = sim_host(sim.ecc_errors(2, bad_index=1, corrected=1234, uncorrected=2))
    report = run_once(VENV_PYTHON, env)
    bad = report.gpus[1]
    assert (bad.ecc_errors_corrected, bad.ecc_errors_uncorrected) == (1234, 2)
    assert bad.retired_pages_pending is True
    assert report.gpus[0].retired_pages_pending is False


def test_process_names_owners_and_sessions_come_from_proc(sim_host: SimHost) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        scenario = sim.idle(1)
        scenario.gpus[0].processes = [(sleeper.pid, 1 << 30), (2**22 + 12345, 1 << 20)]
        _, env = sim_host(scenario)
        report = run_once(VENV_PYTHON, env)
        session = os.getsid(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)
    assert report.gpus[0].processes == (
        ProcessInfo(sleeper.pid, 1 << 30, "sleep", uid=os.getuid(),
                    user=pwd.getpwuid(os.getuid()).pw_name, session=session),
        ProcessInfo(2**22 + 12345, 1 << 20, None),  # no such pid: owner unknown, still listed
    )


def test_no_driver_gives_zero_gpus_with_a_reason_and_host_facts(sim_host: SimHost) -> None:
    _, env = sim_host(sim.no_driver())
    report = run_once(VENV_PYTHON, env)
    assert report.gpus == ()
    assert report.gpu_reason == "NVML could not be initialised: Driver Not Loaded (NVML code 9)"
    assert report.host.hostname and report.host.memory_total_bytes
    assert report.host.driver_version is None


@pytest.mark.parametrize("python", INTERPRETERS)
def test_no_library_gives_zero_gpus_with_a_reason(python: str, tmp_path: Path) -> None:
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    report = run_once(python, env)
    assert report.gpus == ()
    assert report.gpu_reason == (
        "NVML could not be initialised: NVML Shared Library Not Found (NVML code 12)"
    )
    assert report.host.cpu_count == os.cpu_count()


def test_missing_tasks_dir_uses_its_nearest_existing_parent(sim_host: SimHost) -> None:
    _, env = sim_host(sim.idle(1))
    report = run_once(VENV_PYTHON, env, tasks_dir="/proc/no/such/dir")
    proc_stats = os.statvfs("/proc")
    assert report.host.disk_tasks_total_bytes == proc_stats.f_blocks * proc_stats.f_frsize
    assert report.host.disk_tasks_total_bytes != report.host.disk_root_total_bytes
    root = os.statvfs("/")
    assert report.host.disk_root_total_bytes == root.f_blocks * root.f_frsize


@pytest.mark.parametrize(
    ("argv", "once", "interval", "max_samples", "tasks_dir"),
    [
        (["--once"], True, None, None, "~/.fleet/tasks"),
        (["--interval", "1.5", "--max-samples", "3", "--tasks-dir", "/x"], False, 1.5, 3, "/x"),
        (["--interval=2", "--tasks-dir=/t d"], False, 2.0, None, "/t d"),
    ],
)
def test_probe_arguments_are_parsed(
    argv: list[str], once: bool, interval: float | None, max_samples: int | None, tasks_dir: str
) -> None:
    from fleet.probe.remote import parse_args

    args = parse_args(argv)
    assert (args.once, args.interval, args.max_samples, args.tasks_dir) == (
        once,
        interval,
        max_samples,
        tasks_dir,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "exactly one of the arguments --once --interval is required"),
        (["--once", "--interval", "1"], "exactly one of the arguments --once --interval"),
        (["--interval", "0"], "--interval must be > 0"),
        (["--interval", "soon"], "argument --interval: invalid float value: 'soon'"),
        (["--once", "--max-samples", "0"], "--max-samples must be >= 1"),
        (["--once", "--verbose"], "unrecognized arguments: --verbose"),
        (["--interval"], "argument --interval: expected one argument"),
    ],
)
def test_bad_probe_arguments_exit_2_with_usage(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleet.probe.remote import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: fleet-probe (--once | --interval INTERVAL)")
    assert f"fleet-probe: error: {message}" in err


def test_probe_program_imports_only_what_it_needs(tmp_path: Path) -> None:
    """argparse, socket, importlib.util, ctypes.util (subprocess, shutil, tempfile), json
    (its decoder's regular expressions), hashlib (OpenSSL) and signal (its enum classes; the
    probe uses the C module _signal) each cost a host up to milliseconds per probe; the shipped
    program, run as probe_command runs it, imports none of them."""
    from fleet.probe.bundle import BOOTSTRAP

    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), LD_LIBRARY_PATH=str(tmp_path))
    completed = subprocess.run(
        [
            SYSTEM_PYTHON if os.path.exists(SYSTEM_PYTHON) else VENV_PYTHON,
            "-S",
            "-X",
            "importtime",
            "-c",
            BOOTSTRAP,
        ],
        input=probe_program("once", None),
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    )
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in completed.stderr.decode().splitlines()
        if line.startswith("import ")
    }
    assert {"ctypes", "_json", "threading"} <= imported  # the listing is real
    assert not imported & {
        "argparse",
        "socket",
        "importlib.util",
        "ctypes.util",
        "subprocess",
        "shutil",
        "tempfile",
        "json",
        "hashlib",
        "signal",
    }


def test_bootstrap_runs_the_program_without_the_compile_builtin() -> None:
    """The compile builtin builds CPython's AST classes on its first call (about 7 M
    instructions, a tenth of a probe, measured by tests.bench.probe_instructions); exec of the
    program's bytes parses it without them. Compile runs on a host only for a code-cache miss."""
    from fleet.probe.bundle import BOOTSTRAP

    assert "compile(" not in BOOTSTRAP
    assert BOOTSTRAP.endswith("exec(d[:i])")
