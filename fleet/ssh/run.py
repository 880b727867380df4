"""Run one command over an open SSH connection, bytes in and out, with a deadline."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import asyncssh

from fleet.errors import HostUnreachable

_TAIL_BYTES = 400


@dataclass(frozen=True)
class CommandResult:
    """What a finished remote command produced.

    `exit_status` is None when the host sent no status (the command was killed by a
    signal: then `exit_signal` names it).
    """

    exit_status: int | None
    stdout: bytes
    stderr: bytes
    exit_signal: str | None = None


def output_tail(stdout: bytes, stderr: bytes, limit: int = _TAIL_BYTES) -> str:
    """The last bytes of a command's output, decoded for an error message ('' if none)."""
    parts = []
    for label, data in (("stdout", stdout), ("stderr", stderr)):
        if data.strip():
            text = data[-limit:].decode("utf-8", errors="replace").strip()
            parts.append(f"{label}: {'…' if len(data) > limit else ''}{text}")
    return "; ".join(parts)


class CommandTimedOut(HostUnreachable):
    """A remote command did not finish in time; keeps the output it had produced."""

    def __init__(self, host: str, timeout: float, stdout: bytes, stderr: bytes) -> None:
        self.timeout = timeout
        self.stdout = stdout
        self.stderr = stderr
        tail = output_tail(stdout, stderr)
        super().__init__(
            host,
            f"command timed out after {timeout:g}s" + (f" (output so far: {tail})" if tail else ""),
        )


def _as_bytes(data: object) -> bytes:
    return data if isinstance(data, bytes) else b""


async def run_command(
    conn: asyncssh.SSHClientConnection,
    command: str,
    *,
    host: str,
    input: bytes | None = None,
    timeout: float,
) -> CommandResult:
    """Run `command` (a shell command line, already quoted) on `conn` and collect its output.

    `input` is fed to its stdin, then EOF (no input: stdin is empty). Raises CommandTimedOut
    (a HostUnreachable, with the output so far) after `timeout` seconds, and HostUnreachable if
    the channel cannot be opened or the connection drops. The remote channel is closed on
    every way out, cancellation included.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    stdin_kwargs: dict[str, object] = {"input": input} if input else {"stdin": asyncssh.DEVNULL}
    try:
        process = await asyncio.wait_for(
            conn.create_process(command, encoding=None, **stdin_kwargs), timeout
        )
    except TimeoutError as exc:
        raise CommandTimedOut(host, timeout, b"", b"") from exc
    except (asyncssh.Error, OSError) as exc:
        raise HostUnreachable(host, f"cannot start command: {exc}") from exc
    try:
        completed = await process.wait(timeout=max(deadline - loop.time(), 0.0))
    except asyncssh.TimeoutError as exc:
        raise CommandTimedOut(host, timeout, _as_bytes(exc.stdout), _as_bytes(exc.stderr)) from exc
    except (asyncssh.Error, OSError) as exc:
        raise HostUnreachable(host, f"connection failed during command: {exc}") from exc
    finally:
        process.close()
    stdout = _as_bytes(completed.stdout)
    stderr = _as_bytes(completed.stderr)
    signal = completed.exit_signal[0] if completed.exit_signal else None
    if completed.exit_status is None and signal is None:
        tail = output_tail(stdout, stderr)
        raise HostUnreachable(
            host, "connection lost during command" + (f" (output so far: {tail})" if tail else "")
        )
    status = None if signal is not None else completed.exit_status
    return CommandResult(exit_status=status, stdout=stdout, stderr=stderr, exit_signal=signal)
