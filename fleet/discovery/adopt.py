"""Adopting a candidate: verify and pin its host key, store it as a managed host, log an event.

Trust rules (nothing is connected to for work before this succeeds):
  - the key is fetched without authenticating and checked with fleet's host-key policy:
    a key already trusted is kept, an unknown key is pinned only with accept_new, a changed or
    revoked key is always refused;
  - an announcement that uses the name of a host fleet already knows at another address must
    present that host's key, otherwise it is refused as a spoof;
  - an endpoint that is a managed host under another spelling (a DNS name and its address), or
    that presents the pinned key of a managed host, is that host: nothing new is added, so one
    machine (and its GPUs) is never managed twice.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import asyncssh

from fleet.discovery import ADOPTED_SPEC_SOURCE
from fleet.discovery.candidates import CandidateView, KnownHost
from fleet.errors import ConfigError, HostKeyRejected
from fleet.model import HostSpec
from fleet.ssh.options import SshOptions

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class AdoptTarget:
    """The host to adopt: a name for it, its SSH endpoint and the candidate rows it came from."""

    name: str
    address: str
    port: int
    candidate_ids: tuple[int, ...] = ()
    session: str | None = None


@dataclass(frozen=True)
class KeyCheck:
    """The verified host key: type, SHA256 fingerprint, whether it was pinned just now."""

    key_type: str
    fingerprint: str
    newly_pinned: bool
    same_as: tuple[str, str, int] | None = None  # (name, address, port) of a managed host


def host_name_for(text: str, address: str) -> str:
    """A host name usable in an inventory and in --hosts patterns, from an announced name."""
    cleaned = _NAME_UNSAFE.sub("-", text).strip("-.")[:63].rstrip("-.")
    if cleaned:
        return cleaned
    return "host-" + _NAME_UNSAFE.sub("-", address).strip("-")


def parse_endpoint(text: str) -> tuple[str, int] | None:
    """(address, port) from `ADDR`, `ADDR:PORT`, `[V6]:PORT` or a bare IPv6; None if not one."""
    value = text.strip()
    port = 22
    if value.startswith("["):
        host, closed, rest = value[1:].partition("]")
        if not closed:
            raise ConfigError(f"{text!r}: an address in brackets needs its closing ']'")
        if rest and not rest.startswith(":"):
            return None
        address, port_text = host, rest[1:] if rest else ""
    elif value.count(":") == 1:
        address, port_text = value.split(":")
    else:
        address, port_text = value, ""
    try:
        address = str(ipaddress.ip_address(address))
    except ValueError:
        return None
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ConfigError(f"{text!r}: port must be 1-65535")
        port = int(port_text)
    return address, port


def resolve_target(text: str, views: Sequence[CandidateView], *, name: str | None = None) -> \
        AdoptTarget:
    """The candidate named `text` (or at `text` = ADDR[:PORT]); `name` overrides its host name."""
    endpoint = parse_endpoint(text)
    if endpoint is not None:
        matches = [view for view in views if (view.address, view.ssh_port) == endpoint]
        if not matches:
            return AdoptTarget(name or host_name_for("", endpoint[0]), *endpoint)
    else:
        wanted = text.casefold()
        matches = [view for view in views if view.name.casefold() == wanted
                   or (view.server or "").casefold().removesuffix(".local") == wanted]
        host, colon, port_text = text.strip().rpartition(":")
        if not matches and colon and host and ":" not in host:
            if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
                raise ConfigError(f"{text!r}: port must be 1-65535")
            return AdoptTarget(name or host_name_for(host, host), host, int(port_text))
        if not matches:
            raise ConfigError(f"no discovered host named {text!r}; run `fleet discover` "
                              f"first, or adopt it by ADDRESS:PORT")
        if len(matches) > 1:
            where = ", ".join(view.endpoint for view in matches)
            raise ConfigError(f"{len(matches)} discovered hosts are named {text!r} ({where}); "
                              f"adopt one by ADDRESS:PORT")
    view = matches[0]
    return AdoptTarget(name or host_name_for(view.name, view.address), view.address,
                       view.ssh_port, view.candidate_ids, view.session)


RESERVED_NAMES = frozenset({"all", "adopted"})
RESOLVE_TIMEOUT_S = 2.0


def check_adopt_name(name: str, groups: Iterable[str]) -> str:
    """An operator's --name: a name --hosts can select (the inventory's own rule), not a group's
    name and not a reserved selector name. ConfigError naming --name otherwise."""
    from fleet.inventory.fields import check_name
    from fleet.inventory.yamlnodes import YamlFile

    check_name(YamlFile("--name"), None, name, "host")  # type: ignore[arg-type]
    if name.casefold() in RESERVED_NAMES:
        raise ConfigError(f"--name: {name!r} is reserved (a host selector); pick another name")
    if any(group.casefold() == name.casefold() for group in groups):
        raise ConfigError(f"--name: {name!r} is the name of an inventory group; pick another "
                          f"name")
    return name


async def resolve_addresses(host: str, timeout: float = RESOLVE_TIMEOUT_S) -> frozenset[str]:
    """The IP addresses `host` (a name or an address) stands for; empty if it does not resolve
    within `timeout` s. Uses the event loop's getaddrinfo, so nothing blocks."""
    bare = host.split("%")[0]
    try:
        return frozenset({str(ipaddress.ip_address(bare))})
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), timeout)
    except (TimeoutError, OSError, UnicodeError):
        return frozenset()
    return frozenset(str(ipaddress.ip_address(str(info[4][0]).split("%")[0]))
                     for info in infos)


