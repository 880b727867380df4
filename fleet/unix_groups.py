"""The Unix groups of a user on this machine (primary first): one lookup for usage reports,
limits and permissions alike."""

from __future__ import annotations

import grp
import pwd
from collections import defaultdict
from collections.abc import Callable


def group_lookup() -> Callable[[str], tuple[str, ...]]:
    """user → their Unix groups here, primary first (() for a name that is no user here).

    The group database is read once, so one report or one queue pass costs one scan.
    """
    members: dict[str, set[str]] = defaultdict(set)
    for group in grp.getgrall():
        for member in group.gr_mem:
            members[member].add(group.gr_name)

    def groups_of(user: str) -> tuple[str, ...]:
        try:
            primary = grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name
        except KeyError:
            return ()
        return (primary, *sorted(members[user] - {primary}))
    return groups_of


def group_exists(name: str) -> bool:
    """Whether this machine has a Unix group called `name`."""
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True
