"""The keys of the `discovery:` settings section (light: read by every settings load)."""

from __future__ import annotations

DISCOVERY_KEYS = frozenset({"interfaces", "service_types", "session", "auto_adopt"})
AUTO_ADOPT_KEYS = frozenset({"session", "subnets", "user"})
