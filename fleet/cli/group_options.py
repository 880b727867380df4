"""`fleet dispatch` options for more than one task per submission: gangs and arrays."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from fleet.dispatch.request import DispatchRequest

F = TypeVar("F", bound=Callable[..., Any])

GROUP_OPTION_NAMES = ("nodes", "gpus_per_node", "same", "hostfile", "array", "array_values",
                      "force")


def group_options(command: F) -> F:
    """Add --nodes, --gpus-per-node, --same, --hostfile, --array, --array-values, --force."""
    options = [
        click.option("--nodes", type=click.IntRange(1, 4096), metavar="N",
                     help="Run on N hosts at once (a gang): all GPUs claimed together, "
                          "rendezvous variables set, one node failing stops them all."),
        click.option("--gpus-per-node", type=click.IntRange(1, 1024), metavar="K",
                     help="With --nodes: GPUs on each node [default: --gpus]."),
        click.option("--same", metavar="LABEL",
                     help="With --nodes: every node shares one value of this host label "
                          "(e.g. rack)."),
        click.option("--hostfile", metavar="PATH",
                     help="With --nodes: where the MPI/DeepSpeed hostfile goes, relative to "
                          "the task directory (FLEET_HOSTFILE) [default: hostfile]."),
        click.option("--array", metavar="A-B[:STEP][%MAX]",
                     help="Run the script once per index (also 1,3,5-9), at most MAX at once; "
                          "{index} and --array-values keys fill {key} in the arguments."),
        click.option("--array-values", type=click.Path(path_type=Path, dir_okay=False,
                                                       exists=True), metavar="FILE",
                     help="With --array: one line of key=value pairs per index, in order."),
        click.option("--force", is_flag=True,
                     help="With --array: allow more than 10,000 members."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def with_group(request: DispatchRequest, values: dict[str, Any]) -> DispatchRequest:
    """The request as a gang (placement.nodes, gpus per node, --same, hostfile); ConfigError
    for group options that do not go together."""
    from fleet.errors import ConfigError

    nodes = values.get("nodes")
    gang_only = [name for name in ("gpus_per_node", "same", "hostfile")
                 if values.get(name) is not None]
    if nodes is None:
        if gang_only:
            raise ConfigError(f"--{gang_only[0].replace('_', '-')} needs --nodes")
        return request
    if values.get("array") is not None:
        raise ConfigError("--nodes and --array do not go together: submit an array of "
                          "single-host tasks, or one gang")
    per_node = values.get("gpus_per_node") or request.placement.gpus
    placement = replace(request.placement, nodes=nodes, gpus=per_node, same=values.get("same"))
    return replace(request, placement=placement, hostfile=values.get("hostfile") or "hostfile")
