"""The browser's own network namespace: Chromium aborts every request under way when this
machine's links or addresses change (ERR_NETWORK_CHANGED), and other tests add and remove
namespace links all the time; inside a namespace of its own it sees none of that. TCP forwards
carry its connections to the servers under test, and selenium's to chromedriver inside."""

from __future__ import annotations

import asyncio
import ctypes
import os
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

from tests.cluster.netns import destroy_network, run_ip

CLONE_NEWNET = 0x40000000
FORWARD_SETUP_TIMEOUT_S = 10.0
COPY_CHUNK = 65536

Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


def _enter_namespace(path: str) -> None:
    """Moves the calling thread (only it) into the network namespace at `path`."""
    libc = ctypes.CDLL(None, use_errno=True)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(descriptor, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({path}): {os.strerror(errno)}")
    finally:
        os.close(descriptor)


def _listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket in the calling thread's namespace."""
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.bind((host, port))
    listening.listen(64)
    listening.setblocking(False)
    return listening


def _connected(host: str, port: int) -> socket.socket:
    """A TCP socket connected from the calling thread's namespace."""
    connection = socket.create_connection((host, port), timeout=FORWARD_SETUP_TIMEOUT_S)
    connection.setblocking(False)
    return connection


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes from `reader` to `writer` until end of stream, then a half close."""
    while data := await reader.read(COPY_CHUNK):
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()


class BrowserNetwork:
    """A namespace with only loopback (plus `addresses` on it) and forwards in and out of it."""

    def __init__(self, addresses: Iterable[str]) -> None:
        self.name = f"fb-{os.getpid()}-{secrets.token_hex(3)}"
        run_ip(["netns", "add", self.name])
        self._loop = asyncio.new_event_loop()
        self._servers: dict[tuple[str, int], asyncio.base_events.Server] = {}
        try:
            run_ip(["-n", self.name, "link", "set", "lo", "up"])
            for address in addresses:
                if not address.startswith("127."):
                    run_ip(["-n", self.name, "addr", "add", f"{address}/32", "dev", "lo"])
            # One thread that lives inside the namespace: it opens sockets there.
            self._inside = ThreadPoolExecutor(
                1, thread_name_prefix="browser-netns", initializer=_enter_namespace,
                initargs=(f"/run/netns/{self.name}",))
            self._inside.submit(lambda: None).result(FORWARD_SETUP_TIMEOUT_S)
        except BaseException:
            destroy_network(None, [self.name], [])
            raise
        self._thread = threading.Thread(target=self._loop.run_forever, name="browser-forwards",
                                        daemon=True)
        self._thread.start()

    def wrapper(self, directory: Path, program: str) -> Path:
        """An executable in `directory` that runs `program` (with its arguments) in here."""
        script = directory / f"{Path(program).name}-in-{self.name}"
        script.write_text(f'#!/bin/sh\nexec ip netns exec {self.name} {program} "$@"\n')
        script.chmod(0o755)
        return script

    def expose(self, url: str) -> None:
        """The URL's host:port inside reaches the same host:port out here (idempotent)."""
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        if (host, port) in self._servers:
            return
        listening = self._inside.submit(_listener, host, port).result(FORWARD_SETUP_TIMEOUT_S)
        self._serve((host, port), listening, lambda: asyncio.open_connection(host, port))

    def expose_inside(self) -> int:
        """A free port P: 127.0.0.1:P out here reaches 127.0.0.1:P inside (for chromedriver)."""
        listening = _listener("127.0.0.1", 0)
        port = int(listening.getsockname()[1])

        async def open_inside() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            connection = await self._loop.run_in_executor(self._inside, _connected,
                                                          "127.0.0.1", port)
            return await asyncio.open_connection(sock=connection)

        self._serve(("inside", port), listening, open_inside)
        return port

    def _serve(self, key: tuple[str, int], listening: socket.socket, opener: Opener) -> None:
        async def forward(client_reader: asyncio.StreamReader,
                          client_writer: asyncio.StreamWriter) -> None:
            try:
                server_reader, server_writer = await opener()
            except OSError:
                client_writer.close()  # as if refused: the server is not up (yet, or again)
                return
            copies = [asyncio.ensure_future(_copy(client_reader, server_writer)),
                      asyncio.ensure_future(_copy(server_reader, client_writer))]
            try:
                done, _pending = await asyncio.wait(copies,
                                                    return_when=asyncio.FIRST_EXCEPTION)
                if any(copy.exception() is not None for copy in done):
                    client_writer.transport.abort()  # a reset on one side resets the other
                    server_writer.transport.abort()
            finally:
                for copy in copies:
                    copy.cancel()
                client_writer.close()
                server_writer.close()

        async def start() -> asyncio.base_events.Server:
            return await asyncio.start_server(forward, sock=listening)

        server = asyncio.run_coroutine_threadsafe(start(), self._loop).result(
            FORWARD_SETUP_TIMEOUT_S)
        self._servers[key] = server

    def close(self) -> None:
        """Stops the forwards, kills what still runs inside, removes the namespace."""
        async def stop() -> None:
            for server in self._servers.values():
                server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        try:
            if self._loop.is_running():
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(
                    FORWARD_SETUP_TIMEOUT_S)
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(FORWARD_SETUP_TIMEOUT_S)
            if not self._thread.is_alive():
                self._loop.close()
            self._inside.shutdown(wait=True)
        finally:
            destroy_network(None, [self.name], [])
