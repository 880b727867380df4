"""One host's streaming probe: a long-lived probe process over one channel, restarted on stalls.

The host's loop: get the pooled connection, start `python3 -c BOOTSTRAP` fed the stream program,
read one JSON line per interval, each stamped on the controller's clock (fleet.monitor.clock: a
host whose clock is off has its readings moved by its offset). A probe silent for
`stall_intervals` intervals is killed and restarted; a failed connection is reported and
retried with exponential backoff and jitter.
Hosts without a usable python3 are read with the one-shot probe (nvidia-smi fallback) instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from msgspec.structs import replace as replace_struct

from fleet.errors import ConfigError, HostError, HostUnreachable, ProbeError
from fleet.health.host_state import outcome_of
from fleet.model import HostOutcome, HostSpec
from fleet.monitor.clock import ClockOffset, describe_offset
from fleet.monitor.lines import OverlongLine
from fleet.monitor.settings import MonitorSettings
from fleet.probe.bundle import PYTHON_TOO_OLD_EXIT, probe_command, probe_program
from fleet.probe.parse import MAX_LINE_BYTES, parse_probe_line, sanitize_text
from fleet.reports import ProbeReport
from fleet.ssh.pool import Backoff, ConnectionPool

if TYPE_CHECKING:
    import asyncssh

    from fleet.monitor.probe_session import ProbeSession

log = logging.getLogger("fleet.monitor.stream")

PID_MARKER = b"fleet-probe-pid"
KILL_TIMEOUT_S = 5.0
# How long a stalled probe's connection may take to run `true` before the host counts as down.
STALL_CHECK_S = 2.0
_PYTHON_UNUSABLE = (126, 127, PYTHON_TOO_OLD_EXIT)


class HostSink(Protocol):
    """Where a host's loop sends what it sees (called on the event loop, must not block)."""

    def on_report(self, spec: HostSpec, report: ProbeReport) -> None: ...

    def on_failure(self, spec: HostSpec, outcome: HostOutcome, reason: str) -> None: ...

    def on_clock_skew(self, spec: HostSpec, offset: float, skewed: bool) -> None:
        """The host's clock went beyond the tolerance (`skewed`) or came back within it;
        `offset` is the controller's time minus the host's, in seconds."""


@dataclass
class StreamStats:
    """Counters of one host's loop, for summaries, logs and tests."""

    probes_started: int = 0
    reports: int = 0
    garbage_lines: int = 0
    stalls: int = 0
    failures: int = 0


class _PythonUnusable(Exception):
    """The host's python cannot run the streaming probe (absent, not executable, too old)."""


def stream_command(python: str) -> str:
    """The probe command line, prefixed with a line that gives the probe's pid (exec keeps it)."""
    return f"echo {PID_MARKER.decode()} $$; {probe_command(python)}"


