"""The one settings file: find it, validate it (file and line in errors), merge it with defaults.

Effective settings are the defaults, overridden by `$XDG_CONFIG_HOME/fleet/config.yaml` (or the
file named by $FLEET_CONFIG), overridden by the inventory's `settings:` section. The delegated
`discovery:` section is layered the same way, key by key (each key whole), and validated by
fleet.discovery.autoadopt.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from fleet.errors import ConfigError
from fleet.health.hooks import HookSettings
from fleet.health.retention import RetentionSettings
from fleet.health.rules import HealthSettings
from fleet.inventory.yamlnodes import Entry, YamlFile, is_null, kind
from fleet.monitor.config_origin import DEFAULT_ORIGIN, section_error
from fleet.monitor.sections import DELEGATED_SECTIONS, SECTIONS
from fleet.monitor.settings import MonitorSettings, SshSettings
from fleet.settings_path import default_config_path
from fleet.timeparse import parse_duration

if typing.TYPE_CHECKING:
    from fleet.discovery.autoadopt import DiscoverySettings
    from fleet.inventory import Inventory

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    """Every effective settings section, where each value came from, and the files read."""

    sections: dict[str, Any]
    origins: dict[str, str]  # "monitor.interval" -> "default" | "FILE:LINE"
    files: tuple[str, ...] = ()
    discovery_raw: dict[str, Any] = dataclasses.field(default_factory=dict)  # as written

    @property
    def discovery(self) -> DiscoverySettings:
        """The `discovery:` section (each layer was validated where it is written)."""
        from fleet.discovery.autoadopt import parse_discovery

        def fail(message: str) -> ConfigError:
            return ConfigError(f"settings.discovery: {message}")

        return parse_discovery(self.discovery_raw, fail)

    @property
    def monitor(self) -> MonitorSettings:
        """The `monitor:` section."""
        return self.section("monitor", MonitorSettings)

    @property
    def ssh(self) -> SshSettings:
        """The `ssh:` section."""
        return self.section("ssh", SshSettings)

    @property
    def health(self) -> HealthSettings:
        """The `health:` section."""
        return self.section("health", HealthSettings)

    @property
    def hooks(self) -> HookSettings:
        """The `hooks:` section."""
        return self.section("hooks", HookSettings)

    @property
    def retention(self) -> RetentionSettings:
        """The `retention:` section."""
        return self.section("retention", RetentionSettings)

    def section(self, name: str, expected: type[T]) -> T:
        """Section `name`, checked to be an `expected`."""
        value = self.sections[name]
        if not isinstance(value, expected):
            raise TypeError(f"settings section {name} is {type(value).__name__}")
        return value

    def with_values(self, section: str, **values: Any) -> Settings:
        """A copy with some values of one section replaced (command-line overrides).

        ValueError when a value is outside its documented bounds.
        """
        bounds: dict[str, typing.Mapping[str, Any]] = {
            f.name: f.metadata for f in dataclasses.fields(self.sections[section])
        }
        for key, value in values.items():
            minimum = bounds.get(key, {}).get("minimum")
            maximum = bounds.get(key, {}).get("maximum")
            if minimum is not None and value < minimum:
                raise ValueError(f"{section}.{key} must be at least {minimum:g}, got {value:g}")
            if maximum is not None and value > maximum:
                raise ValueError(f"{section}.{key} must be at most {maximum:g}, got {value:g}")
        updated = dataclasses.replace(self.sections[section], **values)
        origins = dict(self.origins)
        for key in values:
            origins[f"{section}.{key}"] = "command line"
        return Settings({**self.sections, section: updated}, origins, self.files,
                        self.discovery_raw)

    def as_dict(self) -> dict[str, Any]:
        """Plain data: {section: {key: value}} (nested dataclasses as dicts, tuples as lists),
        secrets of webhook URLs hidden."""
        from fleet.discovery.autoadopt import discovery_as_data

        data = {name: _plain(value) for name, value in self.sections.items()}
        data["discovery"] = discovery_as_data(self.discovery)
        return data


def with_interval(settings: Settings, text: str, *, what: str = "--interval") -> Settings:
    """`settings` with monitor.interval set from a command-line duration ("2s", "500ms").

    The one check `fleet monitor --interval` and `fleet tui --interval` share: ConfigError
    naming `what` when the text is malformed or outside monitor.interval's bounds (so 0 is
    refused everywhere).
    """
    seconds = parse_duration(text, what=what)
    try:
        return settings.with_values("monitor", interval=seconds)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from exc


def default_settings() -> Settings:
    """The built-in defaults only."""
    return _merge([])


def load_settings(inventory: Inventory | None = None, config_path: Path | None = None) -> Settings:
    """Defaults, then the config file (if it exists), then the inventory's `settings:` section."""
    layers: list[_Layer] = []
    path = config_path or default_config_path()
    if path.exists():
        layers.append(_read_config_file(path))
    elif config_path is None and os.environ.get("FLEET_CONFIG"):  # named, so meant: say so
        raise ConfigError("FLEET_CONFIG names a settings file that does not exist",
                          path=str(path))
    if inventory is not None and inventory.path is not None and inventory.settings_line:
        layers.append(_read_inventory_settings(inventory.path))
    return _merge(layers)


