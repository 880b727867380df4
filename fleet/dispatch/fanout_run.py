"""`fleet run`: one command, or one uploaded script, on many hosts at once; outputs folded.

A command (`fleet run -- CMD…`) is its words joined by spaces and run by the host's login
shell, exactly as `ssh host CMD…` does. A script (`fleet run script.py ARGS…`) is uploaded over
SFTP into a fresh private directory `~/.fleet/run/<random>`, run with the interpreter its file
type calls for (arguments quoted, passed literally), and the directory is removed afterwards.
Each host's coroutine returns a HostRunResult and never raises; concurrency is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fleet.dispatch.remote import TaskHost
from fleet.dispatch.spec import choose_interpreter, plan_uploads
from fleet.dispatch.wrapper import RUN_BASE
from fleet.errors import ConfigError, FleetError, HostError
from fleet.model import HostSpec
from fleet.ssh.options import SshOptions
from fleet.ssh.run import CommandTimedOut

DEFAULT_RUN_FANOUT = 64
OUTPUT_LIMIT = 1 << 20  # bytes kept per stream per host


@dataclass(frozen=True)
class RunCommand:
    """A shell command line, or a local script with arguments (exactly one of the two)."""

    command: str | None = None
    script: Path | None = None
    args: tuple[str, ...] = ()
    python: str | None = None

    def __post_init__(self) -> None:
        if (self.command is None) == (self.script is None):
            raise ConfigError("fleet run needs a command or a script")
        if self.command is not None and not self.command.strip():
            raise ConfigError("fleet run: empty command")
        if self.script is not None:
            plan_uploads(self.script, ())


@dataclass(frozen=True)
class HostRunResult:
    """What one host did: exit status (None: no status), output, or the error that stopped it."""

    host: str
    exit_status: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    error: str | None = None
    state: str = "ok"  # ok, unreachable, auth_failed, timeout, error

    @property
    def succeeded(self) -> bool:
        return self.error is None and self.exit_status == 0


RunProgress = Callable[[HostRunResult, int, int], None]


async def _run_script(host: TaskHost, command: RunCommand, timeout_s: float) -> HostRunResult:
    assert command.script is not None
    run_dir = await host.make_dir(RUN_BASE, secrets.token_hex(8))
    try:
        sftp = await host.sftp()
        target = f"{run_dir}/{command.script.name}"
        await sftp.put(str(command.script), target, follow_symlinks=True)  # the file, not a link
        await sftp.chmod(target, 0o700)
        argv = [*choose_interpreter(command.script, host.spec.python, command.python),
                target, *command.args]
        line = "cd " + shlex.quote(run_dir) + " && " + " ".join(shlex.quote(a) for a in argv)
        result = await host.run(line, timeout=timeout_s)
    finally:
        await asyncio.shield(_remove(host, run_dir))
    return _result(host.spec.name, result.exit_status, result.stdout, result.stderr,
                   result.exit_signal)


async def _remove(host: TaskHost, path: str) -> None:
    # A host failing now already failed the run, which reports it; nothing more to say.
    with contextlib.suppress(FleetError):
        await host.remove_dir(path)


def _result(name: str, status: int | None, stdout: bytes, stderr: bytes,
            signal: str | None) -> HostRunResult:
    error = f"killed by signal {signal}" if signal else None
    return HostRunResult(name, status, stdout[-OUTPUT_LIMIT:], stderr[-OUTPUT_LIMIT:], error,
                         "ok" if error is None else "error")


async def run_one(spec: HostSpec, command: RunCommand, options: SshOptions,
                  timeout_s: float) -> HostRunResult:
    """Run on one host; every failure becomes a HostRunResult (cancellation propagates)."""
    try:
        async with asyncio.timeout(timeout_s + options.handshake_deadline + 5.0):
            host = await TaskHost.open(spec, options)
            try:
                if command.command is not None:
                    done = await host.run(command.command, timeout=timeout_s)
                    return _result(spec.name, done.exit_status, done.stdout, done.stderr,
                                   done.exit_signal)
                return await _run_script(host, command, timeout_s)
            finally:
                host.close()
    except CommandTimedOut as exc:
        return HostRunResult(spec.name, None, exc.stdout[-OUTPUT_LIMIT:],
                             exc.stderr[-OUTPUT_LIMIT:], f"timed out after {timeout_s:g}s",
                             "timeout")
    except HostError as exc:
        return HostRunResult(spec.name, None, error=exc.detail, state=exc.state)
    except TimeoutError:
        return HostRunResult(spec.name, None, error=f"timed out after {timeout_s:g}s",
                             state="timeout")
    except FleetError as exc:
        return HostRunResult(spec.name, None, error=str(exc), state="error")


async def run_on_hosts(specs: Sequence[HostSpec], command: RunCommand, options: SshOptions, *,
                       fanout: int = DEFAULT_RUN_FANOUT, timeout_s: float = 60.0,
                       progress: RunProgress | None = None) -> list[HostRunResult]:
    """Run `command` on every host, at most `fanout` at once; results in `specs` order."""
    if fanout < 1:
        raise ConfigError("--fanout must be at least 1")
    gate = asyncio.Semaphore(fanout)
    done = 0

    async def one(spec: HostSpec) -> HostRunResult:
        nonlocal done
        async with gate:
            result = await run_one(spec, command, options, timeout_s)
        done += 1
        if progress is not None:
            progress(result, done, len(specs))
        return result

    tasks = [asyncio.create_task(one(spec)) for spec in specs]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


@dataclass(frozen=True)
class FoldedOutput:
    """Hosts whose result (output, exit status, error) was identical."""

    hosts: tuple[str, ...]
    result: HostRunResult


def fold(results: Sequence[HostRunResult]) -> list[FoldedOutput]:
    """Group identical results (clush -b style), groups in the order of their first host."""
    groups: dict[tuple[bytes, bytes, int | None, str | None], list[HostRunResult]] = {}
    for result in results:
        key = (result.stdout, result.stderr, result.exit_status, result.error)
        groups.setdefault(key, []).append(result)
    return [FoldedOutput(tuple(r.host for r in members), members[0])
            for members in groups.values()]


def render_folded(results: Sequence[HostRunResult]) -> str:
    """Text: `hosts: line` for one-line outputs, a header block for longer ones."""
    lines: list[str] = []
    for group in fold(results):
        result = group.result
        names = ",".join(group.hosts)
        tag = ""
        if result.error is not None:
            tag = f" [{result.state}: {result.error}]"
        elif result.exit_status != 0:
            tag = f" [exit {result.exit_status}]"
        text = (result.stdout + result.stderr).decode("utf-8", "replace").rstrip("\n")
        if "\n" not in text:
            lines.append(f"{names}{tag}: {text}" if text else f"{names}{tag}:")
        else:
            lines.append(f"---------------- {names} ({len(group.hosts)}){tag}")
            lines.append(text)
    return "\n".join(lines)


def results_to_json(results: Sequence[HostRunResult]) -> dict[str, object]:
    return {
        "hosts": [{
            "host": r.host, "exit_status": r.exit_status, "state": r.state, "error": r.error,
            "stdout": r.stdout.decode("utf-8", "replace"),
            "stderr": r.stderr.decode("utf-8", "replace"),
        } for r in results],
        "folded": [{"hosts": list(g.hosts), "exit_status": g.result.exit_status,
                    "error": g.result.error,
                    "output": (g.result.stdout + g.result.stderr).decode("utf-8", "replace")}
                   for g in fold(results)],
        "succeeded": sum(1 for r in results if r.succeeded),
        "failed": sum(1 for r in results if not r.succeeded),
    }
