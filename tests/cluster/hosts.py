"""Test hosts: what a test asks for (ClusterHostSpec) and the live host with its fault controls."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tests.cluster import gpuconf, netns, sshd
from tests.cluster.announcer import REGISTER_TIMEOUT_S, Announcer
from tests.cluster.netns import FaultUnavailable
from tests.cluster.state import RecordedProcess

if TYPE_CHECKING:
    from fleet.sim.gpus import SimHostGpus

NEEDS_ROOT = "needs root: network namespaces"
HOSTNAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
SSHD_START_TIMEOUT_S = 10.0
ANNOUNCE_SERVICES = frozenset({"_ssh._tcp", "_fleet._tcp", "_sftp-ssh._tcp"})


@dataclass(frozen=True)
class ClusterHostSpec:
    """One host a test wants: its name (also its hostname), its GPUs, and what it announces.

    gpus=None is a host without an NVIDIA driver (no library, no nvidia-smi); SimHostGpus(gpus=[])
    is a host with the driver and zero GPUs. announce holds mDNS service types to publish
    ("_ssh._tcp", "_fleet._tcp", "_sftp-ssh._tcp"); fleet_txt overrides the `_fleet._tcp` TXT.
    """

    name: str
    gpus: SimHostGpus | None = None
    announce: AbstractSet[str] = frozenset()
    fleet_txt: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if not HOSTNAME_PATTERN.match(self.name):
            raise ValueError(
                f"host name {self.name!r}: use lowercase letters, digits and '-' (a hostname)"
            )
        object.__setattr__(self, "announce", frozenset(self.announce))
        unknown = self.announce - ANNOUNCE_SERVICES
        if unknown:
            raise ValueError(f"host {self.name}: unknown mDNS service types {sorted(unknown)}")


@dataclass
class ClusterHost:
    """A reachable test host. Fault controls that need namespaces raise FaultUnavailable here."""

    name: str
    address: str
    port: int
    user: str
    identity_file: Path
    known_hosts_line: str
    host_dir: Path
    config_path: Path | None  # the simulated-GPU config file; None: no NVIDIA driver on the host
    namespace: str | None = None
    announcer: Announcer | None = field(default=None, repr=False)
    # Set by the cluster: keep the run's state file in step with this host's processes.
    on_process_change: Callable[[], None] = field(default=lambda: None, repr=False)

    @property
    def home_dir(self) -> Path:
        """The host's home directory as seen from the controller (the host sees it as $HOME)."""
        return self.host_dir / "home"

    def set_gpus(self, gpus: SimHostGpus) -> None:
        """Rewrites this host's GPU config atomically; its next NVML call sees the change."""
        if self.config_path is None:
            raise FaultUnavailable(
                f"{self.name}: started without a driver (gpus=None); give it GPUs at start"
            )
        gpuconf.write_gpus(self.config_path, gpus)

    def announcer_argv_prefix(self) -> list[str]:
        return []

    def start_announcer(
        self, services: Iterable[str], fleet_txt: Mapping[str, str] | None = None
    ) -> None:
        """Publishes mDNS services (bound to this host's address only); waits until registered."""
        self.begin_announcer(services, fleet_txt)
        self.wait_announcer(time.monotonic() + REGISTER_TIMEOUT_S)

    def begin_announcer(
        self, services: Iterable[str], fleet_txt: Mapping[str, str] | None = None
    ) -> None:
        if self.announcer is not None:
            raise RuntimeError(f"{self.name}: announcer already running")
        txt_by_service = {}
        for service in services:
            if service not in ANNOUNCE_SERVICES:
                raise ValueError(f"{self.name}: unknown mDNS service type {service!r}")
            txt_by_service[service] = (
                dict(fleet_txt or self.default_fleet_txt()) if service == "_fleet._tcp" else {}
            )
        self.announcer = Announcer.start(
            argv_prefix=self.announcer_argv_prefix(),
            address=self.address,
            hostname=self.name,
            port=self.port,
            services=txt_by_service,
            log_path=self.host_dir / "announcer.log",
        )
        self.on_process_change()

    def wait_announcer(self, deadline: float) -> None:
        assert self.announcer is not None
        self.announcer.wait_ready(deadline)

    def request_announcer_stop(self) -> None:
        """SIGTERM to the announcer without waiting; `stop_announcer` then waits for it."""
        if self.announcer is not None:
            self.announcer.request_stop()

    def stop_announcer(self) -> None:
        """SIGTERM: the announcer sends goodbye packets, so browsers see the host leave at once."""
        if self.announcer is not None:
            self.announcer.stop()
            self.announcer = None
            self.on_process_change()

    def default_fleet_txt(self) -> dict[str, str]:
        gpus = gpuconf.read_gpus(self.config_path) if self.config_path else None
        return gpuconf.fleet_txt(gpus, ssh_port=self.port)

    def link_down(self) -> None:
        raise FaultUnavailable(NEEDS_ROOT)

    def link_up(self) -> None:
        raise FaultUnavailable(NEEDS_ROOT)

    def kill_sshd(self) -> None:
        raise FaultUnavailable(NEEDS_ROOT)

    def start_sshd(self) -> None:
        raise FaultUnavailable(NEEDS_ROOT)

    def freeze_sshd(self) -> None:
        raise FaultUnavailable(NEEDS_ROOT)

    def thaw_sshd(self) -> None:
        raise FaultUnavailable(NEEDS_ROOT)

    def netem(self, *, delay_ms: float = 0.0, loss_pct: float = 0.0) -> None:
        raise FaultUnavailable(NEEDS_ROOT)

    def clear_netem(self) -> None:
        raise FaultUnavailable(NEEDS_ROOT)

    def rotate_host_key(self, *, update_known_hosts: bool = False) -> str:
        raise FaultUnavailable(NEEDS_ROOT)

    def processes(self) -> list[int]:
        raise FaultUnavailable(NEEDS_ROOT)

    def crash(self) -> None:
        raise FaultUnavailable(NEEDS_ROOT)

    def reboot(self) -> None:
        raise FaultUnavailable(NEEDS_ROOT)


