"""Which `fleet serve` to use: --server, FLEET_SERVER, the settings' serve.socket, the default."""

from __future__ import annotations

import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from fleet.errors import ConfigError

SERVER_ENV = "FLEET_SERVER"
SSH_SCHEME = "ssh://"
# The socket a lab head node serves on (README, "Lab mode"), used when an ssh:// URL names none.
DEFAULT_HEAD_NODE_SOCKET = Path("/run/fleet/fleet.sock")
DEFAULT_SSH_PORT = 22


@dataclass(frozen=True)
class HeadNode:
    """The SSH login that reaches a head node: ssh://[user@]host[:port] (user None: ssh config,
    then the local user)."""

    host: str
    port: int = DEFAULT_SSH_PORT
    user: str | None = None


@dataclass(frozen=True)
class ServerChoice:
    """The socket to use and where the choice came from (for messages).

    With `head_node` set, `socket_path` is the socket's path on that head node, reached through
    an SSH connection to it (fleet.client.ssh_tunnel); otherwise a socket on this machine.
    """

    socket_path: Path
    origin: str
    head_node: HeadNode | None = None
    url: str | None = None  # the ssh:// URL as given, for messages


def select_server(explicit: str | None = None) -> ServerChoice | None:
    """The server to use (`explicit`: --server, else $FLEET_SERVER), or None for local mode.

    "local" (or an empty value) forces local mode. `ssh://[user@]host[:port][/socket/path]`
    names a server on a head node (default socket: DEFAULT_HEAD_NODE_SOCKET); a malformed URL
    is a ConfigError naming the value and where it came from.

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
        if value.startswith(SSH_SCHEME):
            return parse_ssh_server(value, origin)
        return ServerChoice(Path(value).expanduser(), origin)
    configured = _configured_socket()
    if configured is not None:
        return configured
    from fleet.server.paths import default_socket_path

    default = default_socket_path()
    if _is_socket(default) and _listening(default):
        return ServerChoice(default, "the default socket")
    return None


def parse_ssh_server(value: str, origin: str) -> ServerChoice:
    """`ssh://[user@]host[:port][/socket/path]` as a choice; ConfigError names what is wrong.

    The socket path is taken as written (no %-decoding); none (or "/")
    means DEFAULT_HEAD_NODE_SOCKET. Passwords, queries and fragments are refused: SSH logs in
    with keys, and a password in a URL would end up in shell history and process lists.
    """
    def bad(why: str, *, show_value: bool = True) -> ConfigError:
        shown = f" {value!r}" if show_value else ""
        return ConfigError(f"{origin}{shown}: {why} "
                           "(expected ssh://[user@]host[:port][/socket/path])")

    if any(char.isspace() or not char.isprintable() for char in value):
        raise bad("spaces or control characters in an ssh:// URL")
    try:
        parts = urlsplit(value)
    except ValueError as exc:  # an unclosed IPv6 bracket
        raise bad(str(exc)) from exc
    if parts.password is not None:
        raise bad("passwords are not accepted in ssh:// URLs (use an SSH key or agent)",
                  show_value=False)
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise bad("an ssh:// URL has no query (?) or fragment (#)")
    user, at, host_port = parts.netloc.rpartition("@")
    if at and not user:
        raise bad("empty user name before '@'")
    host = parts.hostname or ""
    if not host or host.startswith("-") or host_port.startswith(":"):
        raise bad("no head node host name")
    if host_port.endswith(":"):
        raise bad("empty port after ':'")
    try:
        given_port = parts.port
    except ValueError as exc:
        raise bad("the port must be a number from 1 to 65535") from exc
    port = DEFAULT_SSH_PORT if given_port is None else given_port
    if port < 1:
        raise bad("the port must be a number from 1 to 65535")
    socket_path = Path(parts.path) if parts.path not in ("", "/") else DEFAULT_HEAD_NODE_SOCKET
    return ServerChoice(socket_path, origin, HeadNode(host, port, user or None), value)


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
