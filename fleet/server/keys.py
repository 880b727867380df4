"""Typed keys of what the /v1 handlers find on the application: the Fleet, identities, streams."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from fleet.server.identity import Identities
from fleet.server.stream import Broadcaster

if TYPE_CHECKING:
    from fleet.service import Fleet

FLEET: web.AppKey[Fleet] = web.AppKey("fleet")
IDENTITIES = web.AppKey("identities", Identities)
BROADCASTER = web.AppKey("broadcaster", Broadcaster)
