"""`fleet demo` / `make demo`: a simulated GPU fleet on this machine, watched live.

Real code paths throughout — SSH servers on 127.0.0.1, the shipped probe, host-key pinning, the
SQLite database — with only the GPUs simulated (the simulated NVML library, built with gcc).
Everything lives in a temporary directory that is removed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

from fleet.sim.gpus import SimGpu, SimHostGpus, write_config

DEMO_HOSTS: tuple[tuple[str, int, str, int], ...] = (
    # name, GPU count, model, memory GiB
    ("atlas", 8, "NVIDIA H100 80GB HBM3", 80),
    ("boreas", 4, "NVIDIA A100-SXM4-40GB", 40),
    ("cygnus", 2, "NVIDIA GeForce RTX 4090", 24),
    ("draco", 1, "NVIDIA L4", 24),
    ("eridanus", 4, "NVIDIA A100-SXM4-80GB", 80),
    ("fornax", 0, "", 0),
)
MAX_DEMO_SECONDS = 3600.0


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
            memory_used_bytes=int(total * (rng.uniform(0.3, 0.9) if busy else 0.01)),
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
        temp = min(95.0, max(28.0, float(gpu.temperature_c or 30) + (util - 50) / 25
                             + rng.uniform(-2, 2)))
        power = (gpu.power_limit_w or 300.0) * (0.12 + 0.8 * util / 100)
        drifted.append(replace(gpu, utilization_gpu_pct=round(util),
                               temperature_c=round(temp), power_draw_w=round(power, 1)))
    return replace(gpus, gpus=drifted)


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
            hosts.append(DemoHost(name, config_path, gpus, port))
        inventory = workdir / "inventory.yaml"
        lines = ["# fleet demo inventory (generated)", "hosts:"]
        for host in hosts:
            lines += [f"  {host.name}:", "    address: 127.0.0.1", f"    port: {host.port}",
                      f"    identity_file: {client_key}"]
        lines += ["  controller:", "    connection: local"]
        inventory.write_text("\n".join(lines) + "\n")
        drifter = asyncio.create_task(_drift_forever(hosts, rng))
        try:
            yield inventory, workdir / "fleet.db", workdir / "ssh"
        finally:
            drifter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drifter
    finally:
        for server in servers:
            await server.stop()


async def _drift_forever(hosts: list[DemoHost], rng: random.Random) -> None:
    deadline = time.monotonic() + MAX_DEMO_SECONDS
    while time.monotonic() < deadline:
        await asyncio.sleep(2.0)
        for host in hosts:
            host.gpus = drift(host.gpus, rng)
            await asyncio.to_thread(write_config, host.config_path, host.gpus)


async def run_demo(rounds: int, interval: float) -> int:
    """Start the demo fleet and print `fleet status` every `interval` seconds, `rounds` times."""
    from fleet.cli.status_view import render_status
    from fleet.service import open as open_fleet
    from fleet.ssh.options import SshOptions

    workdir = Path(tempfile.mkdtemp(prefix="fleet-demo-"))
    try:
        async with demo_fleet(workdir) as (inventory, database, ssh_dir):
            options = SshOptions(known_hosts_files=(), pinned_hosts_file=ssh_dir / "known_hosts",
                                 accept_new=True)
            async with open_fleet(str(database), inventory, ssh_options=options) as service:
                for round_number in range(rounds):
                    statuses = await service.status(timeout=10)
                    if sys.stdout.isatty():
                        print("\x1b[H\x1b[2J", end="")
                    print(f"fleet demo — round {round_number + 1}/{rounds}, "
                          f"database {database}\n")
                    print(render_status(statuses), flush=True)
                    if round_number + 1 < rounds:
                        await asyncio.sleep(interval)
                history = await service.gpu_history(since=time.time() - 3600,
                                                    until=time.time(), bucket_s=60)
                print(f"\nrecorded {len(history)} per-minute GPU history points; "
                      "the real TUI replaces this view (`fleet tui`).")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m fleet.demo`."""
    parser = argparse.ArgumentParser(prog="fleet demo", description=__doc__)
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("FLEET_DEMO_ROUNDS", 5)))
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args(argv)
    try:
        return asyncio.run(run_demo(max(1, args.rounds), max(0.2, args.interval)))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
