"""Where the settings file is: $FLEET_CONFIG, else $XDG_CONFIG_HOME/fleet/config.yaml (no deps)."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_FILENAME = "config.yaml"


def settings_file_expected() -> bool:
    """Whether settings must be read: $FLEET_CONFIG names a file (which must then exist), or
    the default file exists."""
    return bool(os.environ.get("FLEET_CONFIG")) or default_config_path().exists()


def default_config_path() -> Path:
    """$FLEET_CONFIG, else $XDG_CONFIG_HOME/fleet/config.yaml (default ~/.config/fleet/...)."""
    explicit = os.environ.get("FLEET_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    config_home = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(config_home) if os.path.isabs(config_home) else Path("~", ".config").expanduser()
    return base / "fleet" / CONFIG_FILENAME
