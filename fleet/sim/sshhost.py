"""A real asyncssh SSH server on 127.0.0.1 that runs commands as a simulated GPU host.

Each exec request runs `/bin/sh -c COMMAND` in its own process group (session) with the
host's environment (e.g. LD_LIBRARY_PATH and FLEET_SIM_NVML_CONFIG of the simulated NVML),
HOME and cwd set to the host's home; stdin/stdout/stderr are piped both ways and the exit
status (or signal) is sent back. Like OpenSSH, a session ends when the command exits and
its output pipes are closed. If the client closes the channel first, the whole process group
is killed. Groups of finished commands (background jobs left behind) are killed by `stop()`.
SFTP is served on the plain filesystem; direct TCP forwarding is allowed to loopback only,
so a SimSshHost can act as a jump host.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path

import asyncssh

from fleet.ssh.hostkeys import host_field

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_CHUNK = 65536
_STOP_WAIT_S = 5.0
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_SIGNAL_NAMES = {int(sig): sig.name.removeprefix("SIG") for sig in signal.Signals}


def generate_keypair(directory: Path, name: str = "id_ed25519") -> tuple[Path, Path]:
    """A new ed25519 keypair in `directory`: (private key path (0600), public key path)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = asyncssh.generate_private_key("ssh-ed25519", comment=f"fleet-sim-{name}")
    private_path = directory / name
    public_path = directory / f"{name}.pub"
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as private_file:
        private_file.write(key.export_private_key())
    public_path.write_bytes(key.export_public_key())
    return private_path, public_path


def known_hosts_line(address: str, port: int, key: asyncssh.SSHKey) -> str:
    """One OpenSSH known_hosts line (no newline) for `key` of (address, port)."""
    public = key.export_public_key("openssh").decode("ascii").split()
    return f"{host_field(address, port)} {public[0]} {public[1]}"


def write_known_hosts(path: Path, entries: Iterable[tuple[str, int, asyncssh.SSHKey]]) -> None:
    """Write a known_hosts file (0600) with one line per (address, port, key)."""
    text = "".join(known_hosts_line(address, port, key) + "\n" for address, port, key in entries)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as known_hosts:
        known_hosts.write(text)


def _kill_group(pgid: int) -> None:
    """SIGKILL a process group; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    """Whether any process is still in group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class _SimServer(asyncssh.SSHServer):
    """Connection handler: remembers live connections, forwards TCP only to loopback."""

    def __init__(self, host: SimSshHost) -> None:
        super().__init__()
        self._host = host
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._host.connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._host.connections.discard(self._conn)

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> bool:
        return dest_host in LOOPBACK_HOSTS


