"""Operator reservations and allocation housekeeping: list, release, expire, who is acting."""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Sequence

from db.allocation_details import allocation_details, reservations_due
from db.engine import Database
from db.rows import AllocationDetail
from db.sql import SessionReader
from db.types import ACTIVE_TASK_STATES
from fleet.errors import ConfigError, DispatchError

OWNER_ENV = "FLEET_OWNER"


def current_owner() -> str:
    """Who is acting: $FLEET_OWNER, else the login name."""
    explicit = os.environ.get(OWNER_ENV, "").strip()
    if explicit:
        return explicit
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid{os.getuid()}"


def expire(database: Database, now: float | None = None) -> int:
    """Release every reservation whose time is up; returns how many were released.

    A reader looks first and a write transaction runs only when one is due, so listing
    allocations stays a read (no write lock, no SQLAlchemy on an SQLite file) when none is.
    """
    moment = int(now if now is not None else time.time())
    with database.reader() as reader:
        if not reservations_due(reader, moment):
            return 0
    from db.allocations import expire_reservations

    with database.session() as session:
        return expire_reservations(session, moment)


def list_allocations(
    database: Database, *, active_only: bool = True, owner: str | None = None,
    now: float | None = None,
) -> list[AllocationDetail]:
    """Allocations (active ones by default) after releasing expired reservations."""
    expire(database, now)
    with database.reader() as reader:
        return allocation_details(reader, active_only=active_only, owner=owner)


def release(
    database: Database,
    allocation_ids: Sequence[int],
    *,
    force: bool = False,
    reason: str = "released by operator",
    now: float | None = None,
) -> list[int]:
    """Release these allocations; returns their ids. All or none.

    Raises ConfigError for an id that does not exist or is no longer active, and DispatchError
    for an allocation that belongs to a task still running (cancel the task instead) unless
    `force`.
    """
    from db.allocations import expire_reservations, release_allocations

    moment = int(now if now is not None else time.time())
    wanted = sorted(set(allocation_ids))
    if not wanted:
        raise ConfigError("no allocation ids given")
    with database.session() as session:
        expire_reservations(session, moment)
        found = {row.id: row for row in allocation_details(
            SessionReader(session), active_only=False, allocation_ids=wanted)}
        missing = [allocation_id for allocation_id in wanted if allocation_id not in found]
        if missing:
            raise ConfigError(f"no allocation with id {', '.join(map(str, missing))}")
        inactive = [found[i] for i in wanted if not found[i].active]
        if inactive:
            first = inactive[0]
            raise ConfigError(f"allocation {first.id} is not active "
                              f"(released: {first.release_reason or 'unknown reason'})")
        if not force:
            busy = [found[i] for i in wanted
                    if found[i].kind == "task" and found[i].task_state in ACTIVE_TASK_STATES]
            if busy:
                row = busy[0]
                raise DispatchError(
                    f"allocation {row.id} belongs to task {row.task_id} ({row.task_state}); "
                    f"cancel the task (fleet cancel {row.task_id}) or release with --force")
        release_allocations(session, now=moment, reason=reason, allocation_ids=wanted)
    return wanted


def release_owned(database: Database, owner: str, *, now: float | None = None) -> list[int]:
    """Release every active reservation of `owner` (task allocations are left alone)."""
    from db.allocations import release_allocations

    moment = int(now if now is not None else time.time())
    with database.session() as session:
        mine = [row.id for row in
                allocation_details(SessionReader(session), owner=owner, kind="reservation")]
        if mine:
            release_allocations(session, now=moment, reason="released by operator",
                                allocation_ids=mine)
    return mine
