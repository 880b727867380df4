"""fleet.sim stays split by feature: small modules, and fleet.sim.gpus still exports every name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fleet.sim import gpus

SIM_DIR = Path(gpus.__file__).parent
MAX_MODULE_LINES = 400
# Names other code has always imported from fleet.sim.gpus.
HISTORIC_NAMES = (
    "MIB", "NVML_ERROR_NOT_SUPPORTED", "SimGpu", "SimHostGpus", "busy", "busy_gpu", "ecc_errors",
    "fan_not_supported", "gpu_lost", "gpu_uuid", "hot_gpu", "idle", "idle_gpu", "mixed",
    "no_driver", "old_driver", "parse_config", "read_config", "render_config", "write_config",
)


def _public_definitions(path: Path) -> set[str]:
    """Top-level functions, classes and assigned names of a module that do not start with _."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


@pytest.mark.parametrize("path", sorted(SIM_DIR.glob("*.py")), ids=lambda path: path.name)
def test_sim_modules_are_small_with_a_one_line_summary(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert len(source.splitlines()) < MAX_MODULE_LINES
    docstring = ast.get_docstring(ast.parse(source))
    assert docstring, f"{path.name} has no module docstring"
    assert "\n" not in docstring.split("\n\n", 1)[0], f"{path.name}: summary is not one line"


@pytest.mark.parametrize("feature", ["config", "scenarios"])
def test_gpus_re_exports_every_public_name_of_each_feature_module(feature: str) -> None:
    module = __import__(f"fleet.sim.{feature}", fromlist=["_"])
    for name in _public_definitions(SIM_DIR / f"{feature}.py"):
        assert name in gpus.__all__, name
        assert getattr(gpus, name) is getattr(module, name), name


def test_names_imported_from_gpus_before_the_split_still_are() -> None:
    assert set(HISTORIC_NAMES) <= set(gpus.__all__)
    for name in HISTORIC_NAMES:
        assert getattr(gpus, name) is not None
