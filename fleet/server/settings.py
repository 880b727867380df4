"""The `serve:` settings section (socket, admin groups, stream queue), validated with the rest."""

from __future__ import annotations

from dataclasses import dataclass

from fleet.monitor.settings import setting


@dataclass(frozen=True)
class ServeSettings:
    """Where `fleet serve` listens and who administers it."""

    socket: str | None = setting(
        None, "socket path of the lab's server; clients use it when no --server is given "
        "[default $XDG_RUNTIME_DIR/fleet/fleet.sock]")
    admins: tuple[str, ...] = setting(
        (), "groups whose members may drain, adopt and act on others' work "
        "[default: only the user running the server]")
    watch_queue: int = setting(
        16, "snapshots queued per /v1/watch client before a slow one is dropped",
        minimum=1, maximum=4096)
