"""OpenSSH client config (`~/.ssh/config`): resolve a host through it, or list its hosts."""

from __future__ import annotations

import dataclasses
import functools
import getpass
import os
import re
import shlex
from collections.abc import Collection, Iterable
from pathlib import Path

from fleet.errors import ConfigError
from fleet.model import HostSpec

# Include files nest at most this deep, as a guard against include loops.
MAX_INCLUDE_DEPTH = 16
_ASYNCSSH_ERROR = re.compile(r"^(?P<path>.*) line (?P<line>[0-9]+): (?P<reason>.*)$", re.DOTALL)
_DIRECTIVE = re.compile(r"^(?P<keyword>[^\s=]+)(?:\s*=\s*|\s+)?(?P<rest>.*)$")
_DEFAULTS = HostSpec(name="", address="")


def default_ssh_config_path() -> Path | None:
    """`~/.ssh/config` if it exists."""
    path = Path("~", ".ssh", "config").expanduser()
    return path if path.is_file() else None


def _explicit_fields(spec: HostSpec) -> frozenset[str]:
    """Fields of `spec` that differ from HostSpec's defaults (the address when not the name)."""
    fields = {
        name
        for name in ("port", "user", "identity_file", "proxy_jump")
        if getattr(spec, name) != getattr(_DEFAULTS, name)
    }
    if spec.address != spec.name:
        fields.add("address")
    return frozenset(fields)


def resolve_ssh_config(
    spec: HostSpec, config_path: Path, *, explicit: Collection[str] | None = None
) -> HostSpec:
    """`spec` with HostName, Port, User, IdentityFile (all of them, as
    `ssh_config_identity_files`) and ProxyJump filled in from an ssh config; where HostName
    replaced the address, the address it was matched by is kept as `ssh_config_host`.

    The config is matched against the host's address, as `ssh ADDRESS` would. Fields named in
    `explicit` (the ones the inventory set) are kept; when `explicit` is None, fields that
    differ from HostSpec's defaults count as set. Local hosts are returned unchanged.
    Raises ConfigError naming the config file and line when it cannot be parsed.
    """
    if spec.connection == "local":
        return spec
    chosen = _explicit_fields(spec) if explicit is None else frozenset(explicit)
    options = _config_options(
        config_path,
        spec.address,
        user=spec.user if "user" in chosen else None,
        port=spec.port if "port" in chosen else None,
    )
    changes: dict[str, object] = {}
    hostname = options.get("Hostname")
    if "address" not in chosen and isinstance(hostname, str) and hostname:
        changes["address"] = hostname
        if hostname != spec.address:
            changes["ssh_config_host"] = spec.ssh_config_host or spec.address
    port = options.get("Port")
    if "port" not in chosen and isinstance(port, int):
        changes["port"] = port
    user = options.get("User")
    if "user" not in chosen and isinstance(user, str) and user:
        changes["user"] = user
    identity_files = options.get("IdentityFile")
    if "identity_file" not in chosen and isinstance(identity_files, list) and identity_files:
        changes["ssh_config_identity_files"] = tuple(str(path) for path in identity_files)
    jump = options.get("ProxyJump")
    if "proxy_jump" not in chosen and isinstance(jump, str) and jump.lower() != "none":
        changes["proxy_jump"] = jump
    return dataclasses.replace(spec, **changes) if changes else spec  # type: ignore[arg-type]


def _config_options(
    config_path: Path, host: str, *, user: str | None, port: int | None
) -> dict[str, object]:
    """The options asyncssh's OpenSSH config parser applies to `host`."""
    # Imported here: asyncssh costs ~0.3 s to import and most inventory reads never need it.
    from asyncssh.config import ConfigParseError, SSHClientConfig
    from asyncssh.misc import IllegalUserName

    display = str(config_path)
    if not config_path.is_file():
        raise ConfigError("ssh config file not found", path=display)
    try:
        config = SSHClientConfig.load(
            None,
            [config_path],
            False,
            False,
            False,
            _local_user(),
            () if user is None else user,
            host,
            () if port is None else port,
        )
    except ConfigParseError as exc:
        raise _parse_error(str(exc), display) from exc
    except IllegalUserName as exc:
        raise ConfigError(f"ssh config: {exc}", path=display) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read ssh config: {exc}", path=display) from exc
    return {
        name: config.get(name)
        for name in ("Hostname", "Port", "User", "IdentityFile", "ProxyJump")
        if config.get(name) is not None
    }


