"""asyncssh's options for one host: how the ssh config sees it, and the client keys it offers."""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple, cast

import asyncssh

from fleet.errors import AuthFailed, HostKeyRejected
from fleet.model import HostSpec
from fleet.ssh.client_keys import config_keypairs, default_keypairs, identity_keypairs
from fleet.ssh.hostkeys import host_field, no_known_hosts
from fleet.ssh.options import SshOptions

log = logging.getLogger(__name__)


class ConfigView(NamedTuple):
    """How the ssh config sees a host: the name it is looked up by, and asyncssh's options for
    that name with no key loaded (None: not built yet)."""

    lookup: str
    options: asyncssh.SSHClientConnectionOptions | None


async def config_view(
    spec: HostSpec, options: SshOptions, *, with_options: bool
) -> ConfigView:
    """The host's alias where the inventory loader resolved the address from it and the ssh
    config still maps it there (so that Host block's every option applies, as with
    `ssh ALIAS`: IdentitiesOnly, IdentityAgent, CertificateFile, ...), else its address.
    The options are built where the alias has to be checked, or `with_options` asks for them.
    Raises what asyncssh raises for a config it cannot use."""
    if spec.ssh_config_host and options.ssh_config_files:
        aliased = await construct_options(spec, options, None, spec.ssh_config_host)
        if aliased.host == spec.address:
            return ConfigView(spec.ssh_config_host, aliased)
        # The config maps the alias elsewhere now (edited, or not the one the inventory was
        # read with): the address fleet knows the host by is dialled, with its own options.
        log.debug("%s: ssh config maps %s to %s, not %s: looked up by address", spec.name,
                  spec.ssh_config_host, aliased.host, spec.address)
    if not with_options:
        return ConfigView(spec.address, None)
    return ConfigView(spec.address, await construct_options(spec, options, None, spec.address))


def _passphrase_protected(error: asyncssh.KeyImportError) -> bool:
    """Whether loading a key failed only because it is encrypted and no passphrase was given
    (asyncssh's own test when it skips such files for the agent)."""
    return str(error).startswith("Passphrase")


async def _unnamed_keys(
    spec: HostSpec, config_only: asyncssh.SSHClientConnectionOptions
) -> object:
    """The keys the inventory does not name, as loaded pairs (fleet.ssh.client_keys: once per
    process): every IdentityFile the host's ssh config names that exists (missing ones are
    skipped, as OpenSSH does), else the defaults; () where asyncssh is to resolve and load them
    for the host itself (a CertificateFile, or IdentitiesOnly with no IdentityFile, or config
    keys that all were skipped). Raises AuthFailed when none of the named files exists.

    The config's files are the ones the inventory loader resolved for the host's alias
    (`spec.ssh_config_identity_files`), else what `config_only` (options built with no keys)
    says of the name the config looks the host up by (config_view)."""
    config = getattr(config_only, "config", None)  # asyncssh's SSHClientConfig for this host
    if config is None or config.get("CertificateFile"):
        return ()
    identity_files = spec.ssh_config_identity_files or tuple(
        str(path) for path in config.get("IdentityFile") or ())
    if identity_files:
        try:
            keys = await asyncio.to_thread(
                config_keypairs, identity_files, bool(config.get("IdentitiesOnly")))
        except FileNotFoundError as exc:
            raise AuthFailed(spec.name, (
                f"no IdentityFile the ssh config names exists: {', '.join(identity_files)}"
            )) from exc
        return keys or ()
    if config.get("IdentitiesOnly"):  # asyncssh limits the agent to the default keys itself
        return ()
    return await asyncio.to_thread(default_keypairs) or ()


async def construct_options(
    spec: HostSpec, options: SshOptions, client_keys: object, lookup: str
) -> asyncssh.SSHClientConnectionOptions:
    """asyncssh options for `spec`, the ssh config looked up by `lookup` (config_view):
    explicit spec values, then ssh config, then defaults; `client_keys` None loads no key (for
    reading the ssh config's values alone)."""
    prepared = await asyncssh.SSHClientConnectionOptions.construct(
        config=[str(path) for path in options.ssh_config_files],
        host=lookup,
        port=spec.port,
        username=spec.user if spec.user else (),
        client_keys=client_keys,
        known_hosts=no_known_hosts,
        kex_algs=options.kex_algs,
        encryption_algs=options.encryption_algs,
        connect_timeout=options.handshake_deadline,
        login_timeout=options.login_timeout,
        keepalive_interval=options.keepalive_interval,
        keepalive_count_max=options.keepalive_count_max,
        encoding=None,
    )
    return cast(asyncssh.SSHClientConnectionOptions, prepared)


