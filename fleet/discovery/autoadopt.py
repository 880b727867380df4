"""Discovery settings, and the opt-in auto-adopt policy (HW-SD style).

The `discovery:` section is layered like every settings section (defaults, then the settings
file, then the inventory's `settings:`; each key whole), see fleet.monitor.config:

    discovery:
        interfaces: [eth1]              # names or addresses; default: every interface
        service_types: [_fleet._tcp]    # default: all of browse.DEFAULT_SERVICE_TYPES
        session: lab-a                  # list only announcements of this session
        auto_adopt:                     # off unless present
          session: lab-a                # required: only hosts announcing this session
          subnets: [10.0.0.0/24]        # required: only addresses inside these networks
          user: lab                     # optional login user for auto-adopted hosts

Auto-adoption pins a new host's key on first use (trust on first use), so it is limited to one
session and explicit subnets; a changed key is still refused.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleet.discovery.browse import DEFAULT_SERVICE_TYPES, full_type, short_type
from fleet.discovery.setting_keys import AUTO_ADOPT_KEYS, DISCOVERY_KEYS
from fleet.errors import ConfigError

if TYPE_CHECKING:
    from fleet.discovery.candidates import CandidateView
    from fleet.inventory import Inventory
    from fleet.inventory.yamlnodes import Entry, YamlFile
    from fleet.monitor.config import Settings

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class AutoAdoptPolicy:
    """Adopt new candidates of `session` whose address lies in one of `subnets`."""

    session: str
    subnets: tuple[IpNetwork, ...]
    user: str | None = None

    def refusal(self, view: CandidateView) -> str | None:
        """Why `view` is not auto-adopted, or None when it is eligible."""
        if view.state != "new":
            return f"state is {view.state}"
        if view.session != self.session:
            return f"session {view.session!r} is not {self.session!r}"
        address = ipaddress.ip_address(view.address.split("%")[0])
        if not any(address in subnet for subnet in self.subnets):
            return f"{view.address} is outside {', '.join(map(str, self.subnets))}"
        return None

    @classmethod
    def build(cls, session: str, subnets: Sequence[str], user: str | None = None) -> \
            AutoAdoptPolicy:
        """A policy from plain values; ConfigError for an empty session or a bad subnet."""
        if not session.strip():
            raise ConfigError("auto-adopt needs a session name")
        if not subnets:
            raise ConfigError("auto-adopt needs at least one subnet (e.g. 10.0.0.0/24)")
        networks: list[IpNetwork] = []
        for subnet in subnets:
            try:
                networks.append(ipaddress.ip_network(subnet, strict=False))
            except ValueError as exc:
                raise ConfigError(f"auto-adopt subnet {subnet!r}: {exc}") from exc
        return cls(session.strip(), tuple(networks), user)


@dataclass(frozen=True)
class DiscoverySettings:
    """The effective `discovery:` settings section, validated."""

    interfaces: tuple[str, ...] = ()
    service_types: tuple[str, ...] = DEFAULT_SERVICE_TYPES
    session: str | None = None
    auto_adopt: AutoAdoptPolicy | None = None


def discovery_settings(inventory: Inventory) -> DiscoverySettings:
    """Only the inventory's `settings.discovery`; ConfigError naming the inventory file for
    anything invalid. (Commands use `effective_discovery_settings`: every layer.)"""
    raw = inventory.settings.get("discovery")
    if raw is None:
        return DiscoverySettings()
    path = str(inventory.path) if inventory.path else None

    def fail(message: str) -> ConfigError:
        return ConfigError(f"settings.discovery: {message}", path=path,
                           line=inventory.settings_line)

    return parse_discovery(raw, fail)


def effective_discovery_settings(inventory: Inventory) -> DiscoverySettings:
    """The `discovery:` section in effect: defaults, the settings file, the inventory's
    `settings:` (an inventory built in memory, without a file, adds its own `settings`)."""
    from fleet.monitor.config import load_settings

    settings = load_settings(inventory)
    own = inventory.settings.get("discovery") if inventory.path is None else None
    if own is None:
        return settings.discovery
    if not isinstance(own, dict):
        return discovery_settings(inventory)  # the error it gives

    def fail(message: str) -> ConfigError:
        return ConfigError(f"settings.discovery: {message}")

    return parse_discovery({**settings.discovery_raw, **own}, fail)


def parse_discovery(raw: object, fail: Callable[[str], ConfigError]) -> DiscoverySettings:
    """A `discovery:` mapping as plain data, validated; `fail` makes the error of a message.
    Each key is checked on its own, so one key can be checked where it is written."""
    if not isinstance(raw, dict):
        raise fail("must be a mapping")
    unknown = set(raw) - DISCOVERY_KEYS
    if unknown:
        raise fail(f"unknown keys {sorted(map(str, unknown))}; known: {sorted(DISCOVERY_KEYS)}")
    interfaces = _strings(_or(raw.get("interfaces"), []), "interfaces", fail)
    types = _strings(_or(raw.get("service_types"), list(DEFAULT_SERVICE_TYPES)),
                     "service_types", fail)
    try:
        types = [short_type(full_type(kind)) for kind in types]
    except ConfigError as exc:
        raise fail(str(exc)) from exc
    session = raw.get("session")
    if session is not None and not isinstance(session, str):
        raise fail("session must be a string")
    policy = None
    auto = raw.get("auto_adopt")
    if auto is not None:
        if not isinstance(auto, dict) or set(auto) - AUTO_ADOPT_KEYS:
            raise fail(f"auto_adopt must be a mapping with keys {sorted(AUTO_ADOPT_KEYS)}")
        user = auto.get("user")
        if not isinstance(auto.get("session"), str) or (user is not None and
                                                        not isinstance(user, str)):
            raise fail("auto_adopt.session (and user) must be strings")
        try:
            policy = AutoAdoptPolicy.build(auto["session"],
                                           _strings(auto.get("subnets", []), "subnets", fail),
                                           user)
        except ConfigError as exc:
            raise fail(str(exc)) from exc
    return DiscoverySettings(tuple(interfaces), tuple(types), session, policy)


def discovery_as_data(settings: DiscoverySettings) -> dict[str, object]:
    """Plain data of `settings` in the shape a `discovery:` section is written in."""
    policy = settings.auto_adopt
    return {
        "interfaces": list(settings.interfaces),
        "service_types": list(settings.service_types),
        "session": settings.session,
        "auto_adopt": None if policy is None else {
            "session": policy.session, "subnets": [str(net) for net in policy.subnets],
            **({"user": policy.user} if policy.user is not None else {})},
    }


def _or(value: object, default: object) -> object:
    """`value`, or `default` where the key is absent or null (as `fleet config show` writes)."""
    return default if value is None else value


def _strings(value: object, what: str, fail: Callable[[str], ConfigError]) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise fail(f"{what} must be a list of strings")
    return [str(item) for item in value]


def discovery_yaml(settings: Settings) -> str:
    """The `discovery:` section as `fleet config show` prints it: YAML a settings file
    accepts, each key with its origin (the other sections come from fleet.monitor.render)."""
    import yaml

    from fleet.monitor.config_origin import DEFAULT_ORIGIN

    data = settings.as_dict()["discovery"]
    docs = {
        "interfaces": "names or addresses to browse on; [] = every interface",
        "service_types": "mDNS service types browsed",
        "session": "list only announcements of this session; null = every session",
        "auto_adopt": "adopt new hosts of one session inside these subnets (pins their key); "
                      "null = off",
    }
    lines = ["", "# mDNS discovery (fleet discover, auto-adopt)", "discovery:"]
    for key, value in data.items():
        note = f"  # {docs[key]} [{settings.origins.get(f'discovery.{key}', DEFAULT_ORIGIN)}]"
        if isinstance(value, list | dict) and value:
            block = yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False)
            rendered = ["  " + line for line in block.rstrip("\n").splitlines()]
            rendered[0] += note
            lines.extend(rendered)
        else:
            scalar = yaml.safe_dump(value, default_flow_style=True).strip()
            scalar = scalar.removesuffix("...").strip()
            lines.append(f"  {key}: {scalar}{note}")
    return "\n".join(lines) + "\n"


def check_discovery_section(source: YamlFile, section: Entry) -> dict[str, tuple[Any, str]]:
    """Validate a `discovery:` section where it is written (config file or inventory): unknown
    keys with their line and the closest valid key, then each key's value, as discovery reads
    it, at that key's line. Returns key → (value as plain data, "FILE:LINE")."""
    import yaml

    from fleet.inventory.yamlnodes import is_null

    what = "settings section 'discovery'"
    if is_null(section.value):
        return {}
    entries = source.mapping(section.value, what)
    source.check_keys(entries, DISCOVERY_KEYS, what)
    values: dict[str, tuple[Any, str]] = {}
    for entry in entries:
        if entry.key == "auto_adopt" and isinstance(entry.value, yaml.MappingNode):
            source.check_keys(source.mapping(entry.value, "discovery.auto_adopt"), AUTO_ADOPT_KEYS,
                              "discovery.auto_adopt")
        raw = source.to_python(entry.value, f"discovery.{entry.key}")

        def fail(message: str, node: yaml.Node = entry.value) -> ConfigError:
            return source.error(node, f"settings.discovery: {message}")

        parse_discovery({entry.key: raw}, fail)
        values[entry.key] = (raw, source.source(entry.key_node))
    return values
