"""Plain frozen value types shared by inventory, probe, storage mapping, CLI and TUI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Connection = Literal["ssh", "local"]

# What one contact with a host found: it answered with a usable reading ("up"), or why not.
HostOutcome = Literal["up", "unreachable", "auth_failed", "host_key_rejected", "probe_error"]
# A host's state, the one vocabulary of `fleet status`, the monitor, the health rules and the
# database: "unknown" (never decided), "up", "down" (could not be reached) or what refused us.
# The rule from outcome to state is fleet.health.host_state.host_transition.
HostState = Literal["unknown", "up", "down", "auth_failed", "host_key_rejected", "probe_error"]
HOST_OUTCOMES: tuple[HostOutcome, ...] = get_args(HostOutcome)
HOST_STATES: tuple[HostState, ...] = get_args(HostState)

PROBE_SCHEMA_VERSION = 1

@dataclass(frozen=True)
class HostSpec:
    """One host as the inventory (or ssh config, or discovery) describes it.

    A host is identified by (address, port); `name` is the operator's label for it.
    """

    name: str
    address: str
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    # Every IdentityFile the ssh config names for the host, in its order (the inventory loader
    # fills them in when it resolves the host through the config): offered in turn, missing
    # files skipped, as OpenSSH does, when `identity_file` is unset.
    ssh_config_identity_files: tuple[str, ...] = ()
    # The name the ssh config was matched against when its HostName replaced `address` (the
    # alias): connections look the config up by it, as `ssh ALIAS` does, so every option of
    # the alias's Host block (IdentitiesOnly, IdentityAgent, CertificateFile, ...) applies.
    ssh_config_host: str | None = None
    python: str = "python3"
    connection: Connection = "ssh"
    proxy_jump: str | None = None
    groups: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    source: str = ""  # "FILE:LINE" where the host was defined, for error messages

    @property
    def key(self) -> tuple[str, int]:
        """The host's identity: (address, port)."""
        return (self.address, self.port)

    def label(self, name: str) -> str | None:
        """The value of label `name`, or None."""
        for key, value in self.labels:
            if key == name:
                return value
        return None
