"""Files a client needs to reach the test hosts: known_hosts, a fleet inventory, an ssh_config."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import yaml

from tests.cluster.sshd import KEX_ALGORITHMS


class ReachableHost(Protocol):
    name: str
    address: str
    port: int
    user: str
    identity_file: Path
    known_hosts_line: str


def _write_atomic(path: Path, text: str) -> None:
    temp_path = path.with_suffix(path.suffix + ".tmp")
    temp_path.write_text(text)
    os.replace(temp_path, path)


def inventory_mapping(hosts: Sequence[ReachableHost]) -> dict[str, object]:
    """fleet's own format (inventory.example.yaml): version 1, hosts: {name: {address, ...}}."""
    return {
        "version": 1,
        "hosts": {
            host.name: {
                "address": host.address,
                "port": host.port,
                "user": host.user,
                "identity_file": str(host.identity_file),
            }
            for host in hosts
        },
    }


def ssh_config_text(hosts: Sequence[ReachableHost], known_hosts_file: Path) -> str:
    """`ssh -F FILE NAME` reaches a host by name, with strict host-key checking and the fast kex."""
    blocks = []
    for host in hosts:
        blocks.append(
            f"Host {host.name}\n"
            f"    HostName {host.address}\n"
            f"    Port {host.port}\n"
            f"    User {host.user}\n"
            f"    IdentityFile {host.identity_file}\n"
        )
    blocks.append(
        "Host *\n"
        "    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {known_hosts_file}\n"
        "    GlobalKnownHostsFile /dev/null\n"
        "    StrictHostKeyChecking yes\n"
        "    BatchMode yes\n"
        "    ConnectTimeout 5\n"
        f"    KexAlgorithms {KEX_ALGORITHMS}\n"
    )
    return "\n".join(blocks)


def write_client_files(
    hosts: Sequence[ReachableHost],
    known_hosts_file: Path,
    inventory_file: Path,
    ssh_config_file: Path,
) -> None:
    _write_atomic(known_hosts_file, "".join(host.known_hosts_line + "\n" for host in hosts))
    _write_atomic(inventory_file, yaml.safe_dump(inventory_mapping(hosts), sort_keys=False))
    _write_atomic(ssh_config_file, ssh_config_text(hosts, known_hosts_file))
