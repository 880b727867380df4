"""Where the server's socket lives by default, and making its directory safely."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fleet.errors import ConfigError

SOCKET_NAME = "fleet.sock"


def default_socket_path() -> Path:
    """$XDG_RUNTIME_DIR/fleet/fleet.sock, else /tmp/fleet-$UID/fleet.sock."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / "fleet" / SOCKET_NAME
    return Path("/tmp") / f"fleet-{os.getuid()}" / SOCKET_NAME


def prepare_socket_dir(path: Path, *, group_id: int | None) -> None:
    """Create the socket's directory (0700, or 0750 for a group) if missing.

    An existing directory is used as it is (e.g. systemd's RuntimeDirectory), except that the
    default per-user directory must be ours and closed to others, so nobody can plant a socket
    for us to trust. ConfigError when it cannot be made or is not safe.
    """
    directory = path.parent
    try:
        directory.mkdir(mode=0o750 if group_id is not None else 0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError(f"cannot create the socket directory {directory}: "
                          f"{exc.strerror or exc}") from exc
    else:
        if group_id is not None:
            os.chown(directory, -1, group_id)
            os.chmod(directory, 0o750)
        return
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"the socket directory {directory} is not a directory")
    if directory == default_socket_path().parent and (
            info.st_uid != os.getuid() or info.st_mode & 0o022):
        raise ConfigError(f"refusing the socket directory {directory}: it must belong to "
                          f"uid {os.getuid()} and not be writable by others")