def inventory_settings(inventory: Inventory) -> Settings:
    """The defaults with only the inventory's `settings:` section on top: what `fleet inventory
    check` validates, whatever a user's settings file says. ConfigError names file and line."""
    if inventory.path is None or not inventory.settings_line:
        return default_settings()
    return _merge([_read_inventory_settings(inventory.path)])


@dataclass
class _Layer:
    """One source's values: section → {key: (value, origin)}, and each section's line."""

    display: str
    values: dict[str, dict[str, tuple[Any, str]]]
    section_lines: dict[str, str]
    discovery: dict[str, tuple[Any, str]] = dataclasses.field(default_factory=dict)


def _read_config_file(path: Path) -> _Layer:
    display = str(path)
    if not path.is_file():
        raise ConfigError("settings path is not a regular file", path=display)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"settings are not UTF-8 text: {exc.reason}", path=display) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read settings: {exc.strerror}", path=display) from exc
    source = YamlFile(display)
    if not text.strip() or all(
        not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()
    ):
        return _Layer(display, {}, {})
    root = source.compose(text)
    return _read_sections(source, root, "the settings file's top level")


def _read_inventory_settings(path: Path) -> _Layer:
    display = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot re-read the inventory's settings: {exc}", path=display) from exc
    source = YamlFile(display)
    root = source.compose(text)
    for entry in source.mapping(root, "the inventory's top level"):
        if entry.key == "settings":
            return _read_sections(source, entry.value, "settings")
    return _Layer(display, {}, {})


def _read_sections(source: YamlFile, root: yaml.Node, what: str) -> _Layer:
    layer = _Layer(source.path, {}, {})
    entries = source.mapping(root, what)
    source.check_keys(entries, [*SECTIONS, *DELEGATED_SECTIONS], what)
    for entry in entries:
        if entry.key in DELEGATED_SECTIONS:
            from fleet.discovery.autoadopt import check_discovery_section

            layer.discovery = check_discovery_section(source, entry)
            continue
        section_type = SECTIONS[entry.key]
        layer.section_lines[entry.key] = source.source(entry.key_node)
        layer.values[entry.key] = _read_fields(source, entry, section_type)
    return layer


def _read_fields(
    source: YamlFile, section: Entry, section_type: type
) -> dict[str, tuple[Any, str]]:
    fields = {f.name: f for f in dataclasses.fields(section_type)}
    hints = typing.get_type_hints(section_type)
    entries = source.mapping(section.value, f"settings section {section.key!r}")
    source.check_keys(entries, fields, f"settings section {section.key!r}")
    values: dict[str, tuple[Any, str]] = {}
    for entry in entries:
        what = f"{section.key}.{entry.key}"
        metadata = dict(fields[entry.key].metadata)
        metadata.setdefault("duration", entry.key.endswith("_s"))
        value = _convert(source, entry.value, hints[entry.key], what, metadata)
        values[entry.key] = (value, source.source(entry.key_node))
    return values


def _convert(
    source: YamlFile, node: yaml.Node, hint: Any, what: str, metadata: typing.Mapping[str, Any]
) -> Any:
    """The Python value of `node` as type `hint`, checked against the field's bounds."""
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if is_null(node) and type(None) in arguments:
            return None
        return _convert(source, node, _alternative(node, arguments), what, metadata)
    if origin is tuple:
        items = source.sequence(node, what)
        return tuple(
            _convert(source, item, arguments[0], f"{what}[{i}]", {}) for i, item in enumerate(items)
        )
    if origin is dict:
        return {
            entry.key: _convert(source, entry.value, arguments[1], f"{what}.{entry.key}", {})
            for entry in source.mapping(node, what)
        }
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _nested(source, node, hint, what)
    return _scalar(source, node, hint, what, metadata)


