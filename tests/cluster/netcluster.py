"""A cluster of namespace hosts on one bridge (root only): setup, client files, teardown."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from tests.cluster import gpuconf, netns, sshd
from tests.cluster.announcer import REGISTER_TIMEOUT_S
from tests.cluster.cleanup import cleanup_stale_runs, teardown_run
from tests.cluster.clientfiles import write_client_files
from tests.cluster.hosts import (
    SSHD_START_TIMEOUT_S,
    ClusterHostSpec,
    NetnsHost,
    known_hosts_line,
    running_announcers,
)
from tests.cluster.state import (
    RecordedProcess,
    RunState,
    new_run_id,
    recorded_runs,
    state_base_dir,
    state_lock,
)

VERIFY_TIMEOUT_S = 60.0


class Cluster:
    """Running test hosts plus the files a client needs to reach them (shared by both modes)."""

    mode = "netns"

    def __init__(self, state: RunState, hosts: Sequence[NetnsHost], client_key: Path) -> None:
        self.state = state
        self.hosts: list[NetnsHost] = list(hosts)
        self.client_key = client_key
        self.run_dir = Path(state.run_dir)
        self.known_hosts_file = self.run_dir / "known_hosts"
        self.inventory_file = self.run_dir / "inventory.yaml"
        self.ssh_config_file = self.run_dir / "ssh_config"
        self.setup_seconds = 0.0
        self.closing = False
        self.closed = False

    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def state_file(self) -> Path:
        return self.state.path

    @property
    def controller_address(self) -> str:
        assert self.state.subnet_index is not None
        return netns.controller_address(self.state.subnet_index)

    @property
    def bridge(self) -> str:
        assert self.state.bridge is not None
        return self.state.bridge

    def host(self, name: str) -> NetnsHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"no host named {name!r} in cluster {self.run_id}")

    def write_client_files(self) -> None:
        """(Re)writes known_hosts, the fleet inventory and an ssh_config from current host keys."""
        write_client_files(
            self.hosts, self.known_hosts_file, self.inventory_file, self.ssh_config_file
        )

    def record_processes(self) -> None:
        if self.closing:
            return  # teardown removes the state file; never write it back
        self.state.processes = [
            host.sshd_record for host in self.hosts if host.sshd_record is not None
        ]
        self.state.processes += running_announcers(self.hosts)
        self.state.save()

    def close(self) -> None:
        """Stops announcers (goodbye), kills every process in the hosts, deletes the network."""
        if self.closed:
            return
        for host in self.hosts:  # all say goodbye at once (~0.3 s each), then are reaped
            host.request_announcer_stop()
        for host in self.hosts:
            host.stop_announcer()
        self.closing = True
        teardown_run(self.state)
        for host in self.hosts:
            host.thaw_sshd()
            if host.sshd_process is not None:
                host.sshd_process.wait(timeout=SSHD_START_TIMEOUT_S)  # reap our child
        self.closed = True

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def start_netns_cluster(
    specs: Sequence[ClusterHostSpec], *, detached: bool = False, user: str = "root"
) -> Cluster:
    """Builds the hosts, starts sshd in each, verifies every login, starts requested announcers.

    detached=False ties the run to this process: if it dies, the next run removes the leftovers.
    """
    if os.geteuid() != 0:
        raise PermissionError("needs root: network namespaces")
    sshd.require_sshd()
    _check_specs(specs)
    started = time.monotonic()
    cleanup_stale_runs()
    run_id = new_run_id()
    run_dir = state_base_dir() / run_id
    owner = None if detached else RecordedProcess.of(os.getpid(), "owner")
    with state_lock():
        subnet_index = netns.pick_subnet_index(_recorded_subnets(),
                                               netns.subnets_for(len(specs)))
        state = RunState(
            run_id=run_id,
            mode="netns",
            run_dir=str(run_dir),
            owner=owner,
            bridge=netns.bridge_name(run_id),
            subnet_index=subnet_index,
        )
        links = [
            netns.HostLink(
                netns.namespace_name(run_id, index),
                netns.veth_name(run_id, index),
                netns.host_address(subnet_index, index),
            )
            for index in range(len(specs))
        ]
        state.namespaces = [link.namespace for link in links]
        state.veths = [link.veth for link in links]
        state.save()  # recorded before anything exists, so an interrupted setup is cleaned later
    cluster: Cluster | None = None
    try:
        run_dir.mkdir(mode=0o700, parents=True)
        netns.create_network(state.bridge or "", subnet_index, links)
        client_key = run_dir / "client_ed25519"
        client_public_line = sshd.write_ed25519_key(client_key, f"fleet-test-cluster-{run_id}")
        authorized_keys = run_dir / "authorized_keys"
        authorized_keys.write_text(client_public_line + "\n")
        hosts = [
            _prepare_host(spec, link, run_dir, authorized_keys, client_key, user)
            for spec, link in zip(specs, links, strict=True)
        ]
        cluster = Cluster(state, hosts, client_key)
        for host in hosts:
            host.on_process_change = cluster.record_processes
            host.on_host_key_change = cluster.write_client_files
            host.launch_sshd()
        deadline = time.monotonic() + SSHD_START_TIMEOUT_S + len(hosts) * 0.2
        for host in hosts:
            host.wait_sshd_listening(deadline)
        cluster.write_client_files()
        targets = [sshd.SshTarget(host.name, host.address, host.port) for host in hosts]
        hostnames = sshd.verify_hosts(
            targets,
            user=user,
            client_key=client_key,
            known_hosts=cluster.known_hosts_file,
            timeout_s=VERIFY_TIMEOUT_S,
        )
        wrong = {name: seen for name, seen in hostnames.items() if name != seen}
        if wrong:
            raise RuntimeError(f"hosts report the wrong hostname (expected → seen): {wrong}")
        _start_announcers(cluster, specs)
        cluster.setup_seconds = time.monotonic() - started
        return cluster
    except BaseException:
        if cluster is not None:
            cluster.close()
        else:
            teardown_run(state)
        raise


def _check_specs(specs: Sequence[ClusterHostSpec]) -> None:
    if not 1 <= len(specs) <= netns.MAX_HOSTS:
        raise ValueError(f"a test cluster has 1..{netns.MAX_HOSTS} hosts, not {len(specs)}")
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"duplicate host names: {duplicates}")


def _recorded_subnets() -> set[int]:
    """Every /24 a recorded run holds, including the later ones of a run over 240 hosts."""
    return {state.subnet_index + subnet
            for state in recorded_runs() if state.subnet_index is not None
            for subnet in range(netns.subnets_for(len(state.namespaces)))}


def _prepare_host(
    spec: ClusterHostSpec,
    link: netns.HostLink,
    run_dir: Path,
    authorized_keys: Path,
    client_key: Path,
    user: str,
) -> NetnsHost:
    host_dir = run_dir / "hosts" / spec.name
    home = host_dir / "home"
    tmp = host_dir / "tmp"
    home.mkdir(mode=0o700, parents=True)
    tmp.mkdir()
    tmp.chmod(0o1777)
    host_key = host_dir / "ssh_host_ed25519_key"
    public_line = sshd.write_ed25519_key(host_key, f"host-{spec.name}")
    config_path = None
    session_env = {"PATH": sshd.HOST_PATH}
    if spec.gpus is not None:
        config_path = host_dir / "gpus.conf"
        gpuconf.write_gpus(config_path, spec.gpus)
        session_env = gpuconf.session_env(config_path, run_dir)
    config = host_dir / "sshd_config"
    sshd.write_sshd_config(
        config,
        address=link.address,
        port=22,
        host_key=host_key,
        authorized_keys=authorized_keys,
        session_env=session_env,
    )
    return NetnsHost(
        name=spec.name,
        address=link.address,
        port=22,
        user=user,
        identity_file=client_key,
        known_hosts_line=known_hosts_line(link.address, 22, public_line),
        host_dir=host_dir,
        config_path=config_path,
        namespace=link.namespace,
        veth=link.veth,
        sshd_config=config,
        sshd_argv=sshd.sshd_command(link.namespace, spec.name, home, tmp, config),
    )


def _start_announcers(cluster: Cluster, specs: Sequence[ClusterHostSpec]) -> None:
    announcing = [
        (host, spec) for host, spec in zip(cluster.hosts, specs, strict=True) if spec.announce
    ]
    for host, spec in announcing:
        host.begin_announcer(spec.announce, spec.fleet_txt)
    cluster.record_processes()
    deadline = time.monotonic() + REGISTER_TIMEOUT_S + len(announcing) * 0.5
    for host, _ in announcing:
        host.wait_announcer(deadline)
