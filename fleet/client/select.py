"""Which `fleet serve` to use: --server, FLEET_SERVER, the settings' serve.socket, the default."""

from __future__ import annotations

import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from fleet.errors import ConfigError

SERVER_ENV = "FLEET_SERVER"


@dataclass(frozen=True)
class ServerChoice:
    """The socket to use and where the choice came from (for messages)."""

    socket_path: Path
    origin: str


def select_server(explicit: str | None = None) -> ServerChoice | None:
    """The server to use (`explicit`: --server, else $FLEET_SERVER), or None for local mode.

    "local" (or an empty value) forces local mode. ssh:// is not served yet: ConfigError.

    With none of them, and no server listening at the default path (a crashed server's socket
    file does not count), the answer is None: local mode, as always, and nothing is said about
    it. A server named explicitly (option, variable or setting) must be reachable: if it is not,
    the command fails (exit 9) instead of silently going local.
    """
    for value, origin in ((explicit, "--server"), (os.environ.get(SERVER_ENV), SERVER_ENV)):
        if value is None:
            continue
        if not value.strip() or value.strip() == "local":
            return None
        return ServerChoice(_socket(value, origin), origin)
    configured = _configured_socket()
    if configured is not None:
        return configured
    from fleet.server.paths import default_socket_path

    default = default_socket_path()
    if _is_socket(default) and _listening(default):
        return ServerChoice(default, "the default socket")
    return None


def _socket(value: str, origin: str) -> Path:
    if value.startswith("ssh://"):
        raise ConfigError(f"{origin} {value}: ssh:// servers are not supported yet; use the "
                          "socket path on the head node (or `ssh head fleet ...`)")
    return Path(value).expanduser()


def _configured_socket() -> ServerChoice | None:
    """`serve.socket` of the settings file, if the file exists and sets it."""
    from fleet.settings_path import default_config_path

    path = default_config_path()
    if not path.exists():
        return None
    from fleet.monitor.config import load_settings
    from fleet.server.settings import ServeSettings

    settings = load_settings(None, path)
    socket = settings.section("serve", ServeSettings).socket
    if not socket:
        return None
    return ServerChoice(Path(socket).expanduser(), f"serve.socket in {path}")


def _listening(path: Path) -> bool:
    """Whether a server accepts on `path` (a dead server's socket file refuses at once)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False
