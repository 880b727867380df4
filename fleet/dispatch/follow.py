"""Following a started task: stream its log, notice its end, cancel it, survive reconnects.

The log is read over SFTP at increasing offsets; the poll interval starts short and doubles up
to a bound while nothing happens, and drops back when output arrives. The end is the `exit`
file appearing (checked by SFTP stat, cheap), after which the log is drained. A full status
check (an SSH command) runs every few seconds too, so a wrapper that vanished without writing
its exit file (host rebooted, killed) is noticed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import asyncssh

from fleet.dispatch.ending import DEFAULT_LOST_AFTER_S
from fleet.dispatch.remote import LOG_CHUNK, RemoteStatus, TaskHost
from fleet.dispatch.spec import CONTROL_DIR
from fleet.errors import HostError
from fleet.model import HostSpec
from fleet.ssh.options import SshOptions
from fleet.ssh.pool import ConnectionPool


@dataclass(frozen=True)
class PollPolicy:
    """Bounds of the follow loop (seconds)."""

    min_interval: float = 0.02
    max_interval: float = 0.5
    status_every: float = 5.0
    reconnect_every: float = 1.0


class HostLink:
    """A TaskHost that reconnects on demand; remembers when the host last answered."""

    def __init__(self, spec: HostSpec, options: SshOptions, host: TaskHost | None = None,
                 pool: ConnectionPool | None = None) -> None:
        self.spec = spec
        self.options = options
        self.pool = pool
        self._host = host
        self.last_ok = time.time()

    async def get(self) -> TaskHost:
        if self._host is None:
            self._host = await TaskHost.open(self.spec, self.options, self.pool)
        return self._host

    def drop(self) -> None:
        """The connection failed: let it go (out of the pool too); `get` makes a new one."""
        if self._host is not None:
            self._host.close(broken=True)
            self._host = None

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
            self._host = None

    def ok(self) -> None:
        self.last_ok = time.time()


class LogReader:
    """Reads a task's log from an offset through one open SFTP file handle."""

    def __init__(self, task_dir: str, offset: int = 0) -> None:
        self.path = f"{task_dir}/{CONTROL_DIR}/log"
        self.offset = offset
        self._handle: asyncssh.SFTPClientFile | None = None
        self._host: TaskHost | None = None

    async def read(self, host: TaskHost) -> bytes:
        """The next chunk (b'' when nothing new, or the log does not exist yet)."""
        if self._host is not host:
            self._handle = None
            self._host = host
        try:
            if self._handle is None:
                sftp = await host.sftp()
                self._handle = await sftp.open(self.path, "rb")
            data = await self._handle.read(LOG_CHUNK, self.offset)
        except asyncssh.SFTPNoSuchFile:
            return b""
        except (asyncssh.Error, OSError) as exc:
            self._handle = None
            raise HostError(host.spec.name, f"cannot read the task log: {exc}") from exc
        chunk = data if isinstance(data, bytes) else b""
        self.offset += len(chunk)
        return chunk

    async def drain(self, host: TaskHost, on_output: Callable[[bytes], None]) -> None:
        """Read until the end of the log (bounded by a generous number of chunks)."""
        for _ in range(100_000):
            chunk = await self.read(host)
            if not chunk:
                return
            on_output(chunk)


async def exit_file_present(host: TaskHost, task_dir: str) -> bool:
    sftp = await host.sftp()
    try:
        return bool(await sftp.exists(f"{task_dir}/{CONTROL_DIR}/exit"))
    except (asyncssh.Error, OSError) as exc:
        raise HostError(host.spec.name, f"cannot check the task's exit file: {exc}") from exc


@dataclass(frozen=True)
class FollowEnd:
    """How following stopped: the host's final status, or lost (host silent too long)."""

    status: RemoteStatus | None
    lost_reason: str | None = None


async def follow_task(
    link: HostLink,
    task_dir: str,
    *,
    on_output: Callable[[bytes], None],
    offset: int = 0,
    stop: asyncio.Event | None = None,
    lost_after_s: float = DEFAULT_LOST_AFTER_S,
    policy: PollPolicy | None = None,
    on_contact: Callable[[], None] | None = None,
) -> FollowEnd | None:
    """Stream the log until the task ends; None if `stop` was set first.

    Connection failures are retried every `policy.reconnect_every` seconds; when the host has
    not answered for `lost_after_s`, returns a FollowEnd with lost_reason.
    """
    policy = policy or PollPolicy()
    reader = LogReader(task_dir, offset)
    interval = policy.min_interval
    last_status = time.monotonic()
    while True:
        if stop is not None and stop.is_set():
            return None
        try:
            host = await link.get()
            chunk = await reader.read(host)
            if chunk:
                on_output(chunk)
                interval = policy.min_interval
                link.ok()
                continue
            finished = await exit_file_present(host, task_dir)
            status: RemoteStatus | None = None
            if finished or time.monotonic() - last_status >= policy.status_every:
                status = await host.status(task_dir)
                last_status = time.monotonic()
                if on_contact is not None:
                    on_contact()
            link.ok()
            if status is not None and status.state in ("exited", "gone"):
                await reader.drain(host, on_output)
                return FollowEnd(status)
        except HostError as exc:
            link.drop()
            silent = time.time() - link.last_ok
            if silent >= lost_after_s:
                return FollowEnd(None, f"host unreachable for {silent:.0f}s: {exc.detail}")
            interval = policy.reconnect_every
        await _sleep_or_stop(interval, stop)
        interval = min(interval * 2, policy.max_interval)


async def _sleep_or_stop(seconds: float, stop: asyncio.Event | None) -> None:
    if stop is None:
        await asyncio.sleep(seconds)
        return
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return


async def cancel_remote(host: TaskHost, task_dir: str, grace_s: float) -> RemoteStatus:
    """SIGTERM the task's group, SIGKILL it after `grace_s`; its status once the wrapper ended."""
    deadline = time.monotonic() + grace_s
    # Marked (and signalled) before the first look: a wrapper that has not run the command
    # yet, or has not even been launched, then never runs it (wrapper.py, `cancelled`).
    signalled = await host.signal(task_dir, "TERM", cancel=True) != "NOPID"
    while True:
        status = await host.status(task_dir)
        if status.state in ("exited", "gone"):
            return status
        if not signalled:  # before the command wrote its pid there is nothing to signal yet
            signalled = await host.signal(task_dir, "TERM", cancel=True) != "NOPID"
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(0.1, max(deadline - time.monotonic(), 0.0)))
    for _ in range(100):  # the wrapper writes the exit file right after its command died
        await host.signal(task_dir, "KILL", cancel=True)
        status = await host.status(task_dir)
        if status.state in ("exited", "gone"):
            return status
        await asyncio.sleep(0.05)
    return status
