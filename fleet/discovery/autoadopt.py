"""Discovery settings from the inventory, and the opt-in auto-adopt policy (HW-SD style).

    settings:
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
from typing import TYPE_CHECKING

from fleet.discovery.browse import DEFAULT_SERVICE_TYPES, full_type, short_type
from fleet.errors import ConfigError

if TYPE_CHECKING:
    from fleet.discovery.candidates import CandidateView
    from fleet.inventory import Inventory

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_DISCOVERY_KEYS = frozenset({"interfaces", "service_types", "session", "auto_adopt"})
_AUTO_KEYS = frozenset({"session", "subnets", "user"})


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
    """The inventory's `settings.discovery` section, validated."""

    interfaces: tuple[str, ...] = ()
    service_types: tuple[str, ...] = DEFAULT_SERVICE_TYPES
    session: str | None = None
    auto_adopt: AutoAdoptPolicy | None = None


def discovery_settings(inventory: Inventory) -> DiscoverySettings:
    """Read `settings.discovery`; ConfigError naming the inventory file for anything invalid."""
    raw = inventory.settings.get("discovery")
    if raw is None:
        return DiscoverySettings()
    path = str(inventory.path) if inventory.path else None

    def fail(message: str) -> ConfigError:
        return ConfigError(f"settings.discovery: {message}", path=path,
                           line=inventory.settings_line)

    if not isinstance(raw, dict):
        raise fail("must be a mapping")
    unknown = set(raw) - _DISCOVERY_KEYS
    if unknown:
        raise fail(f"unknown keys {sorted(map(str, unknown))}; known: {sorted(_DISCOVERY_KEYS)}")
    interfaces = _strings(raw.get("interfaces", []), "interfaces", fail)
    types = _strings(raw.get("service_types", list(DEFAULT_SERVICE_TYPES)), "service_types",
                     fail)
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
        if not isinstance(auto, dict) or set(auto) - _AUTO_KEYS:
            raise fail(f"auto_adopt must be a mapping with keys {sorted(_AUTO_KEYS)}")
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


def _strings(value: object, what: str, fail: Callable[[str], ConfigError]) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise fail(f"{what} must be a list of strings")
    return [str(item) for item in value]
