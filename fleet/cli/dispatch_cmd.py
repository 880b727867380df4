"""`fleet dispatch`: run a script on the best free GPUs, stream its output, exit with its code."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from fleet.cli.context import echo_json, global_options, json_option, not_empty
from fleet.cli.environment_options import environment_options, with_environment
from fleet.cli.group_options import group_options, with_group
from fleet.cli.placement_options import PLACEMENT_OPTION_NAMES, placement_options
from fleet.cli.runner import open_service, run_async
from fleet.cli.signals import stop_on_signals
from fleet.cli.task_output import exit_code_of, say, write_output
from fleet.probe.limits import MAX_INT

if TYPE_CHECKING:
    from collections.abc import Callable

    from fleet.client.remote import RemoteFleet
    from fleet.client.session import Service
    from fleet.dispatch.request import DispatchRequest, StartedTask
    from fleet.service import Fleet


@click.command(context_settings={"allow_interspersed_args": False})
@placement_options
@group_options
@environment_options
@click.option("--with", "extras", multiple=True, metavar="FILE|DIR",
              type=click.Path(path_type=Path, exists=True),
              help="Also upload this file or directory into the task directory; repeatable.")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE",
              help="Set an environment variable for the task; repeatable.")
@click.option("--workdir", metavar="PATH", callback=not_empty,
              help="Run in this directory on the host [default: the task directory].")
@click.option("--python", metavar="PATH", callback=not_empty,
              help="Interpreter to run the script with [default: by file type: .py → the "
              "host's python, .sh → bash, +x → itself].")
@click.option("--timeout", metavar="DURATION", help="Kill the task after this wall time "
              "(enforced on the host, also for --detach); exit code 124.")
@click.option("--grace", default="10s", show_default=True, metavar="DURATION",
              help="Between SIGTERM and SIGKILL when cancelling or timing out.")
@click.option("--detach", "-d", is_flag=True, help="Print the task id and return at once.")
@click.option("--wait", is_flag=True, help="If no GPU fits now, queue (FIFO) until one does.")
@click.option("--queue-timeout", default="24h", show_default=True, metavar="DURATION",
              help="With --wait: give up (exit 7) after this long in the queue.")
@click.option("--priority", default=0, show_default=True, type=click.IntRange(-MAX_INT, MAX_INT),
              help="With --wait: higher runs first; equal priorities are FIFO.")
@click.option("--name", metavar="TEXT", help="Task name [default: the script's file name].")
@click.option("--notify", is_flag=True, help="Tell me: the task's end, and its start after a "
              "wait, go to the webhooks that deliver only such tasks (only_notified).")
@click.option("--override-limits", is_flag=True, help="Ignore the `limits:` settings for this "
              "task (through fleet serve: admins only); recorded as a limits_overridden event.")
@click.option("--explain", is_flag=True, help="Print each candidate GPU's score per factor "
              "and every exclusion (on stderr).")
@click.option("--dry-run", is_flag=True, help="Place (and explain) without running anything.")
@click.option("--lost-after", default="5m", show_default=True, metavar="DURATION",
              envvar="FLEET_LOST_AFTER", help="A task whose host stays unreachable this long "
              "is marked lost [env FLEET_LOST_AFTER].")
@json_option
@click.argument("script", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def dispatch(ctx: click.Context, /, script: Path, args: tuple[str, ...],
             extras: tuple[Path, ...], env: tuple[str, ...], workdir: str | None,
             python: str | None, timeout: str | None, grace: str, detach: bool, wait: bool,
             queue_timeout: str, priority: int, name: str | None, notify: bool,
             override_limits: bool, explain: bool, dry_run: bool, lost_after: str,
             **placement: Any) -> int:
    """Run SCRIPT [ARGS...] on the best free GPUs; stream its output; exit with its exit code.

    Everything after SCRIPT is passed to it literally. The task gets CUDA_VISIBLE_DEVICES (the
    allocated GPUs' UUIDs), CUDA_DEVICE_ORDER=PCI_BUS_ID and FLEET_TASK_ID. Ctrl-C cancels it
    (SIGTERM to its process group, SIGKILL after --grace). Exit codes: the script's own; 124
    timed out; 130 cancelled; 7 no GPU fits (reasons with --explain); 5 could not start or lost;
    2 bad input. A gang (--nodes) exits with its first failing node's code (0 when rank 0
    succeeded); an array (--array) with 0 only when every member succeeded, else its lowest
    failed index's code.

    \b
    Examples:
      fleet dispatch train.py --lr 3e-4
      fleet dispatch --gpus 2 --min-free-mem 20G --with data/ train.py
      fleet dispatch --detach --timeout 2h --env WANDB_MODE=offline sweep.sh 17
      fleet dispatch --wait --queue-timeout 1h --gpus 4 --label rack=b2 big.py
      fleet dispatch --dry-run --explain --gpus 8 big.py
      fleet dispatch --nodes 2 --gpus-per-node 8 --same rack torchrun.sh
      fleet dispatch --array 0-99%8 --array-values grid.txt sweep.py --lr {lr}
    """
    from fleet.cli.placement_options import request_from_options
    from fleet.dispatch.request import DispatchRequest
    from fleet.dispatch.spec import parse_env
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    request = DispatchRequest(
        script=script,
        placement=request_from_options({k: placement[k] for k in PLACEMENT_OPTION_NAMES}),
        args=args, extras=extras, env=parse_env(env), workdir=workdir, python=python,
        timeout_s=None if timeout is None else parse_duration(timeout, what="--timeout"),
        grace_s=parse_duration(grace, what="--grace"), name=name, priority=priority, wait=wait,
        queue_timeout_s=parse_duration(queue_timeout, what="--queue-timeout"), notify=notify,
        override_limits=override_limits,
    )
    request = with_environment(ctx, request, placement)  # --venv/--conda/--container/--snapshot
    request = with_group(request, placement)  # --nodes, --gpus-per-node, --same, --hostfile
    request.validate()
    lost_after_s = parse_duration(lost_after, what="--lost-after")
    array = None
    if placement.get("array") is not None:
        from fleet.cli.array_run import plan_array

        array = plan_array(request, placement, detach=detach)
    elif placement.get("array_values") is not None:
        from fleet.errors import ConfigError

        raise ConfigError("--array-values needs --array")
    if request.is_gang:
        from fleet.dispatch.gang import check_gang_request

        check_gang_request(request)

    async def run() -> int:
        async with open_service(options) as service:
            if dry_run:
                first = array.members[0].request if array is not None else request
                return await _dry_run(service, first, explain, options.as_json)
            if not service.remote:  # a server reconciles on its own, every 30 s
                await service.reconcile_tasks(lost_after_s=lost_after_s)
            if array is not None:
                from fleet.cli.array_run import run_array_cli

                return await run_array_cli(service, array, as_json=options.as_json,
                                           lost_after_s=lost_after_s)
            return await _run(service, request, detach=detach, explain=explain,
                              as_json=options.as_json, lost_after_s=lost_after_s)

    return run_async(run)


async def _dry_run(service: Service, request: DispatchRequest, explain: bool,
                   as_json: bool) -> int:
    from fleet.errors import NoPlacement

    if service.remote:
        from fleet.client.remote import RemoteFleet

        assert isinstance(service, RemoteFleet)
        report = await service.place_report(request.placement)
    else:
        from fleet.render.explain import place_report

        report = place_report(await cast("Fleet", service).place(request.placement))
    if as_json:
        echo_json(report.data)
    else:
        click.echo(report.explanation if explain else report.summary)
    if report.host is None:
        raise NoPlacement(report.summary)
    return 0


def _started_message(started: StartedTask) -> None:
    if started.explanation is not None:
        click.echo(started.explanation, err=True)
    if started.nodes:
        say(f"gang {started.task_id} started on {len(started.nodes)} nodes:")
    for rank, node in enumerate(started.nodes or (started,)):
        indices = ",".join(str(i) for i in node.gpu_indices) or "?"
        what = f"  node {rank} (task {node.task_id})" if started.nodes else f"task {node.task_id}"
        say(f"{what} started on {node.host.name} GPU {indices} ({','.join(node.gpu_uuids)})")


def _waiting_here(request: DispatchRequest) -> Callable[[str], None]:
    """The queue's messages; `--wait --detach` in local mode first says that it waits here:
    no server holds the queue to start the task later."""
    told = not request.wait

    def on_wait(message: str) -> None:
        nonlocal told
        if not told:
            told = True
            say("no fleet serve here: this waits for the GPUs, then detaches once the task "
                "runs (through fleet serve, --wait --detach returns once the task is queued)")
        say(message)

    return on_wait


async def _enqueue(service: RemoteFleet, request: DispatchRequest, explain: bool,
                   as_json: bool) -> int:
    """`--wait --detach` through a server: queued there (or started at once), then return."""
    task_id, started = await service.enqueue(request, on_wait=say, explain=explain)
    if started is not None:
        _started_message(started)
    else:
        say(f"task {task_id} is queued; fleet serve starts it when it fits "
            f"(`fleet tasks {task_id}`, `fleet logs -f {task_id}`, `fleet cancel {task_id}`)")
    if as_json:
        echo_json({"task_id": task_id, "state": "queued" if started is None else "running",
                   "host": None if started is None else started.host.name,
                   "gpu_uuids": [] if started is None else list(started.gpu_uuids)})
    else:
        click.echo(task_id)
    return 0


async def _run(service: Service, request: DispatchRequest, *, detach: bool, explain: bool,
               as_json: bool, lost_after_s: float) -> int:
    from fleet.errors import NoPlacement

    try:
        if detach and request.wait and service.remote:
            return await _enqueue(cast("RemoteFleet", service), request, explain, as_json)
        if detach:
            started = await service.submit(request, on_wait=_waiting_here(request), explain=explain)
            _started_message(started)
            if as_json:
                echo_json({"task_id": started.task_id, "state": "running",
                           "host": started.host.name,
                           "gpu_uuids": list(started.gpu_uuids), "remote_dir": started.task_dir,
                           "nodes": [{"task_id": node.task_id, "host": node.host.name,
                                      "gpu_uuids": list(node.gpu_uuids)}
                                     for node in started.nodes]})
            else:
                click.echo(started.task_id)
            return 0

        def on_signal(count: int) -> None:
            if count == 1:
                say(f"cancelling (SIGTERM, SIGKILL after {request.grace_s:g}s)…")
            else:
                say("already cancelling; the task is stopped within the grace period")

        async with stop_on_signals(on_signal) as stop:
            started, ending = await service.dispatch(
                request, on_output=lambda data: write_output(data, to_stderr=as_json),
                on_wait=say, on_started=_started_message, stop=stop,
                lost_after_s=lost_after_s, explain=explain)
    except NoPlacement as exc:
        if explain and exc.explanation:
            click.echo(exc.explanation, err=True)
        raise
    if as_json:
        from fleet.render.tasks import task_to_json

        row = await service.task(started.task_id)
        echo_json(task_to_json(row))
    else:
        detail = f" ({ending.error})" if ending.error and ending.state != "succeeded" else ""
        say(f"{'gang' if started.nodes else 'task'} {started.task_id} {ending.state}{detail}")
    return exit_code_of(ending.state, ending.exit_code, ending.error, timed_out=ending.timed_out)