class HostStream:
    """The monitoring loop of one SSH host; `run()` until `stop()`."""

    def __init__(
        self,
        spec: HostSpec,
        pool: ConnectionPool,
        settings: MonitorSettings,
        sink: HostSink,
        *,
        program: Callable[[], bytes] | None = None,
    ) -> None:
        self.spec = spec
        self.pool = pool
        self.settings = settings
        self.sink = sink
        self.stats = StreamStats()
        self._program = program or (
            lambda: probe_program("stream", settings.interval, settings.tasks_dir)
        )
        self._backoff = Backoff(
            settings.reconnect_initial, settings.reconnect_max, settings.reconnect_jitter
        )
        self._stopping = asyncio.Event()
        self._channel: asyncssh.SSHClientChannel[bytes] | None = None
        self._remote_pid: int | None = None
        # The host's clock against the controller's (kept across probes: it is the host's).
        self.clock = ClockOffset()
        self._stall: _StallTimer | None = None  # the running probe's
        self._next_stall_limit = 0.0

    async def run(self) -> None:
        """Monitor the host until stop(); every failure is reported to the sink, never raised."""
        while not self._stopping.is_set():
            try:
                conn = await self.pool.acquire(self.spec)
                try:
                    await self._stream(conn)
                except _PythonUnusable as exc:
                    log.warning("%s: %s; reading it with one-shot probes", self.spec.name, exc)
                    await self._poll_once_mode(conn)
            except HostError as exc:
                self._fail(outcome_of(exc), exc.detail)
                connection = self.pool.connection(self.spec.name)
                if connection is None or isinstance(exc, HostUnreachable):
                    self.pool.discard(self.spec.name)
                await self._sleep(self._backoff.next_delay())
            except ConfigError as exc:  # the controller's own SSH setup (a key pair that does
                # not match): no fault of the host, whose state stays; retried, as it may be fixed
                log.error("%s: cannot connect: %s", self.spec.name, exc)
                await self._sleep(self._backoff.next_delay())

    async def stop(self) -> None:
        """Ask the probe to exit (stdin closed); the run() loop then returns."""
        self._stopping.set()
        channel = self._channel
        if channel is not None:
            with contextlib.suppress(OSError, RuntimeError):
                channel.write_eof()

    async def kill_remote_probe(self) -> None:
        """SIGKILL the current probe process on the host by pid (it may be stopped or hung)."""
        pid = self._remote_pid
        conn = self.pool.connection(self.spec.name)
        if pid is None or conn is None:
            return
        from fleet.ssh.run import run_command

        try:
            await run_command(
                conn, f"kill -KILL {int(pid)}", host=self.spec.name,
                timeout=min(KILL_TIMEOUT_S, self.pool.options.command_timeout),
            )
        except HostError as exc:
            log.warning("%s: could not kill probe pid %d: %s", self.spec.name, pid, exc.detail)

    async def _connection_answers(self, conn: asyncssh.SSHClientConnection) -> bool:
        """Whether the host still answers on this connection (a silent probe on a live host is
        a probe error; on a dead link or a frozen sshd the host is unreachable)."""
        import asyncssh

        try:
            async with asyncio.timeout(min(STALL_CHECK_S, self.pool.options.command_timeout)):
                await conn.run("true", check=False, encoding=None)
        except (TimeoutError, asyncssh.Error, OSError):
            return False
        return True

    def _fail(self, outcome: HostOutcome, reason: str) -> None:
        self.stats.failures += 1
        self.sink.on_failure(self.spec, outcome, reason)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _stream(self, conn: asyncssh.SSHClientConnection) -> None:
        """Run one probe process until it ends, stalls, or stop(); HostError on failures."""
        import asyncssh

        from fleet.monitor.probe_session import open_probe_session

        timeout = self.pool.options.command_timeout
        first_deadline = timeout + self.settings.stall_timeout
        stall = self._stall = _StallTimer(first_deadline)
        self._next_stall_limit = first_deadline
        # Before the session opens: its first line (the pid) can arrive before it returns.
        self._remote_pid = None
        try:
            channel, session = await asyncio.wait_for(open_probe_session(
                conn, stream_command(self.spec.python), self._take_line, MAX_LINE_BYTES),
                timeout)
        except TimeoutError as exc:
            raise HostUnreachable(self.spec.name, f"no probe channel within {timeout:g}s") from exc
        except (asyncssh.Error, OSError) as exc:
            raise HostUnreachable(self.spec.name, f"cannot start the probe: {exc}") from exc
        self.stats.probes_started += 1
        self._channel = channel
        exited_cleanly = False
        try:
            channel.write(self._program())
            if self._stopping.is_set():
                channel.write_eof()
            if await self._output_ended(session, conn, stall):
                exited_cleanly = self._ended(channel, conn, session)
        except (asyncssh.Error, OSError) as exc:
            raise HostUnreachable(self.spec.name, f"probe channel failed: {exc}") from exc
        finally:
            self._channel = None
            if not exited_cleanly and not conn.is_closed():
                await self.kill_remote_probe()
            channel.close()

    async def _output_ended(
        self, session: ProbeSession, conn: asyncssh.SSHClientConnection, stall: _StallTimer,
    ) -> bool:
        """Wait while the probe's lines arrive (see _take_line): True when its output ended,
        False when it stalled (silent for the stall limit, longer before its first reading)."""
        try:
            async with asyncio.timeout(None) as timeout:
                stall.start(timeout)
                try:
                    await session.ended
                finally:
                    stall.cancel()
        except TimeoutError as stalled:
            if self._stopping.is_set():
                return False
            self.stats.stalls += 1
            if not await self._connection_answers(conn):
                conn.close()  # a dead link: the pool reconnects, the host counts as down
                raise HostUnreachable(self.spec.name, (
                    f"probe gave no reading for {stall.limit:g}s and the connection does not "
                    f"answer")) from stalled
            self._fail("probe_error",
                       f"probe gave no reading for {stall.limit:g}s; restarting it")
            return False
        return True

    def _take_line(self, line: bytes | OverlongLine) -> None:
        """One line of the probe, as it arrives: its pid, garbage, or a reading. Each moves the
        stall deadline (to the first reading's, until a reading has come)."""
        try:
            if isinstance(line, OverlongLine):
                self._garbage(f"line of {line.size} bytes exceeds {MAX_LINE_BYTES}")
            elif self._remote_pid is None and line.startswith(PID_MARKER):
                self._remote_pid = _pid_of(line)
            else:
                self._reading(line)
        finally:
            if self._stall is not None:
                self._stall.line_seen(self._next_stall_limit)

    def _reading(self, line: bytes) -> None:
        try:
            report = parse_probe_line(line, self.spec.name)
        except ProbeError as exc:
            self._garbage(exc.detail)
            return
        self._next_stall_limit = self.settings.stall_timeout
        self._deliver(report, time.time())

    def _deliver(self, report: ProbeReport, arrival: float) -> None:
        """Hand a reading to the sink, stamped on the controller's clock (fleet.monitor.clock:
        its own `ts` plus the host's clock offset, when that is beyond the tolerance)."""
        clock = self.clock
        if clock.observe(report.timestamp, arrival):
            self._clock_changed()
        if clock.skewed:
            report = replace_struct(report, timestamp=report.timestamp + clock.correction)
        self.stats.reports += 1
        self._backoff.reset()
        self.sink.on_report(self.spec, report)

    def _clock_changed(self) -> None:
        clock = self.clock
        offset = clock.correction if clock.skewed else clock.estimate
        if clock.skewed:
            log.warning("%s: its clock is %s the controller's: its readings are stored at "
                        "their time %+.1f s", self.spec.name, describe_offset(offset),
                        offset)
        else:
            log.info("%s: its clock is in step with the controller's again (%s)",
                     self.spec.name, describe_offset(offset))
        self.sink.on_clock_skew(self.spec, offset, clock.skewed)

    def _garbage(self, why: str) -> None:
        self.stats.garbage_lines += 1
        log.warning("%s: skipped a probe line: %s", self.spec.name, why)

    def _ended(
        self,
        channel: asyncssh.SSHClientChannel[bytes],
        conn: asyncssh.SSHClientConnection,
        session: ProbeSession,
    ) -> bool:
        """The probe's output ended: True after stop(), else the HostError that says why."""
        if session.partial:
            self._garbage(f"unterminated last line of {len(session.partial)} bytes")
        if self._stopping.is_set():
            return True
        if conn.is_closed():
            raise HostUnreachable(self.spec.name, "connection lost")
        status = channel.get_exit_status()
        tail = sanitize_text(
            bytes(session.stderr_tail).decode("utf-8", "replace").replace("\n", " | "), 600)
        if status in _PYTHON_UNUSABLE and self.stats.reports == 0:
            raise _PythonUnusable(f"{self.spec.python} unusable (exit {status}): {tail}")
        how = f"exit status {status}" if status is not None else "no exit status"
        raise ProbeError(
            self.spec.name, f"probe ended ({how})" + (f"; stderr: {tail}" if tail else "")
        )

    async def _poll_once_mode(self, conn: asyncssh.SSHClientConnection) -> None:
        """Without python: one `--once`-style probe (nvidia-smi fallback) per interval."""
        from fleet.probe.runner import probe_ssh

        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            started = loop.time()
            report = await probe_ssh(
                conn, self.spec, timeout=self.pool.options.command_timeout,
                tasks_dir=self.settings.tasks_dir,
            )
            self._deliver(report, time.time())
            await self._sleep(max(0.0, self.settings.interval - (loop.time() - started)))


