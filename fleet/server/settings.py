"""The `serve:` settings section (socket, admins, stream queue, state, the pair's timing),
validated with the rest."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

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
    state_dir: str | None = setting(
        None, "where the server keeps staged task files, and queued tasks for the next server "
        "to resume [default $XDG_STATE_HOME/fleet/serve, else ~/.local/state/fleet/serve]")
    leader_timeout: float = setting(
        5.0, "PostgreSQL pair: how long a leader may go silent (frozen, cut off) before the "
        "database drops its lock and the standby takes over", minimum=1.0, maximum=60.0,
        duration=True)
    standby_poll: float = setting(
        1.0, "PostgreSQL pair: how often the standby tries to take the lead",
        minimum=0.1, maximum=10.0, duration=True)


def state_dir(settings: ServeSettings) -> Path:
    """The server's state directory (not created here)."""
    if settings.state_dir:
        return Path(settings.state_dir).expanduser()
    base = os.environ.get("XDG_STATE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "fleet" / "serve"
