"""fleet's exception tree; lower-level errors are translated into these at the I/O edge.

    FleetError                  base of everything fleet raises on purpose
    ├── ConfigError             bad inventory / config / CLI input (exit code 2)
    ├── StorageError            the database cannot be opened, migrated or written
    ├── HostError               one host failed; in fleet-wide commands this is data, not a crash
    │   ├── HostUnreachable     TCP connect failed or timed out, connection lost
    │   ├── AuthFailed          the host refused every offered credential
    │   ├── HostKeyRejected     unknown (without --accept-new) or changed host key
    │   └── ProbeError          the probe ran but its output was missing or malformed
    ├── DispatchError           a task could not be placed, started or followed
    │   ├── LeftQueue           a waiting task was cancelled (exit code 130) or ended meanwhile
    │   └── NoPlacement         no host has enough GPUs matching the request (exit code 7)
    ├── AllocationConflict      a GPU is already actively allocated
    ├── PermissionDenied        the caller (through `fleet serve`) may not do this (exit code 8)
    └── ServerUnavailable       the selected `fleet serve` cannot be reached (exit code 9)
"""

from __future__ import annotations


class FleetError(Exception):
    """Base class for every error fleet raises deliberately."""

    exit_code = 1


class ConfigError(FleetError):
    """Invalid inventory, configuration or command-line input; names the file and line if known."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(f"{where}{message}")


class StorageError(FleetError):
    """The database could not be opened, migrated or written."""

    exit_code = 4


class HostError(FleetError):
    """A single host failed; `host` names it."""

    exit_code = 3
    state = "error"

    def __init__(self, host: str, message: str) -> None:
        self.host = host
        self.detail = message
        super().__init__(f"{host}: {message}")


class HostUnreachable(HostError):
    """The host could not be reached (refused, timed out, connection lost)."""

    state = "unreachable"


class AuthFailed(HostError):
    """The host refused authentication."""

    state = "auth_failed"


class HostKeyRejected(HostError):
    """The host's key is unknown (and --accept-new was not given) or has changed."""

    state = "host_key_rejected"


class ProbeError(HostError):
    """The probe could not run on the host or printed something unusable."""

    state = "probe_error"


class DispatchError(FleetError):
    """A task could not be placed, started or followed."""

    exit_code = 5


class LeftQueue(DispatchError):
    """A waiting task stopped being queued under its waiter: cancelled (exit code 130, as a
    cancelled task's dispatch exits) or ended by another process (exit code 5)."""

    def __init__(self, message: str, *, cancelled: bool) -> None:
        self.exit_code = 130 if cancelled else 5
        super().__init__(message)


class TaskCancelled(DispatchError):
    """The task was cancelled (Ctrl-C, or `fleet cancel` from elsewhere) before it started
    running; nothing of it runs."""

    exit_code = 130


class NoPlacement(DispatchError):
    """No host has enough free GPUs matching the request; `explanation` says why, per GPU."""

    exit_code = 7

    def __init__(self, message: str, *, explanation: str = "") -> None:
        self.explanation = explanation
        super().__init__(message)


class AllocationConflict(FleetError):
    """A GPU is already actively allocated to another task or reservation."""

    exit_code = 6


class GpuDrained(AllocationConflict):
    """A GPU chosen for a claim, or its host, was drained after placement saw it (exit code 6,
    as a lost race: placement runs again with the drain in view)."""


class PermissionDenied(FleetError):
    """The caller may not do this: someone else's work, or an admin-only action (exit code 8)."""

    exit_code = 8


class ServerUnavailable(FleetError):
    """The selected `fleet serve` socket cannot be reached, or answered something unreadable."""

    exit_code = 9
