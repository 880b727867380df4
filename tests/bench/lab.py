"""The benchmark's namespace hosts and the files each tool needs to reach a subset of them."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.bench.common import trust_known_hosts
from tests.cluster.netcluster import Cluster

GPUS_PER_HOST = 8


def start_lab(host_count: int) -> Cluster:
    """`host_count` namespace hosts (OpenSSH sshd), 8 simulated GPUs each (some with processes)."""
    from tests.cluster.__main__ import build_specs
    from tests.cluster.netcluster import start_netns_cluster

    specs = build_specs(host_count, f"mixed:{GPUS_PER_HOST}", [], "gpu")
    return start_netns_cluster(specs)


@dataclass
class HostSet:
    """The first `count` hosts of the lab, with a fleet inventory, ssh files and Ansible files."""

    lab: Cluster
    count: int
    workdir: Path

    @property
    def hosts(self) -> list[object]:
        return list(self.lab.hosts[: self.count])

    @property
    def names(self) -> list[str]:
        return [host.name for host in self.lab.hosts[: self.count]]

    @property
    def home(self) -> Path:
        return self.workdir / "home"

    @property
    def db_path(self) -> Path:
        return self.workdir / "fleet.db"

    @property
    def fleet_inventory(self) -> Path:
        return self.workdir / "inventory.yaml"

    @property
    def hosts_json(self) -> Path:
        return self.workdir / "hosts.json"

    @property
    def names_file(self) -> Path:
        return self.workdir / "hostnames"

    @property
    def ansible_cfg(self) -> Path:
        return self.workdir / "ansible.cfg"

    @property
    def ansible_inventory(self) -> Path:
        return self.workdir / "ansible_hosts.ini"

    def write(self, monitor_settings: str = "") -> HostSet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(exist_ok=True)
        trust_known_hosts(self.home, self.lab.known_hosts_file)
        hosts = self.lab.hosts[: self.count]
        lines = ["version: 1", "hosts:"]
        for host in hosts:
            lines += [f"  {host.name}:", f"    address: {host.address}",
                      f"    port: {host.port}", f"    user: {host.user}",
                      f"    identity_file: {host.identity_file}"]
        self.fleet_inventory.write_text("\n".join(lines) + "\n" + monitor_settings)
        self.hosts_json.write_text(json.dumps(
            [{"name": h.name, "address": h.address, "port": h.port, "user": h.user}
             for h in hosts]))
        self.names_file.write_text("".join(f"{h.name}\n" for h in hosts))
        self.ansible_inventory.write_text(
            "[gpus]\n" + "".join(f"{h.name} ansible_user={h.user}\n" for h in hosts))
        self.ansible_cfg.write_text(ansible_config(self, self.count))
        return self


def ansible_config(host_set: HostSet, forks: int) -> str:
    """What a user tuning Ansible for speed would set; fresh connections (no ControlPersist).

    pipelining: one SSH session per module instead of several; interpreter_python: skips the
    interpreter-discovery round trip; host keys checked by ssh against the cluster's known_hosts
    (the cluster's ssh_config sets UserKnownHostsFile, StrictHostKeyChecking and the kex).
    """
    return (
        "[defaults]\n"
        f"inventory = {host_set.ansible_inventory}\n"
        f"forks = {forks}\n"
        "host_key_checking = True\n"
        "interpreter_python = /usr/bin/python3\n"
        "gathering = explicit\n"
        "retry_files_enabled = False\n"
        f"local_tmp = {host_set.workdir / 'ansible-local'}\n"
        "[ssh_connection]\n"
        f"ssh_args = -F {host_set.lab.ssh_config_file} -o ControlMaster=no\n"
        "pipelining = True\n"
    )


def ansible_env(host_set: HostSet) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"ANSIBLE_CONFIG": str(host_set.ansible_cfg), "HOME": str(host_set.home),
                "ANSIBLE_NOCOLOR": "1", "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3"})
    return env


def subsets(lab: Cluster, counts: Sequence[int], workdir: Path) -> list[HostSet]:
    return [HostSet(lab, count, workdir / f"h{count}").write() for count in counts]
