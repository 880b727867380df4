"""The probe's JSON lines: byte for byte what json.dumps gives, without importing json on hosts."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.probe import remote_cli as remote
from fleet.probe.bundle import probe_command, probe_program
from tests.unit.test_probe_trim import CASES, SimHost


def reference(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_encoder_gives_json_dumps_text(value: Any) -> None:
    assert remote.json_dumps(value) == reference(value)


def test_awkward_values_match_too() -> None:
    for value in ["é✓\x00\x1f\"\\/\u2028", -0.0, 1e-7, 1e22, 2**63, (1, 2), {"k": [True, None]}]:
        assert remote.json_dumps(value) == reference(value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, {"x": [math.nan]}])
def test_out_of_range_floats_are_refused_as_json_dumps_does(bad: Any) -> None:
    with pytest.raises(ValueError):
        remote.json_dumps(bad)


def test_other_objects_are_refused_as_json_dumps_does() -> None:
    with pytest.raises(TypeError, match="Path is not JSON serializable"):
        remote.json_dumps({"path": Path("/")})


def test_without_the_c_encoder_json_dumps_itself_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "_json", None)  # an interpreter without CPython's _json
    fallback = remote._json_encoder()
    assert fallback is not remote.json_dumps
    value = {"a": [1, 2.5, None, "é"], "b": {"c": False}}
    assert fallback(value) == reference(value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_probe_line_is_json_dumps_text(case: str, sim_host: SimHost,
                                             tmp_path: Path) -> None:
    """The shipped program on the simulated library, as hosts run it: each line it prints is
    exactly json.dumps of what it means."""
    _, env = sim_host(CASES[case]())
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    completed = subprocess.run(probe_command(sys.executable), shell=True, env=env,
                               input=probe_program("once", None), capture_output=True,
                               timeout=60, check=True)
    lines = completed.stdout.decode().splitlines()
    assert len(lines) == 1
    assert lines[0] == reference(json.loads(lines[0]))
