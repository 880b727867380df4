"""One SSH connection per host, shared by every channel to it (the monitor's probes and, in the
same process, every task's start, output and signals); bounded handshakes and backoff."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleet.errors import HostUnreachable
from fleet.model import HostSpec
from fleet.ssh.options import SshOptions

if TYPE_CHECKING:
    import asyncssh

    from fleet.ssh.run import CommandResult

log = logging.getLogger("fleet.ssh.pool")


@dataclass
class Backoff:
    """Exponential backoff with jitter: initial, doubled per failure up to maximum, ± jitter."""

    initial: float
    maximum: float
    jitter: float
    failures: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next_delay(self) -> float:
        """The wait before the next attempt; counts one more failure."""
        base = min(self.initial * (2.0 ** min(self.failures, 60)), self.maximum)
        self.failures += 1
        spread = base * self.jitter
        return max(0.0, min(base + self.rng.uniform(-spread, spread), self.maximum))

    def reset(self) -> None:
        """Forget past failures (after a success)."""
        self.failures = 0


class ConnectionPool:
    """Keeps at most one open asyncssh connection per host (by name); channels share it.

    New handshakes are limited to `max_handshakes` at once. Every wait is bounded by the
    SshOptions deadlines; failures raise HostError subclasses naming the host.
    """

    def __init__(self, options: SshOptions, max_handshakes: int) -> None:
        self.options = options
        self._handshakes = asyncio.Semaphore(max(1, max_handshakes))
        self._connections: dict[str, asyncssh.SSHClientConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.handshakes_done = 0

    def connection(self, name: str) -> asyncssh.SSHClientConnection | None:
        """The open connection to host `name`, if there is one."""
        conn = self._connections.get(name)
        if conn is not None and conn.is_closed():
            del self._connections[name]
            return None
        return conn

    async def acquire(self, spec: HostSpec) -> asyncssh.SSHClientConnection:
        """The host's open connection, connecting first if needed (HostError on failure)."""
        lock = self._locks.setdefault(spec.name, asyncio.Lock())
        async with lock:
            conn = self.connection(spec.name)
            if conn is not None:
                return conn
            from fleet.ssh.connect import connect

            async with self._handshakes:
                conn = await connect(spec, self.options)
            self.handshakes_done += 1
            self._connections[spec.name] = conn
            log.info("%s: connected to %s:%d", spec.name, spec.address, spec.port)
            return conn

    def discard(self, name: str) -> None:
        """Close and forget the connection to host `name` (a later acquire reconnects)."""
        conn = self._connections.pop(name, None)
        if conn is not None:
            conn.close()

    async def run(
        self, spec: HostSpec, command: str, *, timeout: float | None = None,
        input: bytes | None = None,
    ) -> CommandResult:
        """Run one command on a new channel of the host's connection, within the deadline."""
        from fleet.ssh.run import run_command

        conn = await self.acquire(spec)
        seconds = timeout if timeout is not None else self.options.command_timeout
        try:
            return await run_command(conn, command, host=spec.name, input=input, timeout=seconds)
        except HostUnreachable:
            if conn.is_closed():
                self.discard(spec.name)
            raise

    async def close(self) -> None:
        """Close every connection and wait (bounded) until they are closed."""
        connections = list(self._connections.values())
        self._connections.clear()
        for conn in connections:
            conn.close()
        if connections:
            waits = [asyncio.ensure_future(conn.wait_closed()) for conn in connections]
            _, pending = await asyncio.wait(waits, timeout=self.options.connect_timeout)
            for task in pending:
                task.cancel()