def _alternative(node: yaml.Node, arguments: tuple[Any, ...]) -> Any:
    """The member of a union type that fits the node's kind (list, mapping or single value)."""
    candidates = [argument for argument in arguments if argument is not type(None)]
    for argument in candidates:
        origin = typing.get_origin(argument)
        if isinstance(node, yaml.SequenceNode) and origin in (tuple, list):
            return argument
        if isinstance(node, yaml.MappingNode) and (
            origin is dict or dataclasses.is_dataclass(argument)
        ):
            return argument
        if isinstance(node, yaml.ScalarNode) and origin is None and not (
            dataclasses.is_dataclass(argument)
        ):
            return argument
    return candidates[0]


def _nested(source: YamlFile, node: yaml.Node, hint: type, what: str) -> Any:
    values = _read_fields(source, Entry(what, node, node), hint)
    missing = [field.name for field in dataclasses.fields(hint) if field.name not in values
               and field.default is dataclasses.MISSING
               and field.default_factory is dataclasses.MISSING]
    if missing:  # said in the file's words, not as a constructor's TypeError
        raise source.error(node, f"{what} needs {', '.join(map(repr, missing))}")
    try:
        return hint(**{key: value for key, (value, _) in values.items()})
    except (TypeError, ValueError) as exc:
        raise source.error(node, f"{what}: {exc}") from exc


def _scalar(
    source: YamlFile, node: yaml.Node, hint: Any, what: str, metadata: typing.Mapping[str, Any]
) -> Any:
    value = source.scalar(node, what)
    if hint is bool:
        if not isinstance(value, bool):
            raise source.error(node, f"{what} must be true or false, not {kind(node)}")
        return value
    if hint is str:
        return source.text(node, what)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise source.error(node, f"{what} must be a whole number, not {kind(node)}")
        number: float = value
    elif hint is float:
        if isinstance(value, str) and metadata.get("duration"):
            try:
                number = parse_duration(value, what=what)
            except ConfigError as exc:
                raise source.error(node, str(exc)) from exc
        elif isinstance(value, bool) or not isinstance(value, int | float):
            unit = " or a duration like 30s" if metadata.get("duration") else ""
            raise source.error(node, f"{what} must be a number{unit}, not {kind(node)}")
        else:
            number = float(value)
        if not math.isfinite(number):  # YAML's .nan and .inf pass every comparison below
            raise source.error(node, f"{what} must be a finite number, not {value!r}")
    else:
        raise TypeError(f"settings field {what} has an unsupported type {hint!r}")
    minimum, maximum = metadata.get("minimum"), metadata.get("maximum")
    if minimum is not None and number < minimum:
        raise source.error(node, f"{what} must be at least {minimum:g}, got {number:g}")
    if maximum is not None and number > maximum:
        raise source.error(node, f"{what} must be at most {maximum:g}, got {number:g}")
    return number


def _merge(layers: list[_Layer]) -> Settings:
    sections: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, section_type in SECTIONS.items():
        values: dict[str, Any] = {}
        for field in dataclasses.fields(section_type):
            origins[f"{name}.{field.name}"] = DEFAULT_ORIGIN
        where: str | None = None
        for layer in layers:
            for key, (value, origin) in layer.values.get(name, {}).items():
                values[key] = value
                origins[f"{name}.{key}"] = origin
            where = layer.section_lines.get(name, where)
        try:
            sections[name] = section_type(**values)
        except (TypeError, ValueError) as exc:
            raise section_error(name, section_type, exc, origins, where,
                                [layer.display for layer in layers],
                                [layer.section_lines for layer in layers]) from exc
    from fleet.discovery.setting_keys import DISCOVERY_KEYS

    discovery: dict[str, Any] = {}
    for key in sorted(DISCOVERY_KEYS):
        origins[f"discovery.{key}"] = DEFAULT_ORIGIN
    for layer in layers:
        for key, (value, origin) in layer.discovery.items():
            discovery[key] = value
            origins[f"discovery.{key}"] = origin
    return Settings(sections, origins, tuple(layer.display for layer in layers), discovery)




def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # A field whose metadata names `shown_as` (a webhook URL) is shown through it.
        return {f.name: f.metadata["shown_as"](getattr(value, f.name)) if "shown_as" in f.metadata
                else _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def describe(section_type: type, key: str) -> str:
    """The documentation of one settings field ('' if it has none)."""
    for field in dataclasses.fields(section_type):
        if field.name == key and field.metadata.get("doc"):
            return str(field.metadata["doc"])
    # else a `key: text` line of the class docstring
    for line in (section_type.__doc__ or "").splitlines():
        name, colon, text = line.strip().partition(":")
        if colon and name == key:
            return text.strip()
    return ""

