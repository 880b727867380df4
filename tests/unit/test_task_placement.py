"""Tasks are placed only on hosts they can run on: never on a `connection: local` host."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from fleet.dispatch.lifecycle import task_placement
from fleet.model import HostSpec
from fleet.placement.request import PlacementRequest


def _context(*specs: HostSpec) -> Any:
    return cast(Any, SimpleNamespace(inventory=SimpleNamespace(hosts=specs)))


def test_local_hosts_are_left_out_of_a_tasks_placement() -> None:
    context = _context(HostSpec(name="ctl", address="127.0.0.1", connection="local"),
                       HostSpec(name="gpu1", address="10.0.0.1"))
    placed = task_placement(context, PlacementRequest(gpus=2, exclude_hosts=frozenset({"x"})))
    assert placed.exclude_hosts == frozenset({"x", "ctl"}) and placed.gpus == 2


def test_without_local_hosts_the_request_is_unchanged() -> None:
    request = PlacementRequest(gpus=1)
    assert task_placement(_context(HostSpec(name="gpu1", address="10.0.0.1")), request) is request
