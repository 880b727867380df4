"""Rendering effective settings as commented YAML or JSON (for `fleet config show`)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import yaml

from fleet.monitor.config import Settings, describe
from fleet.monitor.sections import SECTIONS


def settings_json(settings: Settings) -> str:
    """{"settings": {section: {key: value}}, "origins": {...}, "files": [...]} as JSON."""
    data = {
        "settings": settings.as_dict(),
        "origins": settings.origins,
        "files": list(settings.files),
    }
    return json.dumps(data, indent=2) + "\n"


def settings_yaml(settings: Settings) -> str:
    """Every effective value as YAML a settings file accepts, each with its doc and origin."""
    lines = [
        "# fleet settings in effect: built-in defaults, overridden by "
        + (", then ".join(settings.files) if settings.files else "no settings file"),
    ]
    data = settings.as_dict()
    for name, section_type in SECTIONS.items():
        doc = (section_type.__doc__ or "").strip().splitlines()[0]
        lines.append("")
        lines.append(f"# {doc}")
        lines.append(f"{name}:")
        for field in dataclasses.fields(section_type):
            value = data[name][field.name]
            origin = settings.origins.get(f"{name}.{field.name}", "default")
            comment = describe(section_type, field.name)
            note = f"  # {comment} [{origin}]" if comment else f"  # [{origin}]"
            lines.extend(_entry(field.name, value, note))
    return "\n".join(lines) + "\n"


def _entry(key: str, value: Any, note: str) -> list[str]:
    """`  key: value  # note` lines; lists and mappings as indented block YAML below the key."""
    if isinstance(value, list | dict) and value:
        block = yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False)
        rendered = ["  " + line for line in block.rstrip("\n").splitlines()]
        rendered[0] += note
        return rendered
    scalar = yaml.safe_dump(value, default_flow_style=True).strip()
    scalar = scalar.removesuffix("\n...").removesuffix("...").strip()
    return [f"  {key}: {scalar}{note}"]
