"""The README's "every key with its default" settings block is a valid settings file, and each
plain value it shows is the built-in default (so a changed default cannot leave it behind)."""

from __future__ import annotations

from pathlib import Path

import yaml

from fleet.monitor.config import default_settings, load_settings

README = Path(__file__).resolve().parents[2] / "README.md"
# Sections the block fills with examples (hook commands, webhooks) or that a config file may
# not hold (discovery: only in an inventory's settings: section).
EXAMPLE_SECTIONS = {"discovery"}


def readme_settings_block() -> str:
    """The YAML block that follows "Every key with its default:" in the README."""
    after = README.read_text().split("Every key with its default:", 1)[1]
    return after.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_readme_settings_block_shows_the_defaults(tmp_path: Path) -> None:
    documented = yaml.safe_load(readme_settings_block())
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(
        {name: keys for name, keys in documented.items() if name not in EXAMPLE_SECTIONS}))
    loaded, defaults = load_settings(config_path=config), default_settings()
    compared = []
    for name, keys in documented.items():
        if name in EXAMPLE_SECTIONS:
            continue
        for key, shown in keys.items():
            if isinstance(shown, (list, dict)):  # examples, not defaults
                continue
            # The README's value as fleet reads it (durations, numbers) against the default.
            default = getattr(defaults.sections[name], key)
            assert getattr(loaded.sections[name], key) == default, \
                f"README shows {name}.{key}: {shown}, the default is {default!r}"
            compared.append(f"{name}.{key}")
    assert "monitor.flush_interval" in compared and len(compared) > 30
