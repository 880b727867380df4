"""The server's Unix socket, which appears at its path only once it accepts connections."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from fleet.errors import ConfigError

# Connections the kernel queues before the server accepts them (asyncio's default backlog).
BACKLOG = 100


def listening_socket(path: Path, group_id: int | None) -> socket.socket:
    """A Unix stream socket listening at `path`, readable and writable by its owner (and by
    `group_id`'s members when given), nobody else at any moment.

    It is bound at a temporary name beside `path` (closed to everyone by the umask), opened to
    the owner or the group, made to listen, and only then renamed to `path`: a client that
    finds the socket there can connect, even when this process is descheduled between bind
    and listen. Raises ConfigError naming the path when any step fails.
    """
    staging = path.with_name(f".{path.name}.{os.getpid()}.new")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous_umask = os.umask(0o177)
    try:
        with contextlib.suppress(FileNotFoundError):
            staging.unlink()  # left by a crashed process with this pid
        sock.bind(str(staging))
        if group_id is not None:
            os.chown(staging, -1, group_id)
            os.chmod(staging, 0o660)
        sock.listen(BACKLOG)
        os.replace(staging, path)
    except OSError as exc:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            staging.unlink()
        raise ConfigError(f"cannot listen on {path}: {exc.strerror or exc}") from exc
    finally:
        os.umask(previous_umask)
    sock.setblocking(False)
    return sock
