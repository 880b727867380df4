"""The trimmed pynvml the probe ships: its own unmodified text, and the same output as the whole."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet.probe import bundle
from fleet.probe.bundle import (
    REMOTE_SOURCE_PATH,
    encode_program,
    full_pynvml_source,
    payload_source,
    probe_arguments,
    probe_command,
    shipped_pynvml_source,
)
from fleet.probe.trim import names_used_by_probe, trim_module
from fleet.sim import scenarios
from fleet.sim.config import SimHostGpus

SimHost = Callable[..., tuple[Path, dict[str, str]]]

# Host facts that change between two runs whatever pynvml does (time, load, free space, traffic).
VOLATILE_HOST_FIELDS = (
    "cpu_busy_pct",
    "load_1m",
    "load_5m",
    "load_15m",
    "memory_available_bytes",
    "disk_root_free_bytes",
    "disk_tasks_free_bytes",
    "net_rx_bytes",
    "net_tx_bytes",
)

# Every scenario fleet.sim.scenarios defines, with the arguments to build it.
SCENARIOS: dict[str, Callable[[], SimHostGpus]] = {
    "idle": lambda: scenarios.idle(2),
    "busy": lambda: scenarios.busy(3, model="NVIDIA H100 80GB HBM3"),
    "mixed": lambda: scenarios.mixed(8),
    "gpu_lost": lambda: scenarios.gpu_lost(4, lost_index=2),
    "hot_gpu": lambda: scenarios.hot_gpu(3, hot_index=1),
    "no_driver": scenarios.no_driver,
    "ecc_errors": lambda: scenarios.ecc_errors(2, bad_index=1),
    "fan_not_supported": lambda: scenarios.fan_not_supported(2),
    "old_driver": lambda: scenarios.old_driver(2),
}

# The NVML device functions the probe reaches, each of which the simulated library can fail.
DEVICE_FUNCTIONS = (
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetComputeRunningProcesses_v3",
)
# NVML return codes injected on every device function: NotSupported, NoPermission,
# FunctionNotFound, GpuIsLost, NoData (quiet by class name, absent from pynvml's message table,
# so only its generated error class makes it quiet) and Unknown.
INJECTED_CODES = {
    "not_supported": 3,
    "no_permission": 4,
    "function_not_found": 13,
    "gpu_is_lost": 15,
    "no_data": 21,
    "unknown": 999,
}


def _injected(code: int) -> SimHostGpus:
    """One busy GPU per device function, that function failing with `code` on it."""
    host = scenarios.busy(len(DEVICE_FUNCTIONS))
    for gpu, function in zip(host.gpus, DEVICE_FUNCTIONS, strict=True):
        gpu.errors[function] = code
    return host


def _init_failure() -> SimHostGpus:
    host = scenarios.idle(1)
    host.init_error = 999
    return host


CASES: dict[str, Callable[[], SimHostGpus]] = {
    **SCENARIOS,
    **{
        f"injected_{name}": (lambda code=code: _injected(code))
        for name, code in INJECTED_CODES.items()
    },
    "init_unknown_error": _init_failure,
}


def _comparable(line: bytes) -> dict[str, Any]:
    sample: dict[str, Any] = json.loads(line)
    del sample["ts"]
    for name in VOLATILE_HOST_FIELDS:
        del sample["host"][name]
    return sample


def _run(
    pynvml_source: str, arguments: list[str], env: dict[str, str], python: str = sys.executable
) -> list[dict[str, Any]]:
    """Run the probe as SSH does: stdin stays open after the program, since a stream ends at EOF."""
    program = encode_program(payload_source(arguments, pynvml_source))
    with (
        tempfile.TemporaryFile() as stderr,
        subprocess.Popen(
            probe_command(python),
            shell=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
        ) as process,
    ):
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(program)
        process.stdin.flush()
        timer = threading.Timer(60, process.kill)
        timer.start()
        try:
            output = process.stdout.read()  # until the probe exits on its own
        finally:
            timer.cancel()
            process.stdin.close()
        returncode = process.wait(timeout=60)
        stderr.seek(0)
        assert returncode == 0, stderr.read().decode()
    return [_comparable(line) for line in output.splitlines()]


@pytest.fixture(scope="module")
def sources() -> tuple[str, str]:
    """(whole pynvml, trimmed pynvml as shipped)."""
    return full_pynvml_source(), shipped_pynvml_source()


def test_every_simulated_scenario_is_compared() -> None:
    defined = {
        name
        for name, function in inspect.getmembers(scenarios, inspect.isfunction)
        if function.__module__ == scenarios.__name__
        and inspect.signature(function).return_annotation == "SimHostGpus"
    }
    assert defined == set(SCENARIOS)


@pytest.mark.parametrize("case", sorted(CASES))
def test_trimmed_and_whole_pynvml_give_the_same_output(
    case: str, sources: tuple[str, str], sim_host: SimHost, tmp_path: Path
) -> None:
    _, env = sim_host(CASES[case]())
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    arguments = probe_arguments("once", None, "~/.fleet/tasks")
    full, trimmed = sources
    whole_output = _run(full, arguments, env)
    trimmed_output = _run(trimmed, arguments, env)
    assert trimmed_output == whole_output
    assert len(whole_output) == 1


def test_injected_errors_really_reach_the_output(
    sim_host: SimHost, sources: tuple[str, str], tmp_path: Path
) -> None:
    _, env = sim_host(_injected(999))
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    (sample,) = _run(sources[1], probe_arguments("once", None, "~/.fleet/tasks"), env)
    assert sample["gpus"][0]["lost"] is True  # the handle itself failed
    assert sum("Unknown Error" in warning for warning in sample["warnings"]) >= 10


def test_errors_are_named_as_the_whole_bindings_error_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pynvml

    from fleet.probe import remote

    monkeypatch.setattr(remote, "pynvml", pynvml)  # the whole binding, with its error classes
    monkeypatch.setattr(remote, "_nvml_error_kinds", None)
    codes = {getattr(pynvml, name) for name in dir(pynvml) if name.startswith("NVML_ERROR_")}
    assert len(codes) > 20
    for code in sorted(codes | {12345}):  # and a code the binding does not list
        error = pynvml.NVMLError(code)
        assert remote._nvml_error_name(error) == type(error).__name__.replace("NVMLError_", "")
    assert remote._nvml_error_name(pynvml.NVMLError(15)) == "GpuIsLost"
    assert remote._nvml_error_name(pynvml.NVMLError(999)) == "Unknown"
    assert remote._nvml_error_name(pynvml.NVMLError(12345)) == "NVMLError"


@pytest.mark.parametrize(("code", "warned"), [(3, False), (21, False), (4, True)])
def test_quiet_errors_stay_quiet_in_the_shipped_probe(
    sim_host: SimHost, sources: tuple[str, str], tmp_path: Path, code: int, warned: bool
) -> None:
    _, env = sim_host(_injected(code))  # NotSupported, NoData: null; NoPermission: warned
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    (sample,) = _run(sources[1], probe_arguments("once", None, "~/.fleet/tasks"), env)
    device_warnings = [w for w in sample["warnings"] if "nvmlDeviceGet" in w]
    assert bool(device_warnings) is warned


def test_the_shipped_binding_leaves_the_error_class_factory_and_string_out(
    sources: tuple[str, str],
) -> None:
    full, trimmed = sources
    assert "_extractNVMLErrorsAsClasses()" in full and "import string" in full
    assert "_extractNVMLErrorsAsClasses" not in trimmed.split("def ")[0]
    kept = {line.strip() for line in trimmed.splitlines()}
    assert "_extractNVMLErrorsAsClasses()" not in kept and "import string" not in kept
    def code_names(source: str) -> set[str]:
        return {node.targets[0].id for node in ast.parse(source).body
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.startswith("NVML_ERROR_")}

    assert code_names(trimmed) == code_names(full)  # every code's name, to name errors by


def test_streaming_output_is_the_same_and_no_library_too(
    sim_host: SimHost, sources: tuple[str, str], tmp_path: Path
) -> None:
    _, env = sim_host(scenarios.mixed(4))
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    arguments = probe_arguments("stream", 0.05, "~/.fleet/tasks", max_samples=3)
    full, trimmed = sources
    streamed = _run(full, arguments, env)
    assert _run(trimmed, arguments, env) == streamed
    assert len(streamed) == 3
    no_library = dict(env, LD_LIBRARY_PATH=str(tmp_path))
    once = probe_arguments("once", None, "~/.fleet/tasks")
    (sample,) = _run(trimmed, once, no_library)
    assert sample["gpu_reason"].endswith("NVML Shared Library Not Found (NVML code 12)")
    assert [sample] == _run(full, once, no_library)


def test_system_python_gives_the_same_output(
    sim_host: SimHost, sources: tuple[str, str], tmp_path: Path
) -> None:
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("no /usr/bin/python3")
    _, env = sim_host(_injected(3))
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    arguments = probe_arguments("once", None, "~/.fleet/tasks")
    full, trimmed = sources
    assert _run(trimmed, arguments, env, "/usr/bin/python3") == _run(
        full, arguments, env, "/usr/bin/python3"
    )


def test_trimmed_module_is_the_bindings_own_statements_in_order(sources: tuple[str, str]) -> None:
    full, trimmed = sources
    whole = [ast.dump(node) for node in ast.parse(full).body]
    kept = [ast.dump(node) for node in ast.parse(trimmed, feature_version=(3, 6)).body]
    position = 0
    for statement in kept:  # a subsequence: nothing rewritten, reordered or added
        position = whole.index(statement, position) + 1
    lines = set(full.splitlines())
    assert all(line in lines for line in trimmed.splitlines() if line)
    assert len(trimmed) * 4 < len(full)
    assert "from ctypes.util import find_library" not in trimmed  # unused: it costs ~13 ms


def test_trimmed_module_defines_every_name_the_probe_uses(sources: tuple[str, str]) -> None:
    full, trimmed = sources
    defined_in_full = {name for node in ast.parse(full).body for name in _names(node)}
    defined = {name for node in ast.parse(trimmed).body for name in _names(node)}
    probe = "\n".join(path.read_text() for _, path in bundle.PROBE_MODULES)
    used = names_used_by_probe(probe) & defined_in_full
    assert "nvmlDeviceGetComputeRunningProcesses_v3" in used  # reached by getattr(pynvml, name)
    assert used <= defined


def _names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [target.id for target in node.targets if isinstance(target, ast.Name)]
    return []


def test_the_bundle_ships_the_trimmed_module_and_caches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = payload_source(["--once"])
    assert shipped_pynvml_source() in source
    assert full_pynvml_source() not in source
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    remote = REMOTE_SOURCE_PATH.read_text()
    first = bundle._trimmed_pynvml(full_pynvml_source(), remote)
    (cached,) = (tmp_path / "fleet" / "bundle").glob("pynvml-*.py")
    assert cached.read_text() == first and cached.stat().st_mode & 0o777 == 0o600
    cached.write_text(first + "\nimport os  # tampered\n")
    assert bundle._trimmed_pynvml(full_pynvml_source(), remote).endswith("# tampered\n")
    cached.chmod(0o666)  # writable by others: never shipped, trimmed again
    assert bundle._trimmed_pynvml(full_pynvml_source(), remote) == first


def test_a_cached_trimmed_module_spares_the_trimmer_and_its_key_follows_the_trimmer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = ("import sys; from fleet.probe.bundle import probe_program;"
             "probe_program('once', None); print('fleet.probe.trim' in sys.modules)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    imported = [subprocess.run([sys.executable, "-c", build], env=env, capture_output=True,
                               text=True, check=True, timeout=60).stdout.strip()
                for _ in range(2)]
    assert imported == ["True", "False"]  # trimmed once, then read from the cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    remote = REMOTE_SOURCE_PATH.read_text()
    cache = tmp_path / "fleet" / "bundle"
    trimmed = bundle._trimmed_pynvml(full_pynvml_source(), remote)
    before = set(cache.glob("pynvml-*.py"))
    changed = tmp_path / "trim.py"
    changed.write_text(bundle.TRIM_SOURCE_PATH.read_text() + "\n# a changed trimmer\n")
    monkeypatch.setattr(bundle, "TRIM_SOURCE_PATH", changed)
    assert bundle._trimmed_pynvml(full_pynvml_source(), remote) == trimmed
    assert len(set(cache.glob("pynvml-*.py")) - before) == 1  # a new key: trimmed again


SYNTHETIC = '''\
from ctypes import *
import os
import string
from functools import wraps
"""a bare string"""
A = 1; B = A
ERR_X = 5
ERR_Y = 6
UNUSED = 7
def deco(f):
    return wraps(f)(f)
@deco
def used(): return B + string.digits.count("1")
class Factory:
    def names(self): return [n for n in dir(os) if n.startswith("ERR_")]
def unused(): return UNUSED
Factory().names()
'''


def test_trim_leaves_skipped_calls_out_and_keeps_names_by_prefix() -> None:
    source = SYNTHETIC + "def factory(): return string.capwords('a')\nfactory()\n"
    trimmed = trim_module(source, {"used"})
    assert "factory()" in trimmed.splitlines()
    trimmed = trim_module(source, {"A"}, ("ERR_",), frozenset({"factory"}))
    kept = set(trimmed.splitlines())
    assert {"ERR_X = 5", "ERR_Y = 6", "A = 1; B = A"} <= kept
    assert not {"factory()", "def factory(): return string.capwords('a')"} & kept


def test_trim_keeps_the_closure_calls_and_prefix_lookups_only() -> None:
    trimmed = trim_module(SYNTHETIC, {"used"})
    kept = set(trimmed.splitlines())
    assert {
        "A = 1; B = A",
        "@deco",
        "ERR_X = 5",
        "ERR_Y = 6",
        "Factory().names()",
        "from ctypes import *",
        "import string",
        "import os",
    } <= kept
    assert not {"UNUSED = 7", "def unused(): return UNUSED", '"""a bare string"""'} & kept
