"""The fan-out benchmark's host-CPU estimate: the least probe imports exactly what the shipped
pynvml and the bootstrap import (and runs), and the ratio spreads each host's extra CPU over
the cores."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from fleet.probe.bundle import BOOTSTRAP, shipped_pynvml_source
from tests.bench.bench_startup import _binding_imports, least_probe_statement
from tests.bench.common import HostProbeCpu


def test_the_least_probe_imports_the_bootstrap_and_every_module_the_binding_imports() -> None:
    source = shipped_pynvml_source()
    imported = _binding_imports(source)
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            assert {alias.name for alias in node.names} <= set(imported)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.module in imported
    bootstrap_modules = {alias.name for node in ast.walk(ast.parse(BOOTSTRAP))
                         if isinstance(node, ast.Import) for alias in node.names}
    assert bootstrap_modules <= set(imported)
    assert len(imported) == len(set(imported))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the hosts' interpreter flags")
def test_the_least_probe_statement_runs_under_python_dash_s() -> None:
    statement = least_probe_statement(shipped_pynvml_source())
    done = subprocess.run([sys.executable, "-S", "-c", statement + ";print('not reached')"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # it ends at os._exit, as the probe does


def test_the_ratio_estimate_spreads_each_hosts_extra_cpu_over_the_cores() -> None:
    cpu = HostProbeCpu(floor_command=0.001, binding_imports=0.017, probe=0.023)
    # 32 hosts × 16 ms over 2 cores = 0.256 s on a 0.64 s floor
    assert cpu.ratio_estimate(0.64, 32, 2, cpu.binding_imports) == pytest.approx(1.4)
    assert cpu.ratio_estimate(0.64, 32, 2, cpu.probe) == pytest.approx(1.55)
    # a probe no dearer than the floor's command adds nothing
    assert cpu.ratio_estimate(0.64, 32, 2, 0.0005) == pytest.approx(1.0)
