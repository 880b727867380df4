"""Open SSH connections to hosts (direct or through jump hosts) and translate every failure."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from dataclasses import replace

import asyncssh

from fleet.errors import AuthFailed, HostError, HostKeyRejected, HostUnreachable
from fleet.model import HostSpec
from fleet.ssh import jump_spec
from fleet.ssh.host_options import ConfigView, build_options, config_view, host_key_lookup
from fleet.ssh.hostkeys import (
    HostKeyPolicy,
    PolicyClient,
    blob_fingerprint,
    key_fingerprint,
    key_type_name,
)
from fleet.ssh.options import SshOptions

# Slack on top of asyncssh's own connect_timeout before the outer guard gives up.
_GUARD_SLACK_S = 1.0


def parse_jump(value: str, owner: str) -> list[HostSpec]:
    """The hops of a ProxyJump value; HostUnreachable for `owner` when it names none usable."""
    try:
        return jump_spec.parse_jump(value)
    except jump_spec.BadJump as exc:
        raise HostUnreachable(owner, str(exc)) from None


def _where(spec: HostSpec) -> str:
    return f"{spec.address}:{spec.port}"


def _keys_description(client_keys: object) -> str:
    described = []
    for keypair in client_keys if isinstance(client_keys, list) else []:
        if isinstance(keypair, asyncssh.SSHKeyPair):
            described.append(
                f"{keypair.algorithm.decode()} {blob_fingerprint(keypair.public_data)}"
            )
    text = ", ".join(described) if described else "no key files"
    if os.environ.get("SSH_AUTH_SOCK"):
        text += ", plus keys from ssh-agent"
    return text


def translate_error(
    spec: HostSpec, exc: BaseException, options: SshOptions, policy: HostKeyPolicy | None
) -> HostError:
    """The fleet error for an asyncssh/OS failure while connecting to `spec`."""
    if policy is not None and policy.rejection is not None:
        return HostKeyRejected(spec.name, policy.rejection)
    where = _where(spec)
    if isinstance(exc, HostError):
        return exc
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return HostKeyRejected(spec.name, f"host key of {where} not accepted: {exc.reason}")
    if isinstance(exc, asyncssh.PermissionDenied):
        return AuthFailed(spec.name, f"permission denied at {where}: {exc.reason}")
    if isinstance(exc, asyncssh.ConnectionLost) and "Login timeout" in exc.reason:
        return HostUnreachable(
            spec.name, f"no SSH login within {options.login_timeout:g}s at {where}"
        )
    if isinstance(exc, asyncssh.DisconnectError):
        return HostUnreachable(spec.name, f"disconnected by {where}: {exc.reason}")
    if isinstance(exc, asyncssh.ChannelOpenError):
        return HostUnreachable(spec.name, f"jump host could not reach {where}: {exc.reason}")
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return HostUnreachable(
            spec.name,
            f"timed out after {options.handshake_deadline:g}s connecting to {where}",
        )
    if isinstance(exc, ConnectionRefusedError):
        return HostUnreachable(spec.name, f"connection refused at {where}")
    if isinstance(exc, socket.gaierror):
        return HostUnreachable(spec.name, f"cannot resolve {spec.address}: {exc.strerror}")
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return HostUnreachable(spec.name, f"network unreachable for {where}")
        return HostUnreachable(spec.name, f"cannot connect to {where}: {exc.strerror or exc}")
    return HostUnreachable(spec.name, f"{type(exc).__name__} connecting to {where}: {exc}")


async def _connect_hop(
    spec: HostSpec,
    options: SshOptions,
    tunnel: asyncssh.SSHClientConnection | None,
    view: ConfigView | None = None,
) -> asyncssh.SSHClientConnection:
    """One SSH connection (directly or over `tunnel`), bounded by the handshake deadline."""
    deadline = options.handshake_deadline + _GUARD_SLACK_S
    try:
        return await asyncio.wait_for(_open_hop(spec, options, tunnel, view), deadline)
    except TimeoutError as exc:
        raise HostUnreachable(
            spec.name, f"timed out after {deadline:g}s connecting to {_where(spec)}"
        ) from exc


async def _open_hop(
    spec: HostSpec,
    options: SshOptions,
    tunnel: asyncssh.SSHClientConnection | None,
    view: ConfigView | None = None,
) -> asyncssh.SSHClientConnection:
    """One SSH connection (directly or over `tunnel`), host key checked by fleet's policy;
    `view`, where the caller has it already, is config_view(spec, options)."""
    policy: HostKeyPolicy | None = None
    to_agent = False
    try:
        if view is None:
            view = await config_view(spec, options, with_options=False)
        prepared, to_agent = await build_options(spec, options, view)
        # Keys are looked up as OpenSSH looks them up for the host really dialled (ssh config
        # may rewrite HostName): by its HostKeyAlias, if any, in every known_hosts file
        # OpenSSH reads for it (its config's UserKnownHostsFile / GlobalKnownHostsFile).
        lookup = host_key_lookup(spec, prepared, options)
        policy = await asyncio.to_thread(
            HostKeyPolicy, spec.name, prepared.host, prepared.port, options,
            lookup_name=lookup.name, known_hosts_files=lookup.files,
        )
        bound_policy = policy
        # The keys `prepared` loaded go in as loaded pairs: asyncssh would load them again from
        # their paths (an RSA key: ~90 ms of CPU) when it prepares the connection's own options.
        loaded: dict[str, object] = (
            {"client_keys": prepared.client_keys} if prepared.client_keys else {}
        )
        conn = await asyncssh.connect(
            view.lookup,
            spec.port,
            tunnel=tunnel,
            config=[str(path) for path in options.ssh_config_files],
            options=prepared,
            client_factory=lambda: PolicyClient(bound_policy),
            server_host_key_algs=policy.server_host_key_algs(),
            **loaded,
        )
    except asyncssh.PermissionDenied as exc:
        user = spec.user or "(ssh config / local user)"
        keys = "unknown keys"
        if policy is not None:
            user = prepared.username
            keys = _keys_description(prepared.client_keys)
        hint = ""
        if to_agent:
            hint = (f"; identity {spec.identity_file} is passphrase-protected: is it in the "
                    f"ssh-agent (`ssh-add -l`)?")
        raise AuthFailed(
            spec.name,
            f"permission denied for user {user} at {_where(spec)} (offered: {keys}){hint}",
        ) from exc
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
        named = spec.identity_file or "named by the ssh config"
        raise AuthFailed(spec.name, f"cannot load identity {named}: {exc}") from exc
    except FileNotFoundError as exc:
        if policy is None:
            raise AuthFailed(spec.name, f"cannot load identity: {exc}") from exc
        raise translate_error(spec, exc, options, policy) from exc
    except (TimeoutError, OSError, asyncssh.Error, ValueError) as exc:
        raise translate_error(spec, exc, options, policy) from exc
    return conn


def _jump_of(spec: HostSpec, prepared: asyncssh.SSHClientConnectionOptions) -> str | None:
    if spec.proxy_jump:
        return spec.proxy_jump
    configured = prepared.tunnel
    if isinstance(configured, str) and configured.lower() != "none":
        return configured
    return None


async def _connect_chain(spec: HostSpec, options: SshOptions) -> asyncssh.SSHClientConnection:
    jump: str | None = spec.proxy_jump
    view: ConfigView | None = None
    if jump is None and options.ssh_config_files:
        try:
            view = await config_view(spec, options, with_options=True)
        except (OSError, asyncssh.Error, ValueError) as exc:
            raise AuthFailed(spec.name, f"cannot prepare connection: {exc}") from exc
        assert view.options is not None  # asked for
        jump = _jump_of(spec, view.options)
    hops = parse_jump(jump, spec.name) if jump else []
    tunnel: asyncssh.SSHClientConnection | None = None
    try:
        for hop in hops:
            try:
                hop_conn = await _connect_hop(hop, options, tunnel)
            except HostError as exc:
                # Reported against the target host: that is the host the caller asked for.
                raise type(exc)(spec.name, f"jump host {hop.name}: {exc.detail}") from exc
            hop_conn.set_tunnel(tunnel)  # closing a hop closes the hops under it
            tunnel = hop_conn
        # The target's options as its ssh config gives them are the ones the jump check read
        # (a hop never changes them): not parsed a second time.
        conn = await _connect_hop(replace(spec, proxy_jump=None), options, tunnel, view)
    except BaseException:
        if tunnel is not None:
            tunnel.close()
        raise
    conn.set_tunnel(tunnel)
    return conn


async def connect(spec: HostSpec, options: SshOptions) -> asyncssh.SSHClientConnection:
    """An authenticated SSH connection to `spec`, or a HostError saying why not.

    Raises HostUnreachable, AuthFailed or HostKeyRejected (chained to the original error),
    always with host=spec.name; ConfigError for the controller's own setup (a client key file
    whose .pub does not match it: fleet.ssh.client_keys). Each hop (jump hosts, then the
    host) is bounded by connect_timeout + login_timeout (+1 s guard).
    """
    return await _connect_chain(spec, options)


async def fetch_host_public_key(spec: HostSpec, options: SshOptions) -> asyncssh.SSHKey:
    """The host key `spec` presents (no authentication, nothing trusted or pinned)."""
    policy = await asyncio.to_thread(HostKeyPolicy, spec.name, spec.address, spec.port, options)
    tunnel: asyncssh.SSHClientConnection | None = None
    try:
        if spec.proxy_jump:
            tunnel = await _connect_chain_to_jump(spec, options)
        lookup = (await config_view(spec, options, with_options=False)).lookup
        # No login follows, so no client key is loaded (asyncssh would load the defaults, and a
        # broken key pair there would fail a fetch that never uses it).
        no_keys = await asyncssh.SSHClientConnectionOptions.construct(
            client_keys=None, config=None)
        key = await asyncio.wait_for(
            asyncssh.get_server_host_key(
                lookup,
                spec.port,
                tunnel=tunnel,
                config=[str(path) for path in options.ssh_config_files],
                kex_algs=options.kex_algs,
                server_host_key_algs=policy.server_host_key_algs(),
                options=no_keys,
            ),
            options.handshake_deadline,
        )
    except HostError:
        raise
    except (TimeoutError, OSError, asyncssh.Error, ValueError) as exc:
        raise translate_error(spec, exc, options, None) from exc
    finally:
        if tunnel is not None:
            tunnel.close()
    if key is None:
        raise HostKeyRejected(spec.name, f"{_where(spec)} presented no host key")
    return key


async def _connect_chain_to_jump(
    spec: HostSpec, options: SshOptions
) -> asyncssh.SSHClientConnection:
    """A connection to the last jump host of `spec` (which must have proxy_jump)."""
    assert spec.proxy_jump is not None
    hops = parse_jump(spec.proxy_jump, spec.name)
    last = hops[-1]
    earlier = ",".join(host_text(hop) for hop in hops[:-1]) or None
    try:
        return await connect(replace(last, proxy_jump=earlier), options)
    except HostError as exc:
        raise type(exc)(spec.name, f"jump host {last.name}: {exc.detail}") from exc


def host_text(spec: HostSpec) -> str:
    """`[user@]host:port` for a ProxyJump value."""
    return jump_spec.host_text_of(spec.user, spec.address, spec.port)


async def fetch_host_key(spec: HostSpec, options: SshOptions) -> tuple[str, str]:
    """(key type, SHA256 fingerprint) of the host key `spec` presents, for adopting a host."""
    key = await fetch_host_public_key(spec, options)
    return key_type_name(key), key_fingerprint(key)
