"""`fleet demo`: a simulated GPU fleet on this machine (`demo_session`), for the UI to watch.

Real code paths throughout — SSH servers on 127.0.0.1, the shipped probe, host-key pinning, the
SQLite database — with only the GPUs simulated (the simulated NVML library, built with gcc).
Everything lives in a temporary directory that is removed on exit; tasks still running then
are cancelled first. The UI itself is opened by the CLI (fleet/cli/tui_launch.py), not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.sim.gpus import SimGpu, SimHostGpus, next_temperature, write_config

if TYPE_CHECKING:
    from fleet.service import Fleet
    from fleet.ssh.options import SshOptions

DEMO_HOSTS: tuple[tuple[str, int, str, int], ...] = (
    # name, GPU count, model, memory GiB
    ("atlas", 8, "NVIDIA H100 80GB HBM3", 80),
    ("boreas", 4, "NVIDIA A100-SXM4-40GB", 40),
    ("cygnus", 2, "NVIDIA GeForce RTX 4090", 24),
    ("draco", 1, "NVIDIA L4", 24),
    ("eridanus", 4, "NVIDIA A100-SXM4-80GB", 80),
    ("fornax", 0, "", 0),
    ("gemini", 8, "NVIDIA H100 80GB HBM3", 80),
    ("hydra", 2, "NVIDIA L40S", 48),
)
DROPOUT_HOST = "draco"  # leaves the network for part of every scenario cycle, then returns
HOT_GPU = ("boreas", 3)  # heats past the temperature ceiling, then cools down again
CYCLE_S = 90.0  # the scenario repeats: dropout during [30, 60) s, overheating during [10, 45) s
DRIFT_INTERVAL_S = 2.0
MAX_DEMO_SECONDS = 3600.0
IDLE_MEMORY_MIB = (180, 420)  # what an idle GPU's driver context holds: below fleet's "in use"
STOP_GRACE_S = 2.0  # on exit, a running task gets SIGTERM, then SIGKILL after this long
STOP_DEADLINE_S = 20.0  # and cancelling every task may take at most this long
STATUS_INTERVAL_S = 2.0  # between two rounds of `fleet demo --text`
log = logging.getLogger("fleet.demo")


@dataclass
class DemoHost:
    """One simulated host: its SSH server, its GPU config file and its drifting GPU state."""

    name: str
    config_path: Path
    gpus: SimHostGpus
    port: int = 0


def initial_gpus(name: str, count: int, model: str, memory_gib: int, rng: random.Random
                 ) -> SimHostGpus:
    """A host's GPUs with plausible, varied starting values and deterministic UUIDs."""
    import uuid

    gpus = []
    for index in range(count):
        total = memory_gib * 1024**3
        busy = rng.random() < 0.5
        gpus.append(SimGpu(
            name=model,
            uuid="GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"fleet-demo.{name}.{index}")),
            pci_bus_id=f"00000000:{0x10 + index:02X}:00.0",
            memory_total_bytes=total,
            memory_used_bytes=(int(total * rng.uniform(0.3, 0.9)) if busy
                               else rng.randint(*IDLE_MEMORY_MIB) << 20),
            utilization_gpu_pct=rng.randint(40, 99) if busy else 0,
            utilization_memory_pct=rng.randint(10, 60) if busy else 0,
            temperature_c=rng.randint(55, 80) if busy else rng.randint(30, 40),
            power_draw_w=rng.uniform(200, 600) if busy else rng.uniform(40, 70),
            power_limit_w=700.0 if "H100" in model else 400.0,
            fan_speed_pct=rng.randint(30, 70),
            performance_state=0 if busy else 8,
            clock_sm_mhz=1980 if busy else 210,
            clock_mem_mhz=2619,
            ecc_errors_corrected=0,
            ecc_errors_uncorrected=0,
            retired_pages_pending=False,
            processes=[(rng.randint(2000, 60000), int(total * 0.3))] if busy else [],
            lost=False,
            # Data-centre boards have no fan of their own: NVML says "not supported".
            errors={"nvmlDeviceGetFanSpeed": 3} if "SXM" in model or "HBM" in model else {},
        ))
    return SimHostGpus(gpus=gpus)


def drift(gpus: SimHostGpus, rng: random.Random) -> SimHostGpus:
    """The next reading: utilisation, memory, temperature and power wander like real jobs."""
    drifted = []
    for gpu in gpus.gpus:
        util = min(100.0, max(0.0, float(gpu.utilization_gpu_pct or 0) + rng.uniform(-12, 12)))
        # Settles toward its load's steady temperature, below the hot threshold (fleet.sim).
        temp = next_temperature(float(gpu.temperature_c or 30), util, rng.uniform(-1, 1))
        power = (gpu.power_limit_w or 300.0) * (0.12 + 0.8 * util / 100)
        drifted.append(replace(gpu, utilization_gpu_pct=round(util),
                               temperature_c=round(temp), power_draw_w=round(power, 1)))
    return replace(gpus, gpus=drifted)


