"""`fleet reserve --explain` through `fleet serve` explains as local mode does: the same text,
the same `placement` field in --json, and, when nothing fits (exit 7), the same reasons."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from fleet.placement.claim import Claim
from fleet.placement.place import Exclusion, NodePlacement, PlacementResult, ScoredGpu, place
from fleet.placement.request import MemorySize, PlacementRequest
from fleet.render.explain import explain_to_json, render_explain
from fleet.snapshot import AllocationInfo
from fleet.wire import allocations
from fleet.wire.codec import decode, encode
from tests.placement.builders import GIB, NOW, fleet, gpu, host
from tests.server.conftest import ServeLab, ServeLabFactory, ServerProcess

LOCAL = {"FLEET_SERVER": "local"}
# The one legitimate difference: where placement read the GPUs. The server places on its
# monitor's live snapshot ("monitor"); a local CLI reads the stored samples ("database", or
# "probe" when they were stale). The readings themselves (simulated, idle GPUs) are the same.
SOURCE = re.compile(r"; data from (monitor|database|probe)$", re.MULTILINE)


def _placed(request: PlacementRequest) -> PlacementResult:
    """A placement with every part filled in: scores whose factors are not in sorted order,
    a GPU held by a reservation, a drained GPU, a host excluded by label."""
    held = AllocationInfo(4, "reservation", "ann", note="debugging", expires_at=2_000_000)
    candidates = fleet(
        host("a", labels=(("rack", "b"),)), host("b", labels=(("rack", "b"),)),
        host("c", labels=(("rack", "z"),)),
        gpus=[gpu("a", 0), gpu("a", 1, utilization_pct=12.5, temperature_c=41.0),
              gpu("a", 2, allocation=held), gpu("b", 0, recent_util_avg=3.25,
                                                 recent_memory_peak_bytes=GIB),
              gpu("b", 1, drained=True, drain_reason="fan"), gpu("b", 2), gpu("c", 0)])
    return place(request, candidates, {}, NOW)


def _claim(result: PlacementResult) -> Claim:
    return Claim(host=result.host or "a", gpu_indices=result.gpu_indices,
                 gpu_uuids=tuple(g.uuid for g in result.gpus), allocation_ids=(7, 8),
                 kind="reservation", owner="ann", note="why", created_at=int(NOW),
                 expires_at=int(NOW) + 60, placement=result, attempts=2)


@pytest.mark.parametrize("request_", [
    PlacementRequest(gpus=2, labels=(("rack", "b"),), min_free_memory=MemorySize(fraction=0.5)),
    PlacementRequest(gpus=1, nodes=2, same="rack"),
    PlacementRequest(gpus=3, max_util=5.0),  # nothing fits
])
def test_a_claim_keeps_its_placement_on_the_wire(request_: PlacementRequest) -> None:
    """What the server sends back is the claim the service made, placement included, so the
    client renders the explanation (text and JSON) from the same data as local mode."""
    claim = _claim(_placed(request_))
    assert claim.placement is not None and claim.placement.scored
    back = allocations.claim_from_wire(decode(encode(allocations.claim_to_wire(claim)),
                                              allocations.ClaimWire))
    assert back == claim
    assert back.placement is not None
    assert [list(item.factors) for item in back.placement.scored] == \
        [list(item.factors) for item in claim.placement.scored]  # the policy's order, not sorted
    assert render_explain(back.placement) == render_explain(claim.placement)
    assert explain_to_json(back.placement) == explain_to_json(claim.placement)


def test_a_claim_without_placement_stays_without() -> None:
    claim = dataclasses.replace(_claim(_placed(PlacementRequest())), placement=None)
    assert allocations.claim_from_wire(decode(encode(allocations.claim_to_wire(claim)),
                                              allocations.ClaimWire)) == claim


def test_wire_structs_name_every_placement_field() -> None:
    """A field added to a placement dataclass must reach its wire struct."""
    from fleet.placement.candidates import GpuCandidate

    for engine, wire in ((Claim, allocations.ClaimWire),
                         (PlacementResult, allocations.PlacementResultWire),
                         (ScoredGpu, allocations.ScoredGpuWire),
                         (Exclusion, allocations.ExclusionWire),
                         (NodePlacement, allocations.NodePlacementWire),
                         (GpuCandidate, allocations.GpuCandidateWire)):
        assert set(wire.__struct_fields__) == {f.name for f in dataclasses.fields(engine)}, \
            engine


def _modes(server: ServerProcess) -> tuple[tuple[tuple[str, ...], dict[str, str] | None], ...]:
    """(CLI arguments, environment) for local mode, then through the server."""
    return (((), LOCAL), (("--server", str(server.socket_path)), None))


def _explanation(stdout: str) -> str:
    """What `reserve --explain` printed before its `reserved ...` lines, source unnamed."""
    text, found, _rest = ("\n" + stdout).partition("\nreserved ")
    assert found, stdout
    return SOURCE.sub("; data from <source>", text[1:])


def _placement(document: dict[str, Any]) -> dict[str, Any]:
    """The --json `placement` field less what differs by moment or source: where the GPUs
    were read and when placement ran."""
    placement = dict(document["placement"])
    assert placement.pop("source") in {"monitor", "database", "probe"}
    assert isinstance(placement.pop("placed_at"), float)
    return placement


def _claim_fields(document: dict[str, Any]) -> dict[str, Any]:
    """The --json claim less what each reservation makes anew (its ids and moment)."""
    return {key: value for key, value in document.items()
            if key not in {"allocation_ids", "created_at", "placement"}}


async def _release(lab: ServeLab, args: tuple[str, ...], env: dict[str, str] | None,
                   ids: list[int]) -> None:
    released = await lab.run(*args, "release", *map(str, ids), env=env)
    assert released.returncode == 0, released.stderr


async def test_reserve_explain_through_the_server_equals_local(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2, 1)
    server = await lab.serve()
    texts: list[str] = []
    documents: list[dict[str, Any]] = []
    for args, env in _modes(server):
        shown = await lab.run(*args, "reserve", "--explain", "--gpus", "1", "--note", "x",
                              env=env)
        assert shown.returncode == 0, shown.stderr
        texts.append(_explanation(shown.stdout))
        ids = [int(word) for word in shown.stdout.split("release with: fleet release ")[1]
               .splitlines()[0].split()]
        await _release(lab, args, env, ids)
        as_json = await lab.run(*args, "--json", "reserve", "--explain", "--gpus", "1",
                                "--note", "x", env=env)
        assert as_json.returncode == 0, as_json.stderr
        documents.append(as_json.json())
        await _release(lab, args, env, documents[-1]["allocation_ids"])
    # The two placements ran at different moments on the simulated GPUs' live readings
    # (temperatures move), so their numbers, and with close scores the chosen GPU, may
    # differ: the same explanation means the same text and data but for the numbers.
    local_text, remote_text = texts
    assert "Eligible GPUs, best first (* = chosen):" in local_text
    assert local_text.startswith("placed on gpu")
    assert _numbers_masked(remote_text) == _numbers_masked(local_text)
    local_doc, remote_doc = documents
    assert local_doc["placement"]["candidates"], local_doc
    assert "placement" in remote_doc, remote_doc
    assert _numbers_masked(_placement(remote_doc)) == _numbers_masked(_placement(local_doc))
    assert list(remote_doc["placement"]) == list(local_doc["placement"])  # same field order
    assert [list(c["factors"]) for c in remote_doc["placement"]["candidates"]] == \
        [list(c["factors"]) for c in local_doc["placement"]["candidates"]]
    assert _numbers_masked(_claim_fields(remote_doc)) == \
        _numbers_masked(_claim_fields(local_doc))


def _numbers_masked(value: Any) -> Any:
    """`value` with every number (and digit run in text) as "#", text's spaces collapsed."""
    if isinstance(value, dict):
        return {key: _numbers_masked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbers_masked(item) for item in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return "#"
    return re.sub(r" +", " ", re.sub(r"\d+(\.\d+)?", "#", str(value)))


async def test_reserve_explain_when_nothing_fits_says_the_same_per_gpu(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2, 1)
    server = await lab.serve()
    drained = await lab.run("--server", str(server.socket_path), "drain", "gpu1:1",
                            "--reason", "fan")
    assert drained.returncode == 0, drained.stderr
    held = await lab.run("--server", str(server.socket_path), "--json", "reserve",
                         "--hosts", "gpu2", "--gpus", "1")
    assert held.returncode == 0, held.stderr
    (held_id,) = held.json()["allocation_ids"]
    outputs: list[tuple[int, str, str]] = []
    for args, env in _modes(server):
        for json_flag in ((), ("--json",)):
            failed = await lab.run(*args, *json_flag, "reserve", "--explain", "--gpus", "2",
                                   env=env)
            outputs.append((failed.returncode, failed.stdout,
                            SOURCE.sub("; data from <source>", failed.stderr)))
    local, local_json, remote, remote_json = outputs
    assert local[0] == 7, local
    assert local[2].startswith("no host has 2 free GPUs matching the request"), local
    for line in ("gpu1    -  only 1 eligible GPU on this host, 2 needed on one host",
                 "gpu1    1  GPU drained: fan",
                 f"gpu2    0  reserved by {held.json()['owner']} (allocation {held_id})"):
        assert line in local[2], (line, local[2])
    assert remote == local
    assert local_json == local  # --json changes nothing here: the reasons are on stderr
    assert remote_json == local_json
