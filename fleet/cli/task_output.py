"""A task's output and end as the CLI shows them: shared by `fleet dispatch` and `fleet logs`."""

from __future__ import annotations

import sys

import click

from fleet.render.exit_codes import task_exit_code


def say(message: str) -> None:
    """A `fleet: …` progress line on stderr."""
    click.echo(f"fleet: {message}", err=True)


def write_output(data: bytes, *, to_stderr: bool = False) -> None:
    """Task output bytes as they came, flushed at once (stdout, or stderr under --json)."""
    stream = sys.stderr.buffer if to_stderr else sys.stdout.buffer
    stream.write(data)
    stream.flush()


def exit_code_of(state: str, exit_code: int | None, error: str | None, *,
                 timed_out: bool) -> int:
    """The exit code `fleet dispatch` and `fleet logs -f` return for a task that ended.

    A lost task is a DispatchError (exit 5) whose message says why it was lost.
    """
    from fleet.errors import DispatchError

    if state == "lost":
        raise DispatchError(f"task lost: {error}")
    return task_exit_code(state, exit_code, timed_out)
