"""Typed keys of what the /v1 handlers find on the application: Fleet, identities, streams,
jobs, and the pair's leadership."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from fleet.server.identity import Identities
from fleet.server.jobs import Jobs
from fleet.server.stream import Broadcaster

if TYPE_CHECKING:
    from fleet.server.leader import Leadership
    from fleet.service import Fleet

FLEET: web.AppKey[Fleet] = web.AppKey("fleet")
IDENTITIES = web.AppKey("identities", Identities)
BROADCASTER = web.AppKey("broadcaster", Broadcaster)
JOBS = web.AppKey("jobs", Jobs)
# None: no pair (SQLite), this server always leads.
LEADERSHIP: web.AppKey[Leadership | None] = web.AppKey("leadership")