class DropoutProxy:
    """A TCP relay on a fixed 127.0.0.1 port in front of a host; `unplug()` makes it vanish."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._relays: set[asyncio.Task[None]] = set()

    async def plug(self) -> int:
        """Listen (again, on the same port once chosen); returns the port."""
        if self._server is None:
            self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port,
                                                      reuse_address=True)
            self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def unplug(self) -> None:
        """Stop listening and cut every relayed connection, like a host leaving the network."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            await self._server.wait_closed()
            self._server = None
        for relay in list(self._relays):
            relay.cancel()
        await asyncio.gather(*self._relays, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        pumps = [asyncio.create_task(_pump(reader, up_writer)),
                 asyncio.create_task(_pump(up_reader, writer))]
        self._relays.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._relays.difference_update(pumps)
            for end in (writer, up_writer):
                end.transport.abort()
                self._writers.discard(end)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()


@contextlib.asynccontextmanager
async def demo_fleet(workdir: Path, seed: int = 7) -> AsyncIterator[tuple[Path, Path, Path]]:
    """Start the simulated hosts; yields (inventory path, database path, ssh data dir)."""
    from fleet.sim.build import build_sim_tools
    from fleet.sim.sshhost import SimSshHost, generate_keypair

    tools = await asyncio.to_thread(build_sim_tools)
    rng = random.Random(seed)
    client_key, _client_pub = generate_keypair(workdir / "client")
    authorized = workdir / "client" / "authorized_keys"
    authorized.write_bytes(_client_pub.read_bytes())
    hosts: list[DemoHost] = []
    servers: list[SimSshHost] = []
    proxy: DropoutProxy | None = None
    try:
        for name, count, model, memory in DEMO_HOSTS:
            home = workdir / "hosts" / name
            home.mkdir(parents=True)
            config_path = home / "gpus.conf"
            gpus = initial_gpus(name, count, model, memory, rng)
            write_config(config_path, gpus)
            host_key, _ = generate_keypair(home / "hostkey")
            server = SimSshHost(name, host_key, authorized, tools.env(config_path), home)
            port = await server.start()
            servers.append(server)
            if name == DROPOUT_HOST:
                proxy = DropoutProxy(port)
                port = await proxy.plug()
            hosts.append(DemoHost(name, config_path, gpus, port))
        inventory = workdir / "inventory.yaml"
        lines = ["# fleet demo inventory (generated)", "hosts:"]
        for host in hosts:
            lines += [f"  {host.name}:", "    address: 127.0.0.1", f"    port: {host.port}",
                      f"    identity_file: {client_key}"]
        inventory.write_text("\n".join(lines) + "\n")
        scenario = asyncio.create_task(_scenario_forever(hosts, proxy, rng))
        try:
            yield inventory, workdir / "fleet.db", workdir / "ssh"
        finally:
            scenario.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await scenario
    finally:
        if proxy is not None:
            await proxy.unplug()
        for server in servers:
            await server.stop()


def overheat(gpus: SimHostGpus, index: int, phase_s: float) -> SimHostGpus:
    """Force GPU `index` hot while the scenario says so (ramps to 92 °C), else leave it."""
    if not 10.0 <= phase_s < 45.0 or index >= len(gpus.gpus):
        return gpus
    hot = replace(gpus.gpus[index], temperature_c=min(92, 80 + int(phase_s - 10)),
                  utilization_gpu_pct=100)
    return replace(gpus, gpus=[hot if i == index else g for i, g in enumerate(gpus.gpus)])


async def _scenario_forever(hosts: list[DemoHost], proxy: DropoutProxy | None,
                            rng: random.Random) -> None:
    started = time.monotonic()
    deadline = started + MAX_DEMO_SECONDS
    while time.monotonic() < deadline:
        await asyncio.sleep(DRIFT_INTERVAL_S)
        phase = (time.monotonic() - started) % CYCLE_S
        for host in hosts:
            host.gpus = drift(host.gpus, rng)
            shown = overheat(host.gpus, HOT_GPU[1], phase) if host.name == HOT_GPU[0] \
                else host.gpus
            await asyncio.to_thread(write_config, host.config_path, shown)
        if proxy is not None:
            if 30.0 <= phase < 60.0:
                await proxy.unplug()
            else:
                await proxy.plug()


DEMO_SCRIPTS = {
    "train.py": (
        "import os, sys, time\n"
        "steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30\n"
        "print('demo training on GPUs', os.environ.get('CUDA_VISIBLE_DEVICES'), flush=True)\n"
        "for step in range(steps):\n"
        "    print(f'step {step + 1}/{steps} loss {2.0 / (step + 1):.3f}', flush=True)\n"
        "    time.sleep(1)\n"
        "print('done', flush=True)\n"),
    "hello.sh": "#!/bin/sh\necho \"hello from $(hostname) GPUs=$CUDA_VISIBLE_DEVICES\"\n",
}


def write_demo_scripts(directory: Path) -> list[str]:
    """The demo tasks the dispatch dialog offers; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in DEMO_SCRIPTS.items():
        path = directory / name
        path.write_text(text)
        path.chmod(0o755)
        paths.append(str(path))
    return paths


def demo_ssh_options(ssh_dir: Path) -> SshOptions:
    """SSH options for the demo: its own pinned-keys file, first keys accepted (all local)."""
    from fleet.ssh.options import SshOptions

    return SshOptions(known_hosts_files=(), pinned_hosts_file=ssh_dir / "known_hosts",
                      accept_new=True)


@dataclass(frozen=True)
class DemoSession:
    """A running simulated fleet: fleet opened on it, the demo scripts, where it all lives."""

    fleet: Fleet
    scripts: tuple[str, ...]
    workdir: Path
    database: str  # the file, or the URL given with --db (password hidden)


@contextlib.asynccontextmanager
async def demo_session(workdir: Path | None = None, *, seed: int = 7,
                       db_url: str | None = None) -> AsyncIterator[DemoSession]:
    """Start the simulated hosts and open fleet on them; everything stops on exit.

    The demo records into `db_url` when given (kept afterwards), else a file in `workdir`.

    On exit the tasks still queued or running are cancelled through the Fleet API (their
    process groups get SIGTERM, then SIGKILL), so nothing outlives the demo; then the monitor,
    the database and the hosts stop, and a temporary `workdir` (the default) is removed.
    """
    from fleet.service import open as open_fleet
    from fleet.storage import redact_url

    root = workdir if workdir is not None else Path(tempfile.mkdtemp(prefix="fleet-demo-"))
    try:
        async with demo_fleet(root, seed) as (inventory, database, ssh_dir), open_fleet(
                db_url or str(database), inventory, ssh_options=demo_ssh_options(ssh_dir)
        ) as fleet:
            scripts = tuple(write_demo_scripts(root / "scripts"))
            shown = redact_url(db_url) if db_url else str(database)
            try:
                yield DemoSession(fleet, scripts, root, shown)
            finally:
                for problem in await cancel_active_tasks(fleet):
                    log.warning("demo: %s", problem)
    finally:
        if workdir is None:
            shutil.rmtree(root, ignore_errors=True)


async def cancel_active_tasks(fleet: Fleet, *, grace_s: float = STOP_GRACE_S,
                              deadline_s: float = STOP_DEADLINE_S) -> list[str]:
    """Cancel every queued or running task and wait for them, at most `deadline_s` in all.

    Returns what could not be done, one line per task (empty when every task stopped).
    """
    from db.types import ACTIVE_TASK_STATES

    active = await fleet.tasks(states=ACTIVE_TASK_STATES)
    if not active:
        return []
    jobs = {asyncio.create_task(fleet.cancel(task.id, grace_s=grace_s)): task.id
            for task in active}
    done, pending = await asyncio.wait(jobs, timeout=deadline_s)
    problems = [f"task {jobs[job]} not stopped within {deadline_s:g}s" for job in pending]
    for job in pending:
        job.cancel()
    for job in done:
        error = job.exception()
        if error is not None:
            problems.append(f"task {jobs[job]} not cancelled: {error}")
    if pending:
        await asyncio.wait(pending)
    return problems


async def print_status_rounds(session: DemoSession, rounds: int,
                              interval_s: float = STATUS_INTERVAL_S) -> None:
    """Print `fleet status` of the demo fleet `rounds` times, `interval_s` apart."""
    from fleet.render.status_view import render_status

    for round_number in range(rounds):
        statuses = await session.fleet.status(timeout=10)
        if sys.stdout.isatty():
            print("\x1b[H\x1b[2J", end="")
        print(f"fleet demo — round {round_number + 1}/{rounds}, database {session.database}\n")
        print(render_status(statuses), flush=True)
        if round_number + 1 < rounds:
            await asyncio.sleep(interval_s)


@contextlib.contextmanager
def exit_on_hangup() -> Iterator[None]:
    """While the block runs, a closed terminal (SIGHUP) or a kill (SIGTERM) unwinds like q:
    tasks cancelled, servers stopped, the directory removed."""
    previous = {number: signal.signal(number, _exit_on_signal)
                for number in (signal.SIGHUP, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _exit_on_signal(number: int, _frame: object) -> None:
    raise SystemExit(128 + number)
