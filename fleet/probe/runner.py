"""Runs one probe on a host (over SSH, or in-process for `connection: local`) into a ProbeReport."""

from __future__ import annotations

import asyncio
import importlib
from typing import TYPE_CHECKING, Any

import msgspec

from fleet.errors import FleetError, ProbeError
from fleet.model import HostSpec
from fleet.probe.bundle import (
    DEFAULT_TASKS_DIR,
    PYTHON_TOO_OLD_EXIT,
    probe_command,
    probe_program,
)
from fleet.probe.parse import parse_probe_line, report_from_dict, sanitize_text
from fleet.probe.smi import new_marker, parse_smi_output, smi_command
from fleet.reports import ProbeReport

if TYPE_CHECKING:
    import asyncssh

STDERR_TAIL_CHARS = 600


def _remote_module() -> Any:
    """fleet.probe.remote, which is plain Python 3.6 outside mypy's view (it targets hosts)."""
    return importlib.import_module("fleet.probe.remote")


def _tail(data: bytes | str | None) -> str:
    if not data:
        return ""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return sanitize_text(text[-STDERR_TAIL_CHARS:].replace("\n", " | "), STDERR_TAIL_CHARS)


def _with_stderr(message: str, stderr: bytes | str | None) -> str:
    tail = _tail(stderr)
    return f"{message}; stderr: {tail}" if tail else message


def _last_line(stdout: bytes) -> bytes:
    lines = [line for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else b""


async def probe_local(
    spec: HostSpec,
    *,
    timeout: float,
    tasks_dir: str | None = None,
) -> ProbeReport:
    """Probe the controller's own machine in a worker thread through the controller's pynvml."""
    remote = _remote_module()
    try:
        reading = await asyncio.wait_for(
            asyncio.to_thread(remote.read_once, tasks_dir or DEFAULT_TASKS_DIR), timeout
        )
    except TimeoutError as exc:
        raise ProbeError(spec.name, f"local probe gave no reading within {timeout:g}s") from exc
    except (OSError, ValueError, RuntimeError) as exc:
        raise ProbeError(spec.name, f"local probe failed: {type(exc).__name__}: {exc}") from exc
    return report_from_dict(reading, spec.name)


async def _run(
    conn: asyncssh.SSHClientConnection,
    spec: HostSpec,
    command: str,
    stdin: bytes | None,
    seconds: float,
    what: str,
) -> asyncssh.SSHCompletedProcess:
    import asyncssh

    if seconds <= 0:
        raise ProbeError(spec.name, f"{what}: no time left within the probe timeout")
    try:
        # asyncssh's own timeout keeps the partial output; wait_for is the hard backstop
        return await asyncio.wait_for(
            conn.run(command, input=stdin, encoding=None, check=False, timeout=seconds),
            seconds + 1.0,
        )
    except asyncssh.TimeoutError as exc:
        raise ProbeError(
            spec.name, _with_stderr(f"{what} gave no answer within {seconds:g}s", exc.stderr)
        ) from exc
    except TimeoutError as exc:
        raise ProbeError(spec.name, f"{what} gave no answer within {seconds:g}s") from exc
    except (asyncssh.Error, OSError) as exc:
        raise ProbeError(spec.name, f"{what} could not run: {type(exc).__name__}: {exc}") from exc


def _python_missing(result: asyncssh.SSHCompletedProcess) -> bool:
    """True when the interpreter could not run the probe at all: absent, not executable, too old."""
    if result.returncode == PYTHON_TOO_OLD_EXIT:
        return True
    # the shell's statuses for "command not found" and "found but not executable"
    return result.returncode in (126, 127) and not _last_line(_as_bytes(result.stdout))


def _as_bytes(data: bytes | str | None) -> bytes:
    if data is None:
        return b""
    return data.encode("utf-8", "replace") if isinstance(data, str) else data


async def probe_ssh(
    conn: asyncssh.SSHClientConnection,
    spec: HostSpec,
    *,
    timeout: float,
    tasks_dir: str | None = None,
) -> ProbeReport:
    """Probe a host once over an open SSH connection, falling back to nvidia-smi without python3."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        program = probe_program("once", None, tasks_dir or DEFAULT_TASKS_DIR)
    except FleetError as exc:
        raise ProbeError(spec.name, f"cannot build the probe program: {exc}") from exc
    result = await _run(conn, spec, probe_command(spec.python), program, timeout, "probe")
    stdout = _as_bytes(result.stdout)
    if result.returncode == 0:
        line = _last_line(stdout)
        if not line:
            raise ProbeError(spec.name, _with_stderr("probe printed nothing", result.stderr))
        return parse_probe_line(line, spec.name)
    if _python_missing(result):
        marker = new_marker()
        fallback = await _run(
            conn, spec, smi_command(marker), None, deadline - loop.time(), "nvidia-smi fallback"
        )
        report = parse_smi_output(_as_bytes(fallback.stdout), spec.name, marker)
        why = _tail(result.stderr) or f"exit {result.returncode}"
        return _with_warning(report, f"{spec.python} unusable ({why}); used nvidia-smi")
    raise ProbeError(spec.name, _with_stderr(_how_it_ended(result), result.stderr))


def _how_it_ended(result: asyncssh.SSHCompletedProcess) -> str:
    if result.exit_signal:
        return f"probe was killed by signal {sanitize_text(str(result.exit_signal[0]), 40)}"
    if result.returncode is None:
        return "probe ended without an exit status (channel closed)"
    return f"probe exited with status {result.returncode}"


def _with_warning(report: ProbeReport, warning: str) -> ProbeReport:
    return msgspec.structs.replace(report, warnings=(warning, *report.warnings))
