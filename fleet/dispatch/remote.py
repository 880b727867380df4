"""A task's host side over SSH: task directory, SFTP upload, detached start, status, signals."""

from __future__ import annotations

import secrets
import stat
from dataclasses import dataclass
from types import TracebackType

import asyncssh

from fleet.dispatch.spec import CONTROL_DIR, TaskLaunch
from fleet.dispatch.wrapper import (
    STATUS_EXIT,
    STATUS_GONE,
    STATUS_RUNNING,
    STATUS_STARTING,
    TASKS_BASE,
    launch_command,
    make_task_dir_command,
    remove_dir_command,
    signal_command,
    status_command,
    wrapper_script,
)
from fleet.errors import DispatchError, HostUnreachable
from fleet.model import HostSpec
from fleet.ssh.connect import connect
from fleet.ssh.options import SshOptions
from fleet.ssh.pool import ConnectionPool
from fleet.ssh.run import CommandResult, output_tail, run_command

LOG_CHUNK = 256 * 1024


@dataclass(frozen=True)
class RemoteStatus:
    """What the host says about a task: state is exited / running / starting / gone."""

    state: str
    exit_code: int | None = None
    started_at: int | None = None
    ended_at: int | None = None
    timed_out: bool = False
    cancelled: bool = False
    pgid: int | None = None
    dir_missing: bool = False


def task_dir_name(task_id: int) -> str:
    """`<task id>-<random hex>`: from the id only, unique even if ids are reused by a new DB."""
    return f"{int(task_id)}-{secrets.token_hex(4)}"


