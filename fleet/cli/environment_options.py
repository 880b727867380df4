"""--venv, --conda, --container and --snapshot of `fleet dispatch`, applied to a request."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from fleet.dispatch.request import DispatchRequest

F = TypeVar("F", bound=Callable[..., Any])

ENVIRONMENT_OPTION_NAMES = ("venv", "conda", "container", "snapshot")


def environment_options(command: F) -> F:
    """Add --venv, --conda, --container and --snapshot (keyword names as in
    ENVIRONMENT_OPTION_NAMES; apply them with `with_environment`)."""
    options = [
        click.option("--venv", metavar="PATH", help="Run inside this virtual environment on "
                     "the host (absolute, or ~/…): PATH/bin first on PATH, a .py with its python."),
        click.option("--conda", metavar="ENV", help="Run inside this conda environment on the "
                     "host (`conda run -n ENV`; a path with '/' is a prefix)."),
        click.option("--container", metavar="IMAGE", help="Run in this image with only the "
                     "task's GPUs: docker, else podman, else apptainer, as the host has."),
        click.option("--snapshot", is_flag=True, help="Send a copy of this git work tree "
                     "(tracked and untracked files .gitignore keeps), taken now; run in it."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def with_environment(ctx: click.Context, request: DispatchRequest,
                     values: dict[str, Any]) -> DispatchRequest:
    """`request` with the environment and snapshot the options ask for (ConfigError, exit 2,
    for conflicting or bad values). A snapshot's copy lives until the command ends."""
    from fleet.dispatch.environment import TaskEnvironment

    environment = TaskEnvironment.from_options(
        venv=values.get("venv"), conda=values.get("conda"), container=values.get("container"))
    request = replace(request, environment=environment)
    if not values.get("snapshot"):
        return request
    from fleet.dispatch.snapshot import take_snapshot

    holder = tempfile.TemporaryDirectory(prefix="fleet-snapshot-")
    ctx.call_on_close(holder.cleanup)
    return take_snapshot(request, Path.cwd(), Path(holder.name))
