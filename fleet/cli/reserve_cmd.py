"""`fleet reserve`, `fleet release`, `fleet allocations`: operators holding GPUs, who holds what."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from fleet.cli.context import echo_json, global_options, json_option
from fleet.cli.placement_options import PLACEMENT_OPTION_NAMES, placement_options
from fleet.cli.runner import open_service, run_async
from fleet.probe.limits import MAX_INT

if TYPE_CHECKING:
    from fleet.placement.claim import Claim
    from fleet.records import AllocationDetail, UnmanagedGpu


@click.command()
@placement_options
@click.option("--for", "duration", metavar="DURATION",
              help="Release automatically after this long (90m, 2h, 1d); default: until released.")
@click.option("--note", metavar="TEXT",
              help="Why the GPUs are held (shown in `fleet allocations`).")
@click.option("--explain", is_flag=True,
              help="Also print every candidate GPU's score per factor and every exclusion.")
@json_option
@click.pass_context
def reserve(ctx: click.Context, /, duration: str | None, note: str | None, explain: bool,
            **placement: Any) -> int:
    """Hold free GPUs for yourself (interactive work, a manual job), on one host.

    Prints the host, the allocation ids and a ready CUDA_VISIBLE_DEVICES line. Exits 7 when no
    host has enough free GPUs matching the request (the reasons are printed on stderr).

    \b
    Examples:
      fleet reserve --gpus 2 --for 2h --note "debugging NCCL"
      fleet reserve --hosts gpu03 --min-free-mem 40G
      eval "export $(fleet reserve --gpus 1 --for 1h | tail -n 1)"
      fleet reserve --json --gpus 4 --label rack=b2 | jq -r .cuda_visible_devices
    """
    from fleet.cli.placement_options import request_from_options
    from fleet.errors import NoPlacement
    from fleet.render.explain import explain_to_json, render_explain
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    request = request_from_options({name: placement[name] for name in PLACEMENT_OPTION_NAMES})
    duration_s = None if duration is None else parse_duration(duration, what="--for")
    if duration_s is not None and duration_s <= 0:
        from fleet.errors import ConfigError

        raise ConfigError(f"--for must be a positive duration, not {duration!r}")

    async def run() -> Claim:
        async with open_service(options) as service:
            return await service.reserve(request, duration_s=duration_s, note=note)

    try:
        claimed = run_async(run)
    except NoPlacement as exc:
        if explain:
            click.echo(exc.explanation, err=True)
        raise
    if options.as_json:
        data = _claim_to_json(claimed)
        if explain and claimed.placement is not None:
            data["placement"] = explain_to_json(claimed.placement)
        echo_json(data)
        return 0
    if explain and claimed.placement is not None:
        click.echo(render_explain(claimed.placement))
        click.echo()
    indices = ",".join(str(index) for index in claimed.gpu_indices)
    ids = ", ".join(str(allocation_id) for allocation_id in claimed.allocation_ids)
    click.echo(f"reserved {claimed.host} GPU {indices} (allocation {ids}) "
               f"{_until(claimed.expires_at)}")
    click.echo(f"release with: fleet release {' '.join(map(str, claimed.allocation_ids))}")
    click.echo(f"CUDA_VISIBLE_DEVICES={claimed.cuda_visible_devices}")
    return 0


@click.command()
@click.argument("allocation_ids", nargs=-1, type=click.IntRange(1, MAX_INT), metavar="ID...")
@click.option("--all-mine", is_flag=True, help="Release every reservation you hold.")
@click.option("--force", is_flag=True,
              help="Also release GPUs held by a task that is still running.")
@json_option
@click.pass_context
def release(ctx: click.Context, allocation_ids: tuple[int, ...], all_mine: bool,
            force: bool) -> int:
    """Release allocations by id (as `fleet allocations` lists them).

    A running task's allocation is refused unless --force: cancel the task instead.

    \b
    Examples:
      fleet release 12 13
      fleet release --all-mine
    """
    from fleet.errors import ConfigError

    options = global_options(ctx)
    if not allocation_ids and not all_mine:
        raise ConfigError("give allocation ids to release, or --all-mine")

    async def run() -> list[int]:
        async with open_service(options) as service:
            released = await service.release_mine() if all_mine else []
            if allocation_ids:
                released += await service.release(allocation_ids, force=force)
            return released

    released = run_async(run)
    if options.as_json:
        echo_json({"released": released})
    elif released:
        click.echo(f"released allocation {', '.join(map(str, released))}")
    else:
        click.echo("nothing to release")
    return 0


@click.command()
@click.option("--all", "show_all", is_flag=True, help="Include released allocations.")
@json_option
@click.pass_context
def allocations(ctx: click.Context, show_all: bool) -> int:
    """List who holds which GPU: tasks and reservations (active ones unless --all).

    Expired reservations are released before listing. GPUs running processes fleet did not
    start (no reservation, or not the holder's) follow, with each process's pid and Unix user.

    \b
    Examples:
      fleet allocations
      fleet allocations --all --json | jq '.allocations[] | select(.kind == "reservation")'
    """
    from fleet.render.allocations import allocation_to_json

    options = global_options(ctx)

    async def run() -> tuple[list[AllocationDetail], list[UnmanagedGpu]]:
        async with open_service(options) as service:
            return (await service.allocations(active_only=not show_all),
                    await service.unmanaged_use())

    rows, unmanaged = run_async(run)
    if options.as_json:
        echo_json({"allocations": [allocation_to_json(row) for row in rows],
                   "unmanaged": [{"host": gpu.host, "gpu": gpu.gpu_idx, "uuid": gpu.uuid,
                                  "processes": list(gpu.processes)} for gpu in unmanaged]})
    else:
        click.echo(_render_allocations(rows, show_all))
        if unmanaged:
            click.echo("\n" + _render_unmanaged(unmanaged))
    return 0


def _render_unmanaged(gpus: list[UnmanagedGpu]) -> str:
    """`IN USE WITHOUT FLEET`: the GPUs' processes fleet did not start."""
    from fleet.render.table import Column, render_table

    return "processes fleet did not start:\n" + render_table(
        [Column("HOST"), Column("GPU", ">"), Column("PID", ">"), Column("USER"),
         Column("NAME", max_width=32)],
        [[gpu.host, gpu.gpu_idx, process.get("pid"), process.get("user") or
          (f"uid {process['uid']}" if process.get("uid") is not None else None),
          process.get("name")] for gpu in gpus for process in gpu.processes])


def _render_allocations(rows: list[AllocationDetail], show_all: bool) -> str:
    from fleet.render.table import Column, render_table
    from fleet.timeparse import format_time

    if not rows:
        return "no active allocations" if not show_all else "no allocations"
    columns = [Column("ID", ">"), Column("HOST"), Column("GPU", ">"), Column("UUID", max_width=40),
               Column("KIND"), Column("OWNER"), Column("TASK"), Column("SINCE"),
               Column("EXPIRES"), Column("IDLE SINCE"), Column("NOTE", max_width=40)]
    if show_all:
        columns += [Column("RELEASED"), Column("REASON", max_width=30)]
    table = []
    for row in rows:
        task = None if row.task_id is None else f"{row.task_id} {row.task_name or ''}".strip()
        cells: list[object] = [row.id, row.host, row.gpu_idx, row.uuid, row.kind, row.owner, task,
                               format_time(row.created_at), _expires(row.expires_at),
                               format_time(row.idle_since) if row.idle_since else None, row.note]
        if show_all:
            cells += [format_time(row.released_at) if row.released_at else "active",
                      row.release_reason]
        table.append(cells)
    return render_table(columns, table)


def _expires(expires_at: int | None) -> str:
    from fleet.timeparse import format_time

    return "never" if expires_at is None else format_time(expires_at)


def _until(expires_at: int | None) -> str:
    from fleet.timeparse import format_time

    if expires_at is None:
        return "until released"
    left = max(0, expires_at - int(time.time()))
    return f"until {format_time(expires_at)} ({left // 3600}h{left % 3600 // 60:02d}m)"


def _claim_to_json(claimed: Claim) -> dict[str, Any]:
    return {
        "host": claimed.host,
        "gpus": list(claimed.gpu_indices),
        "uuids": list(claimed.gpu_uuids),
        "allocation_ids": list(claimed.allocation_ids),
        "kind": claimed.kind,
        "owner": claimed.owner,
        "note": claimed.note,
        "created_at": claimed.created_at,
        "expires_at": claimed.expires_at,
        "cuda_visible_devices": claimed.cuda_visible_devices,
        "attempts": claimed.attempts,
    }