@functools.cache
def _local_user() -> str:
    """The controller's login name, for `%u` and `Match localuser` in ssh config."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER (some containers)
        return str(os.getuid())


def _parse_error(message: str, display: str) -> ConfigError:
    """asyncssh's `PATH line N: reason` as a ConfigError with path and line."""
    found = _ASYNCSSH_ERROR.match(message)
    if found is None:
        return ConfigError(f"ssh config: {message}", path=display)
    return ConfigError(
        f"ssh config: {found['reason']}", path=found["path"], line=int(found["line"])
    )


def _is_plain_alias(pattern: str) -> bool:
    """A `Host` pattern that names one host (no wildcard, negation or empty value)."""
    return bool(pattern) and not any(char in pattern for char in "*?!")


def _config_lines(path: Path, depth: int = 0) -> Iterable[tuple[Path, int, list[str]]]:
    """(file, line number, words) of every directive, following `Include` like OpenSSH."""
    if depth > MAX_INCLUDE_DEPTH:
        raise ConfigError(
            f"ssh config Include nests deeper than {MAX_INCLUDE_DEPTH}", path=str(path)
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read ssh config: {exc}", path=str(path)) from exc
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = _directive_words(line)
        except ValueError as exc:
            raise ConfigError(f"ssh config: {exc}", path=str(path), line=number) from exc
        if words[0].lower() == "include":
            for pattern in words[1:]:
                for included in _include_paths(pattern):
                    yield from _config_lines(included, depth + 1)
        else:
            yield path, number, words


def _directive_words(line: str) -> list[str]:
    """A config line split into keyword and arguments; `Key=value` and `Key = value` allowed."""
    found = _DIRECTIVE.match(line)
    if found is None:
        return shlex.split(line)
    return [found["keyword"], *shlex.split(found["rest"])]


def _include_paths(pattern: str) -> list[Path]:
    """Files an `Include` pattern names; relative ones are under ~/.ssh, as in asyncssh."""
    expanded = Path(pattern).expanduser()
    if expanded.anchor:
        base, relative = Path(expanded.anchor), str(Path(*expanded.parts[1:]))
    else:
        base, relative = Path("~", ".ssh").expanduser(), pattern
    return sorted(found for found in base.glob(relative) if found.is_file())


def load_ssh_config_hosts(path: Path) -> list[HostSpec]:
    """Every non-wildcard `Host` alias in an ssh config, resolved through that config.

    Aliases that resolve to an (address, port) already listed are left out (the first wins).
    Each spec's `source` is the `FILE:LINE` of its `Host` line.
    """
    if not path.is_file():
        raise ConfigError("ssh config file not found", path=str(path))
    hosts: list[HostSpec] = []
    seen_names: set[str] = set()
    seen_keys: set[tuple[str, int]] = set()
    for file, number, words in _config_lines(path):
        if words[0].lower() != "host":
            continue
        for alias in words[1:]:
            if not _is_plain_alias(alias) or alias in seen_names:
                continue
            seen_names.add(alias)
            base = HostSpec(name=alias, address=alias, source=f"{file}:{number}")
            spec = resolve_ssh_config(base, path, explicit=())
            if spec.key not in seen_keys:
                seen_keys.add(spec.key)
                hosts.append(spec)
    return hosts


def merge_ssh_config_hosts(
    hosts: Iterable[HostSpec], ssh_hosts: Iterable[HostSpec]
) -> tuple[HostSpec, ...]:
    """Inventory hosts followed by ssh-config hosts not already present.

    An ssh-config host is left out when an inventory host has its (address, port) or its
    name: the inventory is the operator's deliberate list and always wins.
    """
    merged = list(hosts)
    keys = {spec.key for spec in merged}
    names = {spec.name for spec in merged}
    for spec in ssh_hosts:
        if spec.key not in keys and spec.name not in names:
            merged.append(spec)
            keys.add(spec.key)
            names.add(spec.name)
    return tuple(merged)
