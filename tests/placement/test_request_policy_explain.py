"""Memory sizes, request validation and round trip, custom policies, and the explain output."""

from __future__ import annotations

import json

import pytest

from fleet.errors import ConfigError
from fleet.inventory.select import host_matches
from fleet.placement.explain import explain_to_json, render_explain
from fleet.placement.place import place
from fleet.placement.request import (
    MemorySize,
    PlacementRequest,
    parse_label,
    parse_memory_size,
)
from fleet.placement.scoring.policies import PolicyError
from fleet.snapshot import AllocationInfo
from tests.placement.builders import GIB, NOW, fleet, gpu, host, two_idle_hosts

RULES = "tests.placement.policies_pkg.rules"


@pytest.mark.parametrize(("text", "expected"), [
    ("20G", MemorySize(bytes=20 * GIB)), ("20g", MemorySize(bytes=20 * GIB)),
    ("20GiB", MemorySize(bytes=20 * GIB)), ("20 GB", MemorySize(bytes=20 * GIB)),
    ("512M", MemorySize(bytes=512 << 20)), ("1.5T", MemorySize(bytes=int(1.5 * (1 << 40)))),
    ("4096", MemorySize(bytes=4096)), ("64K", MemorySize(bytes=65536)),
    ("80%", MemorySize(fraction=0.8)), (" 12.5 % ", MemorySize(fraction=0.125)),
])
def test_memory_sizes(text: str, expected: MemorySize) -> None:
    assert parse_memory_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "20X", "-5G", "20GG", "0%", "150%", "1e3"])
def test_bad_memory_sizes_name_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match="--min-free-mem"):
        parse_memory_size(text)


def test_fraction_needs_the_gpus_total() -> None:
    assert MemorySize(fraction=0.5).required_bytes(80 * GIB) == 40 * GIB
    assert MemorySize(fraction=0.5).required_bytes(None) is None
    assert str(MemorySize(fraction=0.8)) == "80%" and str(MemorySize(bytes=GIB)) == "1.0G"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"gpus": 0}, "--gpus must be a whole number"), ({"gpus": True}, "--gpus"),
    ({"max_util": 101}, "--max-util"), ({"max_temp": 500}, "--max-temp"),
    ({"policy": " "}, "--policy"), ({"max_sample_age_s": 0}, "sample age"),
])
def test_invalid_requests(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PlacementRequest(**kwargs)  # type: ignore[arg-type]


def test_request_round_trips_through_json() -> None:
    request = PlacementRequest(
        gpus=2, min_free_memory=MemorySize(fraction=0.5), max_util=10, max_temp=80,
        hosts="gpu*,!gpu3", group="lab", labels=(("rack", "b*"),), gpu_model="*A100*",
        allow_unmanaged=True, policy="pack", exclude_hosts=frozenset({"x"}), max_sample_age_s=9)
    assert PlacementRequest.from_dict(json.loads(json.dumps(request.to_dict()))) == request
    with pytest.raises(ConfigError, match="malformed placement request"):
        PlacementRequest.from_dict({"gpus": "many"})


def test_labels_and_host_patterns() -> None:
    assert parse_label("rack = b1") == ("rack", "b1")
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_label("rack")
    labels = (("rack", "b1"),)
    assert host_matches("gpu*", "gpu1", (), ())
    assert host_matches("@lab*", "x", ("lab2",), ())
    assert host_matches("lab", "x", ("lab",), ())
    assert host_matches("label:rack=b*", "x", (), labels)
    assert not host_matches("label:rack=a*", "x", (), labels)
    assert not host_matches("gpu*,!gpu1", "gpu1", (), ())
    assert host_matches("!gpu1", "gpu2", (), ())


def test_custom_policy_with_factors_sees_host_labels() -> None:
    candidates = fleet(host("a", labels=(("rack", "a"),)), host("b", labels=(("rack", "b"),)),
                       gpus=[gpu("a", 0), gpu("b", 0, temperature_c=70.0),
                             gpu("b", 1, temperature_c=40.0)])
    result = place(PlacementRequest(policy=f"{RULES}:prefer_rack_b"), candidates, {}, NOW)
    assert (result.host, result.gpu_indices) == ("b", (1,))
    assert result.scored[0].factors == {"rack_b": 10.0, "cool": -0.4}


def test_custom_policy_returning_a_number() -> None:
    result = place(PlacementRequest(policy=f"{RULES}:plain_number"), two_idle_hosts(3), {}, NOW)
    assert result.gpu_indices == (2,)
    assert result.scored[0].factors == {"score": 2.0}


@pytest.mark.parametrize(("policy", "message"), [
    (f"{RULES}:returns_text", f"policy {RULES}:returns_text on GPU a:0 returned str 'high'"),
    (f"{RULES}:returns_nan", "non-finite value for score"),
    (f"{RULES}:raises", f"policy {RULES}:raises on GPU a:0 raised KeyError: 'rack'"),
    (f"{RULES}:missing", f"module {RULES} has no function missing"),
    (f"{RULES}:NOT_CALLABLE", "has no function NOT_CALLABLE"),
    ("no_such_module_xyz:score", "cannot import module no_such_module_xyz"),
    ("fastest", "unknown policy 'fastest': use one of least-loaded, pack, spread"),
])
def test_bad_policies_are_clear_errors_naming_the_function(policy: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        place(PlacementRequest(policy=policy), two_idle_hosts(1), {}, NOW)
    assert message in str(caught.value)
    assert caught.value.exit_code == 2


def test_explain_lists_scores_per_factor_and_every_exclusion() -> None:
    candidates = fleet(host("a"), host("down", state="unreachable", reason="refused"),
                       gpus=[gpu("a", 0), gpu("a", 1, utilization_pct=60.0), gpu("a", 2),
                             gpu("down", 0)])
    result = place(PlacementRequest(max_util=50), candidates,
                   {("a", 2): AllocationInfo(4, "task", "ann", task_id=9)}, NOW)
    text = render_explain(result)
    lines = text.splitlines()
    assert lines[0] == "placed on a GPU 0 (policy least-loaded); data from database"
    header = next(line for line in lines if line.lstrip().startswith("HOST") and "SCORE" in line)
    for factor in ("idle", "calm", "free_mem", "mem_headroom", "cool"):
        assert factor in header
    chosen_row = next(line for line in lines if line.startswith("*"))
    assert chosen_row.split()[1:3] == ["a", "0"]
    assert "utilisation 60% > 50%" in text
    assert "allocated to task 9 (ann)" in text
    assert "host is unreachable (refused)" in text
    data = explain_to_json(result)
    assert json.loads(json.dumps(data)) == data
    assert data["placed"] and data["host"] == "a" and data["gpus"][0]["index"] == 0
    assert [c["index"] for c in data["candidates"]] == [0]
    assert data["candidates"][0]["factors"]["idle"] == pytest.approx(1.0)
    assert {(e["host"], e["index"]) for e in data["exclusions"]} == {
        ("down", None), ("a", 1), ("a", 2)}
