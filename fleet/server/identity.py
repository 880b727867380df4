"""The caller of a request, from the Unix socket's peer credentials (SO_PEERCRED) only."""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence

from aiohttp import web

from fleet.caller import Caller, caller_for_uid
from fleet.errors import PermissionDenied

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(request: web.Request) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of the request's Unix socket.

    PermissionDenied when the transport is not a Unix socket (no identity to give).

    Nothing the client sends (headers, fields, environment) is consulted: the kernel says which uid
    opened the connection, and the password/group databases say who that is.
    """
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family != socket.AF_UNIX:
        raise PermissionDenied("this endpoint needs a Unix-socket connection (peer credentials)")
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    pid, uid, gid = _PEERCRED.unpack(raw)
    return pid, uid, gid


class Identities:
    """Maps a request to its Caller with the server's admin rule (`serve.admins`)."""

    def __init__(self, admin_groups: Sequence[str], server_uid: int) -> None:
        self.admin_groups = tuple(admin_groups)
        self.server_uid = server_uid

    def caller(self, request: web.Request) -> Caller:
        """The Caller behind the request's socket."""
        _pid, uid, _gid = peer_credentials(request)
        return caller_for_uid(uid, admin_groups=self.admin_groups, server_uid=self.server_uid)
