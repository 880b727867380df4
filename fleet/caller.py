"""Who calls through `fleet serve`: a Unix user from the socket, and what they may do."""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Caller:
    """A Unix user calling through the server: name, uid, group names, admin or not.

    `None` in place of a `Caller` means local mode (the CLI on its own database): no checks, and
    the owner is `FLEET_OWNER` or the login name as always. Through the server the caller comes
    from the socket's peer credentials only (fleet/server/identity.py), never from the request.
    """

    user: str
    uid: int
    groups: frozenset[str] = frozenset()
    is_admin: bool = False

    def may_act_on(self, owner: str) -> bool:
        """True for the caller's own work, and for anyone's if the caller is an admin."""
        return self.is_admin or owner == self.user


def user_name(uid: int) -> str:
    """The login name of `uid` ("uid1234" when the password database has none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def group_names(uid: int) -> frozenset[str]:
    """Names of the primary and supplementary groups of `uid` (empty for an unknown uid)."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return frozenset()
    names = set()
    for gid in os.getgrouplist(entry.pw_name, entry.pw_gid):
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.add(str(gid))
    return frozenset(names)


def caller_for_uid(uid: int, *, admin_groups: Iterable[str], server_uid: int) -> Caller:
    """The Caller for a peer uid: admin when in one of `admin_groups`, or the server's own user
    when no admin group is configured."""
    wanted = frozenset(admin_groups)
    groups = group_names(uid)
    is_admin = bool(groups & wanted) if wanted else uid == server_uid
    return Caller(user=user_name(uid), uid=uid, groups=groups, is_admin=is_admin)
