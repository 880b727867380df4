"""The registry of settings sections: YAML section name → the dataclass that validates it."""

from __future__ import annotations

from fleet.dispatch.fair_share import QueueSettings
from fleet.health.hooks import HookSettings
from fleet.health.retention import RetentionSettings
from fleet.health.rules import HealthSettings
from fleet.monitor.settings import MonitorSettings, SshSettings
from fleet.placement.idle import IdleSettings
from fleet.placement.limits import LimitSettings
from fleet.server.settings import ServeSettings

# Order is the order `fleet config show` prints them in.
SECTIONS: dict[str, type] = {
    "monitor": MonitorSettings,
    "ssh": SshSettings,
    "health": HealthSettings,
    "hooks": HookSettings,
    "retention": RetentionSettings,
    "serve": ServeSettings,
    "queue": QueueSettings,
    "limits": LimitSettings,
    "idle": IdleSettings,
}

# Sections that live in the same settings file but are validated by their own feature when it
# runs (`discovery`: fleet.discovery.autoadopt.discovery_settings, with the file's line).
DELEGATED_SECTIONS: frozenset[str] = frozenset({"discovery"})
