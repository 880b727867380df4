"""`fleet tasks`, `fleet logs`, `fleet cancel`: dispatched tasks from any later process."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import click

from fleet.cli.context import echo_json, global_options, json_option, warn
from fleet.cli.runner import open_service, run_async
from fleet.cli.signals import stop_on_signals
from fleet.render.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED

if TYPE_CHECKING:
    from fleet.cli.context import GlobalOptions
    from fleet.client.session import Service
    from fleet.records import TaskRow

DEFAULT_RECENT = 20
LOST_AFTER_OPTION = click.option(
    "--lost-after", default="5m", show_default=True, metavar="DURATION",
    envvar="FLEET_LOST_AFTER",
    help="A task whose host stays unreachable this long is marked lost [env FLEET_LOST_AFTER].")


@click.command()
@click.argument("task_refs", nargs=-1, metavar="[TASK]...")
@click.option("--state", "states", multiple=True, metavar="STATE",
              type=click.Choice(["queued", "placing", "starting", "running", "succeeded",
                                 "failed", "cancelled", "lost"]),
              help="Only tasks in this state; repeatable.")
@click.option("--all", "show_all", is_flag=True,
              help=f"Every task [default: active ones and the last {DEFAULT_RECENT}].")
@click.option("--expand", is_flag=True,
              help="List every node of a gang and member of an array [default: one line each].")
@LOST_AFTER_OPTION
@json_option
@click.pass_context
def tasks(ctx: click.Context, task_refs: tuple[str, ...], states: tuple[str, ...],
          show_all: bool, expand: bool, lost_after: str) -> None:
    """List dispatched tasks (like sacct): host, GPUs, state, exit code, times; with TASK ids
    (N, a gang's or array's id, or ARRAY:INDEX), everything recorded about each of those.

    Running tasks are first checked against their hosts, so tasks that ended while no fleet
    process was watching show their real exit code (through `fleet serve`, the server does
    that on its own: it follows the tasks it starts and checks the others every 30 s). A gang
    or an array is one line (its id is its first task's; GPU-seconds summed; an array's counts
    per state) unless --expand.

    \b
    Examples:
      fleet tasks
      fleet tasks --state running --state queued
      fleet tasks --all --expand
      fleet tasks --all --json | jq '.tasks[] | select(.state=="failed")'
      fleet tasks 42 17:3
    """
    from fleet.render.task_groups import fold_rows, group_json
    from fleet.render.tasks import render_tasks, task_to_json
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    lost_after_s = parse_duration(lost_after, what="--lost-after")
    if task_refs:
        if states or show_all or expand:
            raise click.UsageError("TASK ids take no --state, --all or --expand")
        show_tasks(options, task_refs, lost_after_s)
        return

    async def run() -> tuple[list[TaskRow], dict[int, list[TaskRow]]]:
        async with open_service(options) as service:
            if not service.remote:  # a server follows its tasks and reconciles every 30 s
                await service.reconcile_tasks(lost_after_s=lost_after_s)
            if states or show_all:
                rows = await service.tasks(states=states or None)
            else:
                recent = await service.tasks(limit=DEFAULT_RECENT)
                active = await service.tasks(states=("queued", "placing", "starting",
                                                     "running"))
                merged = {row.id: row for row in [*active, *recent]}
                rows = [merged[key] for key in sorted(merged)]
            groups = {} if expand else {
                group_id: await service.members(group_id)
                for group_id in dict.fromkeys(row.group_id for row in rows if row.group_id)}
            return rows, groups

    rows, groups = run_async(run)
    shown = fold_rows(rows, groups)
    if options.as_json:
        echo_json({"tasks": [
            {**task_to_json(row), **({"group": group_json(groups[row.group_id])}
                                     if row.group_id in groups else {})}
            for row in shown]})
    else:
        click.echo(render_tasks(shown) if shown else "no tasks")


def show_tasks(options: GlobalOptions, task_refs: tuple[str, ...], lost_after_s: float) -> None:
    """`fleet tasks TASK...`: each named task in full, with its gang's or array's tasks."""
    from fleet.render.task_detail import render_task_detail
    from fleet.render.tasks import task_to_json

    async def run() -> list[tuple[TaskRow, list[TaskRow]]]:
        async with open_service(options) as service:
            if not service.remote:  # as the listing: ended tasks show their real end
                await service.reconcile_tasks(lost_after_s=lost_after_s)
            shown = []
            for ref in task_refs:
                row = await service.task(await resolve_task(service, ref))
                members = await service.members(row.group_id) if row.group_id else []
                shown.append((row, members))
            return shown

    shown = run_async(run)
    if options.as_json:
        echo_json({"tasks": [
            {**task_to_json(row), **({"members": [task_to_json(m) for m in members]}
                                     if members else {})}
            for row, members in shown]})
    else:
        click.echo("\n\n".join(render_task_detail(row, members) for row, members in shown))


TASK_REF = re.compile(r"(\d+)(?::(\d+))?")


def parse_task_ref(text: str) -> tuple[int, int | None]:
    """`42` or `42:7` (array 42, index 7) as (id, index); ConfigError otherwise."""
    from fleet.errors import ConfigError
    from fleet.probe.limits import MAX_INT

    match = TASK_REF.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"{text!r} is not a task id (N) or an array member (ARRAY:INDEX)")
    task_id, index = int(match.group(1)), None if match.group(2) is None else int(match.group(2))
    if task_id > MAX_INT or (index is not None and index > MAX_INT):
        raise ConfigError(f"{text!r} is not a task id: ids are at most {MAX_INT}")
    return task_id, index


async def resolve_task(service: Service, text: str) -> int:
    """The task id `text` names: a task, gang or array id, or ARRAY:INDEX for one member."""
    from fleet.errors import ConfigError

    task_id, index = parse_task_ref(text)
    if index is None:
        return task_id
    members = await service.members(task_id)
    for member in members:
        if member.group_kind == "array" and member.group_index == index:
            return member.id
    if not any(member.group_kind == "array" for member in members):
        await service.task(task_id)  # ConfigError (exit 2) when there is no such task at all
        kind = f"a {members[0].group_kind}" if members and members[0].group_kind else "one task"
        raise ConfigError(f"{text}: task {task_id} is {kind}, not an array (ARRAY:INDEX)")
    raise ConfigError(f"{text}: array {task_id} has no index {index} (see `fleet tasks "
                      "--expand`)")


@click.command()
@click.argument("task_ref", metavar="TASK")
@click.option("--follow", "-f", is_flag=True,
              help="Keep streaming until the task ends; exit with its exit code.")
@LOST_AFTER_OPTION
@click.pass_context
def logs(ctx: click.Context, task_ref: str, follow: bool, lost_after: str) -> int:
    """Print a task's output (stdout and stderr); with -f, follow it live (Ctrl-C detaches).

    TASK is a task id, a gang's id (every node, lines prefixed [rank/host]) or ARRAY:INDEX
    (one member of an array).

    \b
    Examples:
      fleet logs 42
      fleet logs -f 42
      fleet logs 17:3
    """
    from fleet.cli.task_output import exit_code_of, write_output
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    lost_after_s = parse_duration(lost_after, what="--lost-after")

    parse_task_ref(task_ref)

    interrupted = False

    async def run() -> TaskRow:
        nonlocal interrupted
        async with open_service(options) as service:
            if not service.remote:  # a server reconciles on its own, every 30 s
                await service.reconcile_tasks(lost_after_s=lost_after_s)
            task_id = await resolve_task(service, task_ref)
            async with stop_on_signals() as stop:
                followed = await service.follow(task_id, on_output=write_output, stop=stop,
                                                follow=follow, lost_after_s=lost_after_s)
                interrupted = stop.is_set()
                return followed

    row = run_async(run)
    if interrupted and not row.is_final:  # Ctrl-C detached: the task runs on
        return EXIT_INTERRUPTED
    if row.remote_dir is None and not (row.group_kind == "gang" and row.group_id == row.id):
        why = f": {row.error}" if row.error else ""
        when = "it never started" if row.is_final else "it has not started yet"
        warn(f"task {row.id} has no output: {when} ({row.state}{why})")
    if not follow or not row.is_final:
        return 0
    return exit_code_of(row.state, row.exit_code, row.error, timed_out=row.timed_out)


@click.command()
@click.argument("task_refs", metavar="TASK...", nargs=-1, required=True)
@click.option("--grace", default="10s", show_default=True, metavar="DURATION",
              help="Between SIGTERM and SIGKILL.")
@json_option
@click.pass_context
def cancel(ctx: click.Context, task_refs: tuple[str, ...], grace: str) -> int:
    """Cancel tasks: dequeue them, or SIGTERM their process group (SIGKILL after --grace).

    A gang's or array's id cancels all its members not yet ended; ARRAY:INDEX one member.
    Exits 0 when every task was cancelled (or had already ended: that is said on stderr).

    \b
    Examples:
      fleet cancel 42
      fleet cancel --grace 1m 42 43
      fleet cancel 17 17:3
    """
    from fleet.errors import DispatchError, HostError
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    grace_s = parse_duration(grace, what="--grace")

    async def run() -> list[tuple[int, str | None, str | None]]:
        outcomes: list[tuple[int, str | None, str | None]] = []
        for ref in task_refs:
            parse_task_ref(ref)
        async with open_service(options) as service:
            for ref in task_refs:
                task_id = await resolve_task(service, ref)
                try:
                    row = await service.cancel(task_id, grace_s=grace_s)
                    outcomes.append((task_id, row.state, None))
                except (DispatchError, HostError) as exc:
                    outcomes.append((task_id, None, str(exc)))
        return outcomes

    outcomes = run_async(run)
    failed = [(task_id, error) for task_id, _state, error in outcomes if error is not None]
    for task_id, error in failed:
        click.echo(f"fleet: task {task_id}: {error}", err=True)
    if options.as_json:
        echo_json({"tasks": [{"id": task_id, "state": state, "error": error}
                             for task_id, state, error in outcomes]})
    else:
        for task_id, state, _error in outcomes:
            if state is not None:
                click.echo(f"task {task_id} {state}")
    return EXIT_FAILED if failed else 0
