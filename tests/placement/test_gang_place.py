"""Gang placement (pure): N hosts with K GPUs each, --same LABEL, exclusions, the request's form."""

from __future__ import annotations

import json
import random

import pytest

from fleet.errors import ConfigError
from fleet.placement.place import place
from fleet.placement.request import PlacementRequest
from fleet.render.explain import explain_to_json, render_explain
from fleet.snapshot import AllocationInfo
from tests.placement.builders import NOW, fleet, gpu, host


def _four_hosts() -> list:
    return [host("a", labels=(("rack", "r1"),)), host("b", labels=(("rack", "r2"),)),
            host("c", labels=(("rack", "r1"),)), host("d")]


def test_a_gang_takes_k_gpus_on_each_of_n_distinct_hosts_best_first() -> None:
    hosts = _four_hosts()
    gpus = [gpu(name, i, utilization_pct=util) for name, util in
            (("a", 50.0), ("b", 0.0), ("c", 10.0), ("d", 90.0)) for i in range(2)]
    result = place(PlacementRequest(gpus=2, nodes=2), fleet(*hosts, gpus=gpus), {}, NOW)
    assert [(node.host, node.gpu_indices) for node in result.nodes] == [("b", (0, 1)),
                                                                        ("c", (0, 1))]
    assert result.host == "b" and result.gpu_indices == (0, 1)
    assert sum(item.chosen for item in result.scored) == 4
    assert "placed on b GPU 0,1; c GPU 0,1" in result.summary()


def test_a_host_with_too_few_free_gpus_is_excluded_per_node() -> None:
    hosts = [host("a"), host("b"), host("c")]
    gpus = [gpu(name, i) for name in ("a", "b", "c") for i in range(2)]
    taken = {("a", 1): AllocationInfo(allocation_id=1, kind="task", owner="ann", task_id=7)}
    result = place(PlacementRequest(gpus=2, nodes=2), fleet(*hosts, gpus=gpus), taken, NOW)
    assert [node.host for node in result.nodes] == ["b", "c"]
    assert any(exclusion.host == "a" and "per node" in " ".join(exclusion.reasons)
               for exclusion in result.exclusions)


def test_a_gang_that_cannot_be_met_places_nothing_and_says_why() -> None:
    hosts = [host("a"), host("b")]
    gpus = [gpu("a", 0), gpu("a", 1), gpu("b", 0)]
    result = place(PlacementRequest(gpus=2, nodes=2), fleet(*hosts, gpus=gpus), {}, NOW)
    assert result.host is None and result.nodes == () and not any(
        item.chosen for item in result.scored)
    assert result.summary().startswith("no 2 hosts have 2 free GPUs each")
    assert "only 1 eligible GPU on this host, 2 needed on one host per node" in \
        render_explain(result)


def test_same_label_keeps_every_node_on_one_value() -> None:
    hosts = _four_hosts()
    # b (rack r2) is the best host, but r2 has only one host: the gang goes to r1.
    gpus = [gpu(name, 0, utilization_pct=util) for name, util in
            (("a", 30.0), ("b", 0.0), ("c", 20.0), ("d", 0.0))]
    result = place(PlacementRequest(nodes=2, same="rack"), fleet(*hosts, gpus=gpus), {}, NOW)
    assert [node.host for node in result.nodes] == ["c", "a"]
    reasons = {exclusion.host: " ".join(exclusion.reasons) for exclusion in result.exclusions}
    assert "no label 'rack'" in reasons["d"]
    assert "rack=r2: only 1 of the 2 hosts needed" in reasons["b"]
    nothing = place(PlacementRequest(nodes=3, same="rack"), fleet(*hosts, gpus=gpus), {}, NOW)
    assert nothing.host is None and "sharing one rack label value" in nothing.summary()


def test_random_ties_still_give_n_distinct_hosts() -> None:
    hosts = [host(name) for name in "abcdef"]
    gpus = [gpu(name, 0) for name in "abcdef"]
    seen = set()
    for seed in range(20):
        result = place(PlacementRequest(nodes=3), fleet(*hosts, gpus=gpus), {}, NOW,
                       rng=random.Random(seed))
        names = [node.host for node in result.nodes]
        assert len(set(names)) == 3
        seen.add(tuple(sorted(names)))
    assert len(seen) > 1  # racers spread out


def test_the_gang_shape_survives_storage_and_bad_shapes_are_refused() -> None:
    request = PlacementRequest(gpus=2, nodes=4, same="switch")
    assert PlacementRequest.from_dict(json.loads(json.dumps(request.to_dict()))) == request
    assert request.total_gpus == 8
    with pytest.raises(ConfigError, match="--nodes"):
        PlacementRequest(nodes=0)
    with pytest.raises(ConfigError, match="--same"):
        PlacementRequest(nodes=2, same=" ")


def test_explain_json_lists_every_node_with_its_rank() -> None:
    hosts = [host("a"), host("b")]
    result = place(PlacementRequest(nodes=2), fleet(*hosts, gpus=[gpu("a", 0), gpu("b", 0)]),
                   {}, NOW)
    data = explain_to_json(result)
    assert [(node["rank"], node["host"]) for node in data["nodes"]] == [(0, "a"), (1, "b")]
    single = explain_to_json(place(PlacementRequest(), fleet(host("a"), gpus=[gpu("a", 0)]),
                                   {}, NOW))
    assert [node["host"] for node in single["nodes"]] == ["a"]