@dataclass
class NetnsHost(ClusterHost):
    """A host in its own network namespace with a real OpenSSH sshd; every fault is reversible."""

    veth: str = ""
    sshd_config: Path = Path()
    sshd_argv: list[str] = field(default_factory=list)
    sshd_process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    sshd_record: RecordedProcess | None = None
    listening_lines_before_start: int = 0
    # Set by the cluster: keep its known_hosts file in step with this host's key when asked.
    on_host_key_change: Callable[[], None] = field(default=lambda: None, repr=False)

    @property
    def host_key_path(self) -> Path:
        return self.host_dir / "ssh_host_ed25519_key"

    @property
    def tmp_dir(self) -> Path:
        """The host's private /tmp as seen from the controller."""
        return self.host_dir / "tmp"

    @property
    def sshd_log(self) -> Path:
        return self.host_dir / "sshd.log"

    def announcer_argv_prefix(self) -> list[str]:
        return netns.netns_exec(self.require_namespace())

    def require_namespace(self) -> str:
        if self.namespace is None:
            raise FaultUnavailable(NEEDS_ROOT)
        return self.namespace

    def launch_sshd(self) -> None:
        """Starts sshd without waiting; wait_sshd_listening() confirms it."""
        if self.sshd_record is not None and self.sshd_record.is_alive():
            raise RuntimeError(f"{self.name}: sshd already running (pid {self.sshd_record.pid})")
        self.listening_lines_before_start = self._listening_lines()
        self.sshd_process = sshd.start_sshd(self.sshd_argv, self.sshd_log)
        self.sshd_record = RecordedProcess.of(self.sshd_process.pid, f"sshd:{self.name}")
        self.on_process_change()

    def _listening_lines(self) -> int:
        try:
            return self.sshd_log.read_text(errors="replace").count("Server listening on")
        except FileNotFoundError:
            return 0

    def wait_sshd_listening(self, deadline: float) -> None:
        """Waits for sshd's own "Server listening" line: works even while the link is down."""
        assert self.sshd_process is not None
        while self._listening_lines() <= self.listening_lines_before_start:
            if self.sshd_process.poll() is not None:
                log_tail = self.sshd_log.read_text(errors="replace")[-2000:]
                raise RuntimeError(
                    f"{self.name}: sshd exited ({self.sshd_process.returncode}): {log_tail}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name}: sshd not listening after {SSHD_START_TIMEOUT_S} s"
                )
            time.sleep(0.01)

    def start_sshd(self) -> None:
        self.launch_sshd()
        self.wait_sshd_listening(time.monotonic() + SSHD_START_TIMEOUT_S)

    def kill_sshd(self) -> None:
        """SIGKILLs the listening sshd (open sessions keep running, as on a real host)."""
        if self.sshd_record is None:
            return
        self.thaw_sshd()  # a stopped process still dies from SIGKILL, but keep the state honest
        if self.sshd_record.is_alive():
            self._signal_sshd(signal.SIGKILL)
        if self.sshd_process is not None:
            self.sshd_process.wait(timeout=SSHD_START_TIMEOUT_S)
        self.sshd_record = None
        self.sshd_process = None
        self.on_process_change()

    def _signal_sshd(self, signum: int) -> None:
        if self.sshd_record is None or not self.sshd_record.is_alive():
            raise RuntimeError(f"{self.name}: sshd is not running")
        os.kill(self.sshd_record.pid, signum)

    def freeze_sshd(self) -> None:
        """SIGSTOP: the kernel still accepts TCP connections, but no SSH banner ever comes."""
        self._signal_sshd(signal.SIGSTOP)

    def thaw_sshd(self) -> None:
        if self.sshd_record is not None and self.sshd_record.is_alive():
            self._signal_sshd(signal.SIGCONT)

    def link_down(self) -> None:
        """Takes the root-side veth down: the host drops off the bridge (packets vanish)."""
        netns.set_link(self.veth, up=False)

    def link_up(self) -> None:
        netns.set_link(self.veth, up=True)

    def netem(self, *, delay_ms: float = 0.0, loss_pct: float = 0.0) -> None:
        """Delays/drops this host's outgoing packets (tc netem); FaultUnavailable without netem."""
        netns.set_netem(self.require_namespace(), delay_ms=delay_ms, loss_pct=loss_pct)

    def clear_netem(self) -> None:
        netns.clear_netem(self.require_namespace())

    def rotate_host_key(self, *, update_known_hosts: bool = False) -> str:
        """New host key, sshd restarted; returns the new known_hosts line.

        By default the cluster's known_hosts file keeps the old key, so clients see a changed key.
        """
        public_line = sshd.write_ed25519_key(self.host_key_path, f"host-{self.name}")
        self.kill_sshd()
        self.start_sshd()
        self.known_hosts_line = known_hosts_line(self.address, self.port, public_line)
        if update_known_hosts:
            self.on_host_key_change()
        return self.known_hosts_line

    def processes(self) -> list[int]:
        """PIDs of every process running on this host (sshd, sessions, tasks, announcer)."""
        return netns.namespace_pids([self.require_namespace()])

    def crash(self) -> None:
        """Power loss: SIGKILL everything on the host, announcer too (no goodbye); stays down."""
        self.thaw_sshd()
        netns.kill_pids(self.processes())
        deadline = time.monotonic() + SSHD_START_TIMEOUT_S
        while self.processes():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: processes survive SIGKILL: {self.processes()}")
            time.sleep(0.01)
        if self.sshd_process is not None:
            self.sshd_process.wait(timeout=SSHD_START_TIMEOUT_S)
        if self.announcer is not None:
            self.announcer.stop()  # already dead: this only reaps it
            self.announcer = None
        self.sshd_process = None
        self.sshd_record = None
        self.on_process_change()

    def reboot(self) -> None:
        """crash(), then an empty /tmp and a fresh sshd, as after a real reboot (no announcer)."""
        self.crash()
        for entry in self.tmp_dir.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self.start_sshd()


def known_hosts_line(address: str, port: int, public_line: str) -> str:
    key_type, key_data = public_line.split()[:2]
    host_field = address if port == 22 else f"[{address}]:{port}"
    return f"{host_field} {key_type} {key_data}"


def running_announcers(hosts: Iterable[ClusterHost]) -> list[RecordedProcess]:
    """Records of the hosts' announcers that still run (teardown tells them all to stop first,
    so one may exit between the poll and the read of its start time)."""
    records = []
    for host in hosts:
        if host.announcer is not None and host.announcer.process.poll() is None:
            record = RecordedProcess.if_running(host.announcer.process.pid,
                                                f"announcer:{host.name}")
            if record is not None:
                records.append(record)
    return records