class SimSshHost:
    """One simulated host: an SSH server on 127.0.0.1 with its own key, env and home."""

    def __init__(
        self,
        name: str,
        host_key: asyncssh.SSHKey | Path,
        authorized_client_keys: Path,
        env: Mapping[str, str],
        home: Path,
    ) -> None:
        self.name = name
        self.host_key = (
            host_key
            if isinstance(host_key, asyncssh.SSHKey)
            else asyncssh.read_private_key(host_key)
        )
        self.authorized_client_keys = authorized_client_keys
        self.env = dict(env)
        self.home = home
        self.address = "127.0.0.1"
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self.started_pids: list[int] = []
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._port: int | None = None
        self._groups: set[int] = set()
        self._sessions: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The listening port (after start())."""
        if self._port is None:
            raise RuntimeError(f"SimSshHost {self.name} is not started")
        return self._port

    @property
    def public_key(self) -> asyncssh.SSHKey:
        """The host's public key, as a client sees it."""
        return self.host_key.convert_to_public()

    def known_hosts_line(self) -> str:
        """This host's known_hosts line, e.g. `[127.0.0.1]:40022 ssh-ed25519 AAAA...`."""
        return known_hosts_line(self.address, self.port, self.host_key)

    async def start(self) -> int:
        """Start listening on 127.0.0.1 (the OS picks the port); returns the port."""
        if self._acceptor is not None:
            return self.port
        self.home.mkdir(parents=True, exist_ok=True)
        self._acceptor = await asyncssh.create_server(
            lambda: _SimServer(self),
            self.address,
            0,
            server_host_keys=[self.host_key],
            authorized_client_keys=str(self.authorized_client_keys),
            process_factory=self._start_session,
            sftp_factory=True,
            encoding=None,
            login_timeout=30,
        )
        self._port = self._acceptor.get_port()
        return self._port

    async def stop(self) -> None:
        """Stop listening, kill every process group started here, close all connections."""
        if self._acceptor is not None:
            self._acceptor.close()
        for pgid in list(self._groups):
            _kill_group(pgid)
        for conn in list(self.connections):
            conn.close()
        if self._sessions:
            _, pending = await asyncio.wait(self._sessions, timeout=_STOP_WAIT_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=_STOP_WAIT_S)
        for pgid in list(self._groups):
            _kill_group(pgid)
        self._groups.clear()
        if self._acceptor is not None:
            await asyncio.wait_for(self._acceptor.wait_closed(), _STOP_WAIT_S)
            self._acceptor = None

    def _session_env(self) -> dict[str, str]:
        user = getpass.getuser()
        base = {
            "PATH": os.environ.get("PATH", _DEFAULT_PATH),
            "HOME": str(self.home),
            "USER": user,
            "LOGNAME": user,
            "SHELL": "/bin/sh",
            "LANG": "C.UTF-8",
        }
        base.update(self.env)
        return base

    def _start_session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        task = asyncio.get_running_loop().create_task(self._run_session(process))
        self._sessions.add(task)
        task.add_done_callback(self._sessions.discard)

    async def _run_session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command
        if command is None:
            process.stderr.write(f"{self.name}: interactive shells are not supported\n".encode())
            process.exit(1)
            return
        try:
            child = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.home,
                env=self._session_env(),
                start_new_session=True,
            )
        except OSError as exc:
            process.stderr.write(f"{self.name}: cannot start /bin/sh: {exc}\n".encode())
            process.exit(127)
            return
        self._groups.add(child.pid)
        self.started_pids.append(child.pid)
        await self._serve(process, child)

    async def _serve(
        self, process: asyncssh.SSHServerProcess[bytes], child: asyncio.subprocess.Process
    ) -> None:
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        loop = asyncio.get_running_loop()
        feeder = loop.create_task(_feed_stdin(process.stdin, child.stdin))
        finished = loop.create_task(_run_to_end(child, child.stdout, child.stderr, process))
        closed = loop.create_task(process.wait_closed())
        try:
            await asyncio.wait({finished, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not finished.done():
                # The client went away (or we are stopping) before the command finished.
                _kill_group(child.pid)
            feeder.cancel()
            await asyncio.wait({finished, feeder}, timeout=_STOP_WAIT_S)
            # A process that left the group may still hold the output pipes: stop copying.
            finished.cancel()
            closed.cancel()
        if finished.done() and not _group_alive(child.pid):
            self._groups.discard(child.pid)  # nothing left behind: forget the group id
        returncode = child.returncode
        if process.is_closing() or returncode is None:
            return
        if returncode >= 0:
            process.exit(returncode)
        elif -returncode in _SIGNAL_NAMES:
            process.exit_with_signal(_SIGNAL_NAMES[-returncode])
        else:
            process.exit(128 - returncode)  # what a shell reports for an unnamed signal


async def _run_to_end(
    child: asyncio.subprocess.Process,
    stdout: asyncio.StreamReader,
    stderr: asyncio.StreamReader,
    process: asyncssh.SSHServerProcess[bytes],
) -> None:
    """Until the command has exited and both of its output pipes are closed (as OpenSSH)."""
    await asyncio.gather(
        child.wait(),
        _copy_output(stdout, process.stdout),
        _copy_output(stderr, process.stderr),
    )


async def _feed_stdin(source: asyncssh.SSHReader[bytes], target: asyncio.StreamWriter) -> None:
    """Forward the channel's stdin to the command until EOF, then close the command's stdin."""
    # Either side may go away first (command exited, client gone): then stop forwarding.
    with contextlib.suppress(asyncssh.Error, OSError):
        while data := await source.read(_CHUNK):
            target.write(data)
            await target.drain()
    target.close()


async def _copy_output(source: asyncio.StreamReader, target: asyncssh.SSHWriter[bytes]) -> None:
    """Forward a command's output pipe to the channel until the pipe closes."""
    while data := await source.read(_CHUNK):
        # A closed channel means the client is gone; keep draining the pipe so the
        # command is not blocked on a full pipe while its group is being killed.
        with contextlib.suppress(asyncssh.Error, OSError):
            target.write(data)
            await target.drain()