async def resolved_aliases(known: Mapping[tuple[str, int], KnownHost]) -> \
        dict[tuple[str, int], tuple[tuple[str, int], KnownHost]]:
    """(ip, port) → the managed endpoint and host it belongs to, for every managed host (its
    address resolved when it is a name)."""
    keys = list(known)
    resolved = await asyncio.gather(*(resolve_addresses(address) for address, _ in keys))
    aliases: dict[tuple[str, int], tuple[tuple[str, int], KnownHost]] = {}
    for key, addresses in zip(keys, resolved, strict=True):
        for address in sorted(addresses):
            aliases.setdefault((address, key[1]), (key, known[key]))
    return aliases


async def same_endpoint(address: str, port: int, known: Mapping[tuple[str, int], KnownHost]) \
        -> tuple[tuple[str, int], KnownHost] | None:
    """The managed host at `address`:`port` (literally, or once both sides are resolved)."""
    if (address, port) in known:
        return (address, port), known[(address, port)]
    ours = await resolve_addresses(address)
    if not ours:
        return None
    aliases = await resolved_aliases({key: host for key, host in known.items()
                                      if key[1] == port})
    for ip in sorted(ours):
        if (ip, port) in aliases:
            return aliases[(ip, port)]
    return None


def check_name_free(target: AdoptTarget, known: Mapping[tuple[str, int], KnownHost]) -> None:
    """Refuse a name another managed host (at another endpoint) already has."""
    for (address, port), host in known.items():
        if host.name == target.name and (address, port) != (target.address, target.port):
            raise ConfigError(f"host name {target.name!r} is already used by {address}:{port}; "
                              f"pick another with --name")