class _StallTimer:
    """"No line for `limit` seconds" with one timer per probe: a line only moves the deadline,
    and the timer, when it fires early, re-arms itself at the moved one (a timer per line cost
    a heap push and a cancel on every reading)."""

    def __init__(self, limit: float) -> None:
        self._loop = asyncio.get_running_loop()
        self.limit = limit
        self._deadline = self._loop.time() + limit
        self._timeout: asyncio.Timeout | None = None
        self._handle: asyncio.TimerHandle | None = None

    def start(self, timeout: asyncio.Timeout) -> None:
        """Expire `timeout` (the read's context) once the deadline passes with no line."""
        self._timeout = timeout
        self._handle = self._loop.call_at(self._deadline, self._check)

    def line_seen(self, limit: float) -> None:
        """Waiting for the next line from now on: it is due within `limit` seconds."""
        self.limit = limit
        self._deadline = self._loop.time() + limit

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()

    def _check(self) -> None:
        now = self._loop.time()
        if now < self._deadline:
            self._handle = self._loop.call_at(self._deadline, self._check)
        elif self._timeout is not None:
            self._timeout.reschedule(now)  # expires at once: TimeoutError out of the read


def _pid_of(line: bytes) -> int | None:
    parts = line.split()
    if len(parts) == 2 and parts[1].isdigit():
        return int(parts[1])
    return None