def parse_status(text: str) -> RemoteStatus:
    """The RemoteStatus printed by wrapper.status_command."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep:
            values[key] = value.strip()
    states = {STATUS_EXIT: "exited", STATUS_RUNNING: "running", STATUS_STARTING: "starting",
              STATUS_GONE: "gone"}
    state = states.get(values.get("state", ""))
    if state is None:
        raise ValueError(f"unexpected task status output {text[:200]!r}")
    return RemoteStatus(
        state=state,
        exit_code=_int(values.get("rc")),
        started_at=_int(values.get("started")),
        ended_at=_int(values.get("ended")),
        timed_out=values.get("timed_out") == "1",
        cancelled=values.get("cancelled") == "1",
        pgid=_int(values.get("pgid")),
        dir_missing=values.get("missing") == "1",
    )


def _int(text: str | None) -> int | None:
    if text is None or not text.lstrip("-").isdigit():
        return None
    return int(text)


class TaskHost:
    """An open SSH connection (and SFTP session) to the host of one or more tasks."""

    def __init__(self, spec: HostSpec, conn: asyncssh.SSHClientConnection,
                 command_timeout: float, pool: ConnectionPool | None = None) -> None:
        self.spec = spec
        self.conn = conn
        self.command_timeout = command_timeout
        self.pool = pool
        self._sftp: asyncssh.SFTPClient | None = None

    @classmethod
    async def open(cls, spec: HostSpec, options: SshOptions,
                   pool: ConnectionPool | None = None) -> TaskHost:
        """Connect to `spec`, or take the pool's open connection (HostError subclasses on
        failure)."""
        if spec.connection == "local":
            raise DispatchError(f"{spec.name}: tasks on a `connection: local` host are not "
                                "supported; give the host an SSH address")
        conn = await pool.acquire(spec) if pool is not None else await connect(spec, options)
        return cls(spec, conn, options.command_timeout, pool)

    async def __aenter__(self) -> TaskHost:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self, *, broken: bool = False) -> None:
        """Done with the host: close the connection, or leave it open in its pool (`broken`:
        it failed, so the pool lets it go and the next user reconnects)."""
        if self._sftp is not None:
            self._sftp.exit()
            self._sftp = None
        if self.pool is None:
            self.conn.close()
        elif broken and self.pool.connection(self.spec.name) is self.conn:
            self.pool.discard(self.spec.name)

    async def sftp(self) -> asyncssh.SFTPClient:
        if self._sftp is None:
            try:
                self._sftp = await self.conn.start_sftp_client()
            except (asyncssh.Error, OSError) as exc:
                raise HostUnreachable(self.spec.name, f"cannot start SFTP: {exc}") from exc
        return self._sftp

    async def run(self, command: str, *, timeout: float | None = None) -> CommandResult:
        return await run_command(self.conn, command, host=self.spec.name,
                                 timeout=timeout or self.command_timeout)

    async def checked(self, command: str, what: str, *, timeout: float | None = None) -> str:
        """Run `command`; its stdout, or DispatchError naming `what` if it failed."""
        result = await self.run(command, timeout=timeout)
        if result.exit_status != 0:
            tail = output_tail(result.stdout, result.stderr)
            raise DispatchError(f"{self.spec.name}: cannot {what} (exit {result.exit_status}"
                                f"{', ' + result.exit_signal if result.exit_signal else ''})"
                                + (f": {tail}" if tail else ""))
        return result.stdout.decode("utf-8", "surrogateescape")

    async def make_dir(self, base: str, name: str) -> str:
        """Create `$HOME/<base>/<name>` (0700, plus its control dir); its absolute path."""
        output = await self.checked(make_task_dir_command(base, name), "create task directory")
        path = output.strip().splitlines()[-1] if output.strip() else ""
        if not path.startswith("/"):
            raise DispatchError(f"{self.spec.name}: task directory path {path!r} is not absolute")
        return path

    async def upload(self, launch: TaskLaunch, task_dir: str) -> None:
        """Send the script, the --with files and the wrapper into `task_dir` over SFTP."""
        sftp = await self.sftp()
        try:
            for item in launch.uploads:
                target = f"{task_dir}/{item.remote}"
                if item.local is None:
                    await sftp.mkdir(target, asyncssh.SFTPAttrs(permissions=0o700))
                    continue
                # A symbolic link is sent as the file it names: as a link it would name a path
                # on the host, outside the task directory, whose mode the chmod below changed.
                await sftp.put(str(item.local), target, follow_symlinks=True)
                mode = item.local.stat().st_mode
                await sftp.chmod(target, stat.S_IMODE(mode) & 0o700 | 0o600)
            wrapper = f"{task_dir}/{CONTROL_DIR}/wrapper.sh"
            async with sftp.open(wrapper, "wb", asyncssh.SFTPAttrs(permissions=0o700)) as handle:
                await handle.write(wrapper_script(launch, task_dir))
        except (asyncssh.SFTPError, OSError) as exc:
            raise DispatchError(f"{self.spec.name}: upload to {task_dir} failed: {exc}") from exc

    async def launch(self, task_dir: str) -> int | None:
        """Start the uploaded wrapper detached; the task's process group id (None if it ended)."""
        output = await self.checked(launch_command(task_dir), "start the task")
        text = output.strip()
        return int(text) if text.isdigit() else None

    async def status(self, task_dir: str) -> RemoteStatus:
        output = await self.checked(status_command(task_dir), "read the task status")
        try:
            return parse_status(output)
        except ValueError as exc:
            raise DispatchError(f"{self.spec.name}: {exc}") from exc

    async def signal(self, task_dir: str, signal_name: str, *, cancel: bool) -> str:
        """Signal the task's process group: 'ALIVE', 'DEAD' or 'NOPID' afterwards."""
        output = await self.checked(signal_command(task_dir, signal_name, mark_cancelled=cancel),
                                    f"send SIG{signal_name}")
        return output.strip().splitlines()[-1] if output.strip() else "NOPID"

    async def read_log(self, task_dir: str, offset: int, limit: int = LOG_CHUNK) -> bytes:
        """Up to `limit` bytes of the task's log from `offset` (b'' at its end or if absent)."""
        sftp = await self.sftp()
        try:
            async with sftp.open(f"{task_dir}/{CONTROL_DIR}/log", "rb") as handle:
                data = await handle.read(limit, offset)
        except asyncssh.SFTPNoSuchFile:
            return b""
        except (asyncssh.SFTPError, OSError) as exc:
            raise HostUnreachable(self.spec.name, f"cannot read the task log: {exc}") from exc
        return data if isinstance(data, bytes) else b""

    async def remove_dir(self, path: str) -> None:
        await self.checked(remove_dir_command(path), f"remove {path}")


async def start_task(host: TaskHost, launch: TaskLaunch) -> tuple[str, int | None]:
    """Create the task directory, upload, start detached: (task dir, process group id)."""
    task_dir = await host.make_dir(TASKS_BASE, task_dir_name(launch.task_id))
    await host.upload(launch, task_dir)
    return task_dir, await host.launch(task_dir)