async def verify_host_key(spec: HostSpec, options: SshOptions, *, accept_new: bool,
                          same_name_hosts: Sequence[tuple[str, int]] = (),
                          before_pin: Callable[[], None] | None = None,
                          expected_fingerprint: str | None = None,
                          managed_hosts: Sequence[tuple[str, str, int]] = ()) -> KeyCheck:
    """Fetch the key `spec` presents and apply the trust rules above; pins it when allowed.

    With `expected_fingerprint` (what the operator confirmed), an unknown key is pinned only
    when it is exactly that key: the key compared is the key pinned, on one connection.
    `before_pin` runs after the spoof check and before anything is pinned (e.g. a name
    check). When the key is a pinned key of one of `managed_hosts` (name, address, port), the
    host is that one: nothing is pinned and the result's `same_as` names it. Raises
    HostKeyRejected (unknown key without accept_new, changed, revoked,
    spoofed, or not the confirmed one) or HostUnreachable.
    """
    from fleet.ssh.connect import fetch_host_public_key
    from fleet.ssh.hostkeys import HostKeyPolicy, key_fingerprint, key_type_name

    key = await fetch_host_public_key(spec, options)
    offered = f"{key_type_name(key)} {key_fingerprint(key)}"
    if expected_fingerprint is not None:
        if not same_fingerprint(key_fingerprint(key), expected_fingerprint):
            raise HostKeyRejected(spec.name, (
                f"presents {offered}, not the key you confirmed ({expected_fingerprint}); "
                f"nothing was pinned"))
        accept_new = True
    for address, port in same_name_hosts:
        other = await asyncio.to_thread(HostKeyPolicy, spec.name, address, port, options)
        blobs = [entry.key_blob for entry in other.trusted if entry.key_blob is not None]
        if blobs and key.public_data not in blobs:
            raise HostKeyRejected(spec.name, (
                f"announced at {spec.address}:{spec.port} under the name of the known host at "
                f"{address}:{port}, but presents {offered}, not that host's key: refused as a "
                f"possible spoof"))
    same_as = await asyncio.to_thread(_managed_host_with_key, key, managed_hosts, options)
    if same_as is not None:
        return KeyCheck(key_type_name(key), key_fingerprint(key), False, same_as)
    if before_pin is not None:
        before_pin()
    policy = await asyncio.to_thread(HostKeyPolicy, spec.name, spec.address, spec.port,
                                     replace(options, accept_new=accept_new))
    accepted = await asyncio.to_thread(policy.check, key)
    if not accepted:
        raise HostKeyRejected(spec.name, policy.rejection or f"host key {offered} refused")
    return KeyCheck(key_type_name(key), key_fingerprint(key), policy.pinned_line is not None)


def _managed_host_with_key(key: asyncssh.SSHKey, managed: Sequence[tuple[str, str, int]],
                           options: SshOptions) -> tuple[str, str, int] | None:
    """The first managed host (name, address, port) that has `key` pinned or trusted."""
    from fleet.ssh.hostkeys import HostKeyPolicy

    for name, address, port in managed:
        policy = HostKeyPolicy(name, address, port, options)
        if any(entry.key_blob == key.public_data for entry in policy.trusted):
            return name, address, port
    return None


def same_fingerprint(seen: str, confirmed: str) -> bool:
    """Whether two SHA256 fingerprints are the same ("SHA256:" prefix and key type optional)."""
    def bare(text: str) -> str:
        return text.strip().split()[-1].removeprefix("SHA256:") if text.strip() else ""

    return bool(bare(confirmed)) and bare(seen) == bare(confirmed)


def adopted_spec(target: AdoptTarget, user: str | None,
                 identity_file: str | None = None) -> HostSpec:
    """The HostSpec of an adopted host (its source marks it as coming from the database)."""
    return HostSpec(name=target.name, address=target.address, port=target.port, user=user,
                    identity_file=identity_file, source=ADOPTED_SPEC_SOURCE,
                    labels=(("fleet.source", "adopted"),))


@dataclass(frozen=True)
class AdoptResult:
    """What `fleet adopt` did."""

    name: str
    address: str
    port: int
    key_type: str
    fingerprint: str
    newly_pinned: bool
    already_known_as: str | None
    inventory_path: Path | None
    inventory_line: int | None
    auto: bool = False

    @property
    def spec(self) -> HostSpec:
        """The managed host this adoption made (or found): its name is what to use next."""
        return HostSpec(name=self.name, address=self.address, port=self.port,
                        source=ADOPTED_SPEC_SOURCE, labels=(("fleet.source", "adopted"),))

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name, "address": self.address, "port": self.port,
            "key_type": self.key_type, "fingerprint": self.fingerprint,
            "newly_pinned": self.newly_pinned, "already_known_as": self.already_known_as,
            "inventory_path": str(self.inventory_path) if self.inventory_path else None,
            "inventory_line": self.inventory_line, "auto": self.auto,
        }
