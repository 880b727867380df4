"""Placement options shared by `fleet reserve` and `fleet dispatch`, and the request they make."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from fleet.placement.request import PlacementRequest

F = TypeVar("F", bound=Callable[..., Any])

PLACEMENT_OPTION_NAMES = (
    "gpus", "hosts", "group", "labels", "gpu_model", "min_free_mem", "max_util", "max_temp",
    "allow_unmanaged", "policy",
)


def placement_options(command: F) -> F:
    """Add --gpus, --host(s), --group, --label, --gpu-model, --min-free-mem, --max-util,
    --max-temp, --allow-unmanaged and --policy to a click command (keyword names as in
    PLACEMENT_OPTION_NAMES; turn them into a request with `request_from_options`)."""
    options = [
        click.option("--gpus", "-g", default=1, show_default=True, type=click.IntRange(1, 1024),
                     help="GPUs needed, all on one host."),
        click.option("--hosts", "--host", "hosts", metavar="PATTERN",
                     help="Only these hosts: names/globs, @group, label:key=value, !name."),
        click.option("--group", metavar="GLOB", help="Only hosts in a matching group."),
        click.option("--label", "labels", metavar="KEY=VALUE", multiple=True,
                     help="Only hosts whose label KEY matches VALUE (a glob); repeatable."),
        click.option("--gpu-model", metavar="GLOB",
                     help="Only GPUs whose model matches (case-insensitive), e.g. '*A100*'."),
        click.option("--min-free-mem", metavar="SIZE",
                     help="Free memory each GPU needs: 20G, 512M, 1.5T, or 80% of the GPU."),
        click.option("--max-util", type=click.FloatRange(0, 100), metavar="PCT",
                     help="Only GPUs at most this busy now (percent)."),
        click.option("--max-temp", type=click.FloatRange(-50, 200), metavar="CELSIUS",
                     help="Only GPUs at most this hot now."),
        click.option("--allow-unmanaged", is_flag=True,
                     help="Count GPUs used by processes fleet did not start as free."),
        click.option("--policy", default="least-loaded", show_default=True, metavar="NAME",
                     help="least-loaded, pack, spread, or a Python function module:function."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def request_from_options(values: dict[str, Any]) -> PlacementRequest:
    """The PlacementRequest for the options `placement_options` added (ConfigError if invalid)."""
    from fleet.placement.request import PlacementRequest, parse_label, parse_memory_size

    memory = values.get("min_free_mem")
    return PlacementRequest(
        gpus=int(values.get("gpus") or 1),
        min_free_memory=None if memory is None else parse_memory_size(memory),
        max_util=values.get("max_util"),
        max_temp=values.get("max_temp"),
        hosts=values.get("hosts"),
        group=values.get("group"),
        labels=tuple(parse_label(text) for text in values.get("labels") or ()),
        gpu_model=values.get("gpu_model"),
        allow_unmanaged=bool(values.get("allow_unmanaged")),
        policy=values.get("policy") or "least-loaded",
    )
