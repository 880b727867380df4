"""Without root: the same cluster API on SimSshHost servers at 127.0.0.1 (no namespaces/faults)."""

from __future__ import annotations

import asyncio
import getpass
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tests.cluster import gpuconf, sshd
from tests.cluster.announcer import REGISTER_TIMEOUT_S
from tests.cluster.cleanup import cleanup_stale_runs, teardown_run
from tests.cluster.clientfiles import write_client_files
from tests.cluster.hosts import ClusterHost, ClusterHostSpec, running_announcers
from tests.cluster.state import RecordedProcess, RunState, new_run_id, state_base_dir

if TYPE_CHECKING:
    from fleet.sim.sshhost import SimSshHost

LOCAL_VERIFY_TIMEOUT_S = 30.0


@dataclass
class LocalHost(ClusterHost):
    """A SimSshHost on 127.0.0.1: same fields as a namespace host; namespace is None."""

    server: SimSshHost | None = field(default=None, repr=False)


class LocalCluster:
    """The no-root cluster: hosts are in-process asyncssh servers; close with `await aclose()`."""

    mode = "local"

    def __init__(self, state: RunState, hosts: Sequence[LocalHost], client_key: Path) -> None:
        self.state = state
        self.hosts: list[LocalHost] = list(hosts)
        self.client_key = client_key
        self.run_dir = Path(state.run_dir)
        self.known_hosts_file = self.run_dir / "known_hosts"
        self.inventory_file = self.run_dir / "inventory.yaml"
        self.ssh_config_file = self.run_dir / "ssh_config"
        self.controller_address = "127.0.0.1"
        self.setup_seconds = 0.0
        self.closing = False

    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def state_file(self) -> Path:
        return self.state.path

    def host(self, name: str) -> LocalHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"no host named {name!r} in cluster {self.run_id}")

    def write_client_files(self) -> None:
        write_client_files(
            self.hosts, self.known_hosts_file, self.inventory_file, self.ssh_config_file
        )

    def record_processes(self) -> None:
        if self.closing:
            return
        self.state.processes = running_announcers(self.hosts)
        self.state.save()

    async def aclose(self) -> None:
        """Stops announcers and servers (which kill the commands they started), removes files."""
        for host in self.hosts:  # all say goodbye at once (~0.3 s each), then are reaped
            host.request_announcer_stop()
        for host in self.hosts:
            host.stop_announcer()
        self.closing = True
        for host in self.hosts:
            if host.server is not None:
                await host.server.stop()
        teardown_run(self.state)


async def start_local_cluster(specs: Sequence[ClusterHostSpec]) -> LocalCluster:
    """One SimSshHost per spec, each with its own host key, home, GPU env and port."""
    from fleet.sim.sshhost import SimSshHost

    started = time.monotonic()
    cleanup_stale_runs()
    run_id = new_run_id()
    run_dir = state_base_dir() / run_id
    state = RunState(
        run_id=run_id,
        mode="local",
        run_dir=str(run_dir),
        owner=RecordedProcess.of(os.getpid(), "owner"),
    )
    state.save()
    cluster = LocalCluster(state, [], run_dir / "client_ed25519")
    hosts = cluster.hosts
    try:
        run_dir.mkdir(mode=0o700, parents=True)
        client_public_line = sshd.write_ed25519_key(
            cluster.client_key, f"fleet-test-cluster-{run_id}"
        )
        authorized_keys = run_dir / "authorized_keys"
        authorized_keys.write_text(client_public_line + "\n")
        user = getpass.getuser()
        for spec in specs:
            host_dir = run_dir / "hosts" / spec.name
            host_dir.mkdir(parents=True)
            host_key = host_dir / "ssh_host_ed25519_key"
            sshd.write_ed25519_key(host_key, f"host-{spec.name}")
            config_path = None
            env: dict[str, str] = {}
            if spec.gpus is not None:
                config_path = host_dir / "gpus.conf"
                gpuconf.write_gpus(config_path, spec.gpus)
                env = gpuconf.session_env(config_path, run_dir)
            server = SimSshHost(spec.name, host_key, authorized_keys, env, host_dir / "home")
            port = await server.start()
            hosts.append(
                LocalHost(
                    name=spec.name,
                    address=server.address,
                    port=port,
                    user=user,
                    identity_file=cluster.client_key,
                    known_hosts_line=server.known_hosts_line(),
                    host_dir=host_dir,
                    config_path=config_path,
                    server=server,
                    on_process_change=cluster.record_processes,
                )
            )
        cluster.write_client_files()
        await _verify_local(cluster)
        announcing = [
            (host, spec) for host, spec in zip(hosts, specs, strict=True) if spec.announce
        ]
        for host, spec in announcing:
            host.begin_announcer(spec.announce, spec.fleet_txt)
        deadline = time.monotonic() + REGISTER_TIMEOUT_S + len(announcing) * 0.5
        for host, _ in announcing:
            host.wait_announcer(deadline)
        cluster.setup_seconds = time.monotonic() - started
        return cluster
    except BaseException:
        await cluster.aclose()
        raise


async def _verify_local(cluster: LocalCluster) -> None:
    """Logs in to each server once over asyncssh with the client key and known_hosts."""
    import asyncssh  # the CLI's `down`/`status` should not pay for it

    async def verify(host: LocalHost) -> None:
        async with asyncssh.connect(
            host.address,
            host.port,
            username=host.user,
            client_keys=[str(cluster.client_key)],
            known_hosts=str(cluster.known_hosts_file),
            config=None,
            connect_timeout=LOCAL_VERIFY_TIMEOUT_S,
        ) as connection:
            await connection.run("true", check=True, timeout=LOCAL_VERIFY_TIMEOUT_S)

    await asyncio.gather(*(verify(host) for host in cluster.hosts))