async def build_options(
    spec: HostSpec, options: SshOptions, view: ConfigView
) -> tuple[asyncssh.SSHClientConnectionOptions, bool]:
    """asyncssh options for `spec` with its client keys loaded (the inventory's identity file,
    else the defaults or what the ssh config names), and whether the identity file, being
    passphrase-protected, was left to the ssh-agent."""
    keys: object
    if spec.identity_file:
        try:
            keys = await asyncio.to_thread(identity_keypairs, spec.identity_file)
        except asyncssh.KeyImportError as exc:
            if not _passphrase_protected(exc):
                raise
            if not os.environ.get("SSH_AUTH_SOCK"):
                raise AuthFailed(spec.name, (
                    f"identity {spec.identity_file} is passphrase-protected and no ssh-agent "
                    f"runs here (SSH_AUTH_SOCK is unset): load it with `ssh-add "
                    f"{spec.identity_file}`; fleet asks for no passphrase")) from exc
            # As OpenSSH does: the agent holds the key and signs with it. asyncssh, left to
            # choose the keys, offers the agent's and skips encrypted files.
            return await construct_options(spec, options, (), view.lookup), True
    else:
        config_only = view.options or await construct_options(spec, options, None, view.lookup)
        keys = await _unnamed_keys(spec, config_only)
    return await construct_options(spec, options, keys, view.lookup), False


class HostKeyLookup(NamedTuple):
    """Where OpenSSH would look a host's key up: the name (HostKeyAlias, else `addr` or
    `[addr]:port`) and the known_hosts files (UserKnownHostsFile then GlobalKnownHostsFile)."""

    name: str
    files: tuple[Path, ...]


_EXPANSION = re.compile(r"%(.)|\$\{(.*?)\}")


def _expand_path(value: str, tokens: Mapping[str, str]) -> Path:
    """A known_hosts path from the ssh config: `%` tokens, `${VAR}` and `~` expanded, as
    OpenSSH expands them. ValueError for a token or variable it cannot expand."""

    def one(match: re.Match[str]) -> str:
        token, variable = match.group(1), match.group(2)
        if token is not None:
            if token not in tokens:
                raise ValueError(f"cannot expand %{token}")
            return tokens[token]
        if variable not in os.environ:
            raise ValueError(f"environment variable {variable} is not set")
        return os.environ[variable]

    return Path(os.path.expanduser(_EXPANSION.sub(one, value)))


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER
        return ""


def host_key_lookup(
    spec: HostSpec, prepared: asyncssh.SSHClientConnectionOptions, options: SshOptions
) -> HostKeyLookup:
    """How OpenSSH would check the key of the host `prepared` dials: by its HostKeyAlias if
    the ssh config gives one, in the files the ssh config's UserKnownHostsFile and
    GlobalKnownHostsFile name for it (`none`: no file), else in the options' files
    (~/.ssh/known_hosts{,2} and /etc/ssh/ssh_known_hosts{,2} by default). Raises
    HostKeyRejected (nothing can be verified) for a file name that cannot be expanded."""
    alias = cast("str | None", getattr(prepared, "host_key_alias", None))
    name = alias or host_field(prepared.host, prepared.port)
    config = getattr(prepared, "config", None)  # asyncssh's SSHClientConfig for this host
    get = cast(Callable[[str], object], config.get) if config is not None else (lambda _: None)
    tokens = dict(cast(Mapping[str, str], getattr(config, "_tokens", None) or {}))
    tokens.setdefault("%", "%")
    tokens.setdefault("d", os.path.expanduser("~"))
    tokens.setdefault("u", _local_user())
    tokens.setdefault("h", prepared.host)
    tokens.setdefault("p", str(prepared.port))
    tokens["k"] = alias or tokens.get("n", prepared.host)

    def files(option: str, default: tuple[Path, ...]) -> tuple[Path, ...]:
        configured = get(option)
        if not isinstance(configured, list):
            return default
        try:
            return tuple(_expand_path(str(value), tokens) for value in configured)
        except ValueError as exc:
            raise HostKeyRejected(spec.name, (
                f"cannot verify its host key: the ssh config's {option} "
                f"{' '.join(str(value) for value in configured)!r}: {exc}")) from exc

    found = (*files("UserKnownHostsFile", options.known_hosts_files),
             *files("GlobalKnownHostsFile", options.global_known_hosts_files))
    return HostKeyLookup(name, tuple(dict.fromkeys(found)))
