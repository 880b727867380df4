"""`fleet tasks`, `fleet logs`, `fleet cancel`: dispatched tasks from any later process."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from fleet.cli.context import echo_json, global_options
from fleet.cli.runner import run_async

if TYPE_CHECKING:
    from db.tasks import TaskRow

DEFAULT_RECENT = 20
LOST_AFTER_OPTION = click.option(
    "--lost-after", default="5m", show_default=True, metavar="DURATION",
    envvar="FLEET_LOST_AFTER",
    help="A task whose host stays unreachable this long is marked lost [env FLEET_LOST_AFTER].")


def task_to_json(row: TaskRow) -> dict[str, Any]:
    """A task as JSON (times in epoch seconds)."""
    return {
        "id": row.id, "name": row.name, "state": row.state, "exit_code": row.exit_code,
        "host": row.host, "gpus": [gpu.idx for gpu in row.gpus],
        "gpu_uuids": [gpu.uuid for gpu in row.gpus], "gpus_requested": row.gpus_requested,
        "owner": row.owner, "priority": row.priority, "script": row.script,
        "args": list(row.args), "submitted_at": row.submitted_at, "started_at": row.started_at,
        "ended_at": row.ended_at, "duration_s": _duration(row), "gpu_seconds": row.gpu_seconds,
        "peak_memory_bytes": row.peak_memory_bytes, "error": row.error,
        "remote_dir": row.remote_dir, "remote_pid": row.remote_pid,
    }


def _duration(row: TaskRow) -> int | None:
    if row.started_at is None:
        return None
    end = row.ended_at if row.ended_at is not None else int(time.time())
    return max(end - row.started_at, 0)


def _format_duration(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def render_tasks(rows: list[TaskRow]) -> str:
    from fleet.cli.table import Column, render_table
    from fleet.timeparse import format_time

    columns = [Column("ID", ">"), Column("NAME", max_width=24), Column("HOST"),
               Column("GPUS"), Column("STATE"), Column("EXIT", ">"), Column("SUBMITTED"),
               Column("STARTED"), Column("ENDED"), Column("DURATION", ">"),
               Column("ERROR", max_width=40)]
    body = [
        [row.id, row.name, row.host, ",".join(str(gpu.idx) for gpu in row.gpus) or None,
         row.state, row.exit_code, format_time(row.submitted_at),
         format_time(row.started_at), format_time(row.ended_at),
         _format_duration(_duration(row)), row.error if row.state != "succeeded" else None]
        for row in rows
    ]
    return render_table(columns, body)


@click.command()
@click.option("--state", "states", multiple=True, metavar="STATE",
              type=click.Choice(["queued", "placing", "starting", "running", "succeeded",
                                 "failed", "cancelled", "lost"]),
              help="Only tasks in this state; repeatable.")
@click.option("--all", "show_all", is_flag=True,
              help=f"Every task [default: active ones and the last {DEFAULT_RECENT}].")
@LOST_AFTER_OPTION
@click.pass_context
def tasks(ctx: click.Context, states: tuple[str, ...], show_all: bool, lost_after: str) -> None:
    """List dispatched tasks (like sacct): host, GPUs, state, exit code, times.

    Running tasks are first checked against their hosts, so tasks that ended while no fleet
    process was watching show their real exit code.

    \b
    Examples:
      fleet tasks
      fleet tasks --state running --state queued
      fleet --json tasks --all | jq '.tasks[] | select(.state=="failed")'
    """
    from fleet.service import open as open_fleet
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    lost_after_s = parse_duration(lost_after, what="--lost-after")

    async def run() -> list[TaskRow]:
        async with open_fleet(options.db_url, options.inventory_path) as service:
            await service.reconcile_tasks(lost_after_s=lost_after_s)
            if states or show_all:
                return await service.tasks(states=states or None)
            recent = await service.tasks(limit=DEFAULT_RECENT)
            active = await service.tasks(states=("queued", "placing", "starting", "running"))
            merged = {row.id: row for row in [*active, *recent]}
            return [merged[key] for key in sorted(merged)]

    rows = run_async(run)
    if options.as_json:
        echo_json({"tasks": [task_to_json(row) for row in rows]})
    else:
        click.echo(render_tasks(rows) if rows else "no tasks")


@click.command()
@click.argument("task_id", type=int)
@click.option("--follow", "-f", is_flag=True,
              help="Keep streaming until the task ends; exit with its exit code.")
@LOST_AFTER_OPTION
@click.pass_context
def logs(ctx: click.Context, task_id: int, follow: bool, lost_after: str) -> int:
    """Print a task's output (stdout and stderr); with -f, follow it live (Ctrl-C detaches).

    \b
    Examples:
      fleet logs 42
      fleet logs -f 42
    """
    import asyncio
    import signal

    from fleet.cli.dispatch_cmd import exit_code_of, write_output
    from fleet.dispatch.records import Ending
    from fleet.service import open as open_fleet
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    lost_after_s = parse_duration(lost_after, what="--lost-after")

    async def run() -> TaskRow:
        async with open_fleet(options.db_url, options.inventory_path) as service:
            await service.reconcile_tasks(lost_after_s=lost_after_s)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGINT, stop.set)
            try:
                return await service.follow(task_id, on_output=write_output, stop=stop,
                                            follow=follow, lost_after_s=lost_after_s)
            finally:
                loop.remove_signal_handler(signal.SIGINT)

    row = run_async(run)
    if not follow or not row.is_final:
        return 0
    return exit_code_of(Ending(row.state, row.exit_code, row.error,  # type: ignore[arg-type]
                               row.ended_at or 0, None))


@click.command()
@click.argument("task_ids", type=int, nargs=-1, required=True)
@click.option("--grace", default="10s", show_default=True, metavar="DURATION",
              help="Between SIGTERM and SIGKILL.")
@click.pass_context
def cancel(ctx: click.Context, task_ids: tuple[int, ...], grace: str) -> int:
    """Cancel tasks: dequeue them, or SIGTERM their process group (SIGKILL after --grace).

    Exits 0 when every task was cancelled (or had already ended: that is said on stderr).

    \b
    Examples:
      fleet cancel 42
      fleet cancel --grace 1m 42 43
    """
    from fleet.errors import DispatchError, HostError
    from fleet.service import open as open_fleet
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    grace_s = parse_duration(grace, what="--grace")

    async def run() -> list[tuple[int, str]]:
        outcomes = []
        async with open_fleet(options.db_url, options.inventory_path) as service:
            for task_id in task_ids:
                try:
                    row = await service.cancel(task_id, grace_s=grace_s)
                    outcomes.append((task_id, row.state))
                except (DispatchError, HostError) as exc:
                    outcomes.append((task_id, f"error: {exc}"))
        return outcomes

    outcomes = run_async(run)
    failed = 0
    for task_id, outcome in outcomes:
        if outcome.startswith("error: "):
            failed += 1
            click.echo(f"fleet: task {task_id}: {outcome[7:]}", err=True)
        elif not options.as_json:
            click.echo(f"task {task_id} {outcome}")
    if options.as_json:
        echo_json({"tasks": [{"id": task_id, "result": outcome} for task_id, outcome in outcomes]})
    return 1 if failed else 0
