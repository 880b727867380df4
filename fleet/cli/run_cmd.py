"""`fleet run`: a command or a local script on many hosts at once, identical outputs folded."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fleet.cli.context import (
    HOSTS_HELP,
    echo_json,
    global_options,
    host_option,
    json_option,
    not_empty,
)
from fleet.cli.runner import run_async
from fleet.render.exit_codes import EXIT_FAILED, EXIT_HOST_FAILED

if TYPE_CHECKING:
    from fleet.dispatch.fanout_run import HostRunResult


def _is_script(word: str) -> bool:
    """A word names a local script when it is an existing file and looks like a path."""
    path = Path(word)
    return path.is_file() and ("/" in word or path.suffix in (".py", ".sh"))


@click.command(context_settings={"allow_interspersed_args": False})
@host_option(f"{HOSTS_HELP} [default: all].")
@click.option("--fanout", default=64, show_default=True, type=click.IntRange(1, 4096),
              help="How many hosts to run on at once.")
@click.option("--timeout", default="60s", show_default=True, metavar="DURATION",
              help="Deadline per host for the command (plus the connect timeout).")
@click.option("--python", metavar="PATH", callback=not_empty,
              help="Interpreter for a script [default: by file "
              "type: .py → the host's python, .sh → bash, +x → itself].")
@click.option("--shell", "force_shell", is_flag=True,
              help="Treat the first word as a remote command even if a local file has its name.")
@json_option
@click.argument("words", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(ctx: click.Context, pattern: str | None, fanout: int, timeout: str, python: str | None,
        force_shell: bool, words: tuple[str, ...]) -> int:
    """Run a command, or upload and run a script, on every selected host concurrently.

    `fleet run -- CMD...` joins CMD's words with spaces and runs them in each host's login
    shell, as `ssh host CMD...` would. `fleet run script.py [ARGS...]` (an existing local file
    named with a path or a .py/.sh suffix) uploads it to a private temporary directory on each
    host, runs it with ARGS passed literally, and removes the directory. Identical results are
    folded into one block. Exit code: 0 if every host returned 0, 1 if a command exited
    non-zero somewhere, 3 if a host could not be reached or timed out.

    \b
    Examples:
      fleet run -- nvidia-smi -L
      fleet run --hosts 'gpu*' -- 'df -h /scratch | tail -n 1'
      fleet run --hosts @a100 ./collect_env.py --verbose
      fleet run --json -- uptime | jq '.hosts[] | select(.exit_status != 0)'
    """
    from fleet.dispatch.fanout_run import RunCommand, render_folded, results_to_json
    from fleet.errors import ConfigError
    from fleet.service import open as open_fleet
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    timeout_s = parse_duration(timeout, what="--timeout")
    if timeout_s <= 0:  # 0 meant no deadline at all, which --timeout exists to prevent
        raise ConfigError("--timeout must be positive")
    if not force_shell and _is_script(words[0]):
        command = RunCommand(script=Path(words[0]), args=tuple(words[1:]), python=python)
    else:
        command = RunCommand(command=" ".join(words))
    show_progress = sys.stderr.isatty()

    def progress(result: HostRunResult, done: int, total: int) -> None:
        if show_progress:
            click.echo(f"\rfleet run: {done}/{total} hosts done", err=True, nl=done == total)

    async def go() -> list[HostRunResult]:
        async with open_fleet(options.db_url, options.inventory_path) as service:
            return await service.run_on_hosts(command, pattern, fanout=fanout,
                                              timeout_s=timeout_s, progress=progress)

    results = run_async(go)
    if options.as_json:
        echo_json(results_to_json(results))
    else:
        click.echo(render_folded(results))
    if any(result.error is not None and result.exit_status is None for result in results):
        return EXIT_HOST_FAILED
    if any(not result.succeeded for result in results):
        return EXIT_FAILED
    return 0
