"""`fleet dispatch --array`: plan the members, record them, drive them, summarise the end."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fleet.cli.context import echo_json
from fleet.cli.task_output import say, write_output

if TYPE_CHECKING:
    from fleet.client.session import Service
    from fleet.dispatch.array import ArrayMember
    from fleet.dispatch.array_spec import ArraySpec
    from fleet.dispatch.request import DispatchRequest, StartedTask
    from fleet.records import TaskRow


@dataclass(frozen=True)
class ArrayPlan:
    """An array ready to record: its spec, the template request and every member's request."""

    spec: ArraySpec
    request: DispatchRequest
    members: list[ArrayMember]
    detach: bool = False  # --detach: only through fleet serve, which drives the array


def plan_array(request: DispatchRequest, values: dict[str, Any], *, detach: bool) -> ArrayPlan:
    """The array the options describe; ConfigError (exit 2) for bad input, before anything is
    recorded: a bad spec, a values file that does not fit, a placeholder without a value."""
    from fleet.dispatch.array import plan_members
    from fleet.dispatch.array_spec import parse_array, read_values

    spec = parse_array(str(values["array"]), force=bool(values.get("force")))
    path: Path | None = values.get("array_values")
    rows = read_values(path, spec.size) if path is not None else None
    return ArrayPlan(spec, request, plan_members(request, spec, rows, str(path or "")),
                     detach)


async def run_array_cli(service: Service, plan: ArrayPlan, *, as_json: bool,
                        lost_after_s: float) -> int:
    """Record and drive the array to its end; exit 0 only when every member succeeded."""
    from fleet.cli.signals import stop_on_signals

    def started(index: int, node: StartedTask) -> None:
        indices = ",".join(str(i) for i in node.gpu_indices)
        say(f"array index {index} (task {node.task_id}) started on {node.host.name} GPU "
            f"{indices}")

    def on_signal(count: int) -> None:
        say("cancelling the array…" if count == 1 else "already cancelling the array")

    async with stop_on_signals(on_signal) as stop:
        if service.remote:
            from fleet.client.remote import RemoteFleet

            assert isinstance(service, RemoteFleet)
            array_id, rows = await service.dispatch_array(
                plan.request, plan.spec, plan.members,
                on_output=lambda data: write_output(data, to_stderr=as_json), on_event=say,
                stop=stop, lost_after_s=lost_after_s, detach=plan.detach)
            if plan.detach:
                say(f"array {array_id}: {len(rows)} tasks, driven by fleet serve (fleet tasks, "
                    f"fleet cancel {array_id})")
                if as_json:
                    echo_json({"array_id": array_id, "tasks": [row.id for row in rows]})
                else:
                    click.echo(array_id)
                return 0
            return _report(array_id, rows, as_json)
        from fleet.service import Fleet

        assert isinstance(service, Fleet)
        array_id, rows = await service.dispatch_array(
            plan.request, plan.spec, plan.members,
            on_output=lambda data: write_output(data, to_stderr=as_json),
            on_event=say, on_started=started, on_recorded=lambda ids: say(
                f"array {ids[0]}: {len(ids)} tasks ({ids[0]}…{ids[-1]}), at most "
                f"{plan.spec.max_running or 'all'} at once"),
            stop=stop, lost_after_s=lost_after_s, detach=plan.detach)
    return _report(array_id, rows, as_json)


def _report(array_id: int, rows: list[TaskRow], as_json: bool) -> int:
    """The array's summary on stderr, its id (or every member as JSON); its exit code."""
    from fleet.dispatch.array import array_summary

    text, code = array_summary(rows)
    say(f"array {array_id}: {text}")
    if as_json:
        from fleet.render.tasks import task_to_json

        echo_json({"array_id": array_id, "exit_code": code,
                   "tasks": [task_to_json(row) for row in rows]})
    else:
        click.echo(array_id)
    return code
