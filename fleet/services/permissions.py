"""The permission checks every mutating service runs for a server caller, and their events."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from fleet.errors import PermissionDenied

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from fleet.caller import Caller
    from fleet.context import FleetContext


async def require_admin(context: FleetContext, caller: Caller | None, action: str) -> None:
    """Pass for local mode and admins; otherwise record the refusal and raise PermissionDenied."""
    if caller is None or caller.is_admin:
        return
    await refuse(context, caller, action, "only an admin may do that")


async def require_owner(context: FleetContext, caller: Caller | None, action: str,
                        owners: Iterable[str]) -> None:
    """Pass when the caller owns everything named (or is an admin, or local mode); else refuse."""
    if caller is None:
        return
    others = sorted({owner for owner in owners if not caller.may_act_on(owner)})
    if others:
        await refuse(context, caller, action, f"it belongs to {', '.join(others)}")


async def refuse(context: FleetContext, caller: Caller, action: str, why: str) -> None:
    """Record a `permission_denied` event naming the user, then raise PermissionDenied.

    A refusal is a `permission_denied` event naming the user and the action, then PermissionDenied
    (exit code 8). With no caller (local mode) every check passes.
    """
    from db.events import add_event

    message = f"{caller.user} is not permitted to {action}: {why}"
    ts = int(context.now())

    def record(session: Session) -> None:
        add_event(session, ts=ts, kind="permission_denied", severity="warning",
                  message=message, data={"user": caller.user, "uid": caller.uid,
                                         "action": action})

    await context.write("record a refused request", record)
    raise PermissionDenied(message)
