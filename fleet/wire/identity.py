"""`GET /v1/whoami`: who the server sees at the other end of the socket, and which server."""

from __future__ import annotations

from msgspec import Struct


class WhoAmI(Struct, frozen=True):
    """The caller as the server identified it from the socket, and the server's pid/version."""

    user: str
    uid: int
    groups: tuple[str, ...]
    is_admin: bool
    server_pid: int
    server_version: str
    role: str = "leader"  # or "standby" (a PostgreSQL pair's other server), "lost"
